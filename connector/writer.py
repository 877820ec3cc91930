"""A writer-run: one writer's appends to one segment under one transaction.

The write side of the TransactionBuffer role: register before the first append
(H1, and the H3 fence), append with the txn, writer and deployment ids in one property, record
the first position once. Metadata cost is one registration and one record per
run, whatever the number of messages. Shared by the client Producer and the
Spark sink's tasks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pulsar

from pulsar_txn.entry_acks import EntryAcks, send_columns
from pulsar_txn.errors import AppendFailed, DeploymentChanged, SegmentSealed
from pulsar_txn.metastore.base import MetadataStore
from pulsar_txn.records import Position, TxnId, txn_properties

# A send the broker acknowledged without a position: its deduplication took it for a
# re-send of an earlier message. That is also its answer to a send it never stored
# (seen when pulsar-client 3.x resets its connection while the send is in flight, see
# docs/durability.md), so such an append fails the transaction, never commits it.
NO_POSITION = ("was acknowledged by the broker without a position (its deduplication "
               "took it for a re-send): whether it is stored is unknown")


# How long the first append of a per-entry run waits for its answer after the flush
# (pulsar-client's send timeout, 30 s by default, answers sooner).
_FIRST_WAIT_S = 120.0


class WriterRun:
    def __init__(self, store: MetadataStore, txn_id: TxnId, segment: str, writer: str,
                 producer, fence: Callable[[], None] | None = None) -> None:
        self.store = store
        self.txn_id = txn_id
        self.segment = segment
        self.writer = writer
        self.producer = producer  # the pulsar.Producer of the segment
        self.first: Position | None = None
        self.errors: list[str] = []
        self._registered = False
        # The run may have stored an entry whose position is not recorded (a send failed
        # other than by a definite refusal, or its position could not be recorded). Such
        # a run never withdraws (GC would take that entry for committed, H1/H2) and never
        # records a first position (a lower, unplaced entry may exist): readers treat a
        # registration without a position as "somewhere past what I hold".
        self._unplaced = False
        # sends handed to the producer whose callback has not run yet; a plain lock and
        # an event, not a Condition: the callback runs once per message on the client's
        # I/O thread, and a Condition is entered through Python code
        self._outstanding = 0
        self._count = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._failed_send: str | None = None  # a send raised (see _raised)
        self._lock = threading.Lock()
        # Held by every send while the run has no first position: appends are then one
        # at a time, so the first position recorded is the lowest the run appended.
        self._first_lock = threading.Lock()
        # first: a writer id the property cannot carry is refused before registering.
        # The form is the one the registration answers (the namespace's at that moment,
        # read atomically with it): a switch reaches a running writer at its next run.
        self._wire = store.wire_format
        self._txn_props = txn_properties(txn_id, writer, store.deployment, self._wire)
        # A scalable topic's segment: checked ACTIVE after registering (the seal fence),
        # and a TopicTerminated append is re-routed by the producer, not an error here.
        self._fence = fence
        self._entries: EntryAcks | None = None  # see acknowledge_per_entry

    def acknowledge_per_entry(self, max_messages: int, max_bytes: int) -> EntryAcks:
        """Learn the outcome of ``send_many``'s appends from one callback per broker
        entry (pulsar_txn.entry_acks), not one per message: the owner promises that no
        one else sends on the producer while the run lasts, and that it batches by these
        limits alone (its time trigger set far beyond a run)."""
        if self._fence is not None:
            raise ValueError("a sealable segment's appends are re-routed one by one")
        self._entries = EntryAcks(max_messages, max_bytes)
        return self._entries

    @property
    def per_entry(self) -> EntryAcks | None:
        """The run's per-entry outcomes (``acknowledge_per_entry``), if it learns so."""
        return self._entries

    @property
    def registered(self) -> bool:
        """The store recorded this run's registration (the commit's check counts it)."""
        return self._registered

    def _ensure_registered(self) -> None:
        if not self._registered:
            with self._lock:
                if not self._registered:
                    try:
                        wire = self.store.register_write(self.txn_id, self.segment, self.writer)
                        if wire != self._wire:  # an operator switched the namespace's form
                            self._wire = wire
                            self._txn_props = txn_properties(self.txn_id, self.writer,
                                                             self.store.deployment, wire)
                        if self._fence is not None:
                            try:
                                self._fence()
                            except SegmentSealed:
                                self._withdraw()
                                raise
                    except SegmentSealed:
                        raise  # re-routed by the scalable producer: not a failed send
                    except BaseException as e:
                        # the send raised (e.g. the store is down): whatever the caller
                        # does next, the transaction cannot commit (issue 26, hole 12)
                        self.errors.append(f"a send's write registration raised {e!r}")
                        raise
                    self._registered = True

    def _withdraw(self) -> None:
        """Drop a registration that certainly never appended, so the sealed segment's gate
        moves. Called with ``_first_lock`` held and no position recorded, so no other send
        of this run is in flight; a run with an unplaced entry keeps its registration."""
        if self._unplaced or self.first is not None:
            return
        self.store.withdraw_write(self.txn_id, self.segment, self.writer)
        self._registered = False

    def _props(self, properties: dict | None) -> dict:
        if not properties:
            return self._txn_props
        props = dict(properties)
        props.update(self._txn_props)
        return props

    def _check_deployment(self) -> None:
        """A registered run's appends need no store round trip, so the deployment change
        its client's background check saw (sticky on the store) stops them: nothing is
        appended under a deployment id the metastore no longer holds (hole 8)."""
        lost = self.store.deployment_lost
        if lost is not None:
            self.errors.append("the metastore's deployment changed")
            raise DeploymentChanged(lost)

    def send(self, value: bytes, properties: dict | None = None, **kw):
        """Synchronous append; the first one records the run's first position.

        Until that position is recorded, sends on this run are serialized: two
        concurrent first sends could otherwise record the higher of their positions.
        """
        self._check_deployment()
        if self.first is not None:
            return self._append(value, properties, kw)
        with self._first_lock:
            return self._append(value, properties, kw)

    def _append(self, value: bytes, properties: dict | None, kw: dict):
        self._ensure_registered()
        try:
            msg_id = self.producer.send(value, properties=self._props(properties), **kw)
        except pulsar.TopicTerminated:
            # refused, so certainly not stored: a registration that never stored anything
            # may go (a scalable segment's producer re-routes the send)
            if self.first is None and self._fence is not None:
                self._withdraw()
            raise
        except BaseException as e:
            # a timeout or any other failure: the entry may be stored at an unknown place,
            # so the commit refuses even if the caller catches this and sends on
            self._unplaced = True
            self.errors.append(f"a send raised {e!r}; whether it is stored is unknown")
            raise
        if msg_id.entry_id() < 0:
            self._unplaced = True
            self.errors.append(NO_POSITION)  # the commit refuses, even if this is caught
            raise AppendFailed(f"transaction {self.txn_id}: an append to {self.segment} "
                               f"{NO_POSITION}, so the transaction cannot commit")
        self._on_appended(Position.of(msg_id))
        return msg_id

    def send_async(self, value: bytes, callback: Callable | None = None,
                   properties: dict | None = None, **kw) -> None:
        # the first append is synchronous: its position pins the gate (so is every append
        # of a run whose first position stays unknown after a failure: see _unplaced)
        self._check_deployment()
        if self.first is None:
            msg_id = self.send(value, properties, **kw)
            if callback:
                callback(pulsar.Result.Ok, msg_id)
            return
        self._expect(1)
        done = self._acked if callback is None else self._chained(callback)
        try:
            self.producer.send_async(value, done, properties=self._props(properties), **kw)
        except BaseException as e:
            self._raised(e)
            raise

    def send_many(self, values: list, keys: list | None = None,
                  properties: list | None = None, event_times: list | None = None) -> None:
        """Asynchronous appends of many messages in order: the Spark sink's hot path.

        The same as ``send_async`` for each (the first append is still synchronous and
        records the run's position; the callbacks given out are what ``flush`` waits
        for: one per message, or one per entry after :meth:`acknowledge_per_entry`),
        minus pulsar-client's per-call wrapper work (argument checks): messages are
        built natively, the transaction's one property set by name (a message with
        user properties, or the three-property form, gets one merged map).
        ``keys``/``properties``/``event_times``: per message, or None for none.
        """
        n, i = len(values), 0
        while i < n and self.first is None:
            kw = {}
            if keys is not None and keys[i]:
                kw["partition_key"] = keys[i]
            if event_times is not None and event_times[i]:
                kw["event_timestamp"] = event_times[i]
            props = properties[i] if properties is not None else None
            if self._entries is not None:
                self._send_flushed(values[i], props, kw)
            else:
                self.send(values[i], props, **kw)
            i += 1
        if i >= n:
            return
        if self._entries is None:
            self._expect(n - i)
        try:
            send_columns(self.producer, values, keys, properties, event_times,
                         self._txn_props, self._acked, self._entries, start=i)
        except BaseException as e:
            self._raised(e)  # a message may be queued or not; none after it is
            raise

    def _send_flushed(self, value: bytes, properties: dict | None, kw: dict) -> None:
        """The run's first append when its producer batches with no time trigger: sent
        and flushed at once (a blocking send would wait for a trigger that never comes
        while the producer reconnects), its position recorded as :meth:`send` does. The
        flush also leaves the producer's batch empty, where ``send_many``'s per-entry
        numbering starts."""
        with self._first_lock:
            self._ensure_registered()
            answer: list = []
            heard = threading.Event()

            def done(res, msg_id) -> None:
                answer.append((res, msg_id))
                heard.set()

            try:
                self.producer.send_async(value, done, properties=self._props(properties), **kw)
                self.producer.flush()
                if not heard.wait(_FIRST_WAIT_S):
                    raise AppendFailed(f"no answer to an append within {_FIRST_WAIT_S:.0f} s")
            except BaseException as e:
                self._unplaced = True
                self.errors.append(f"a send raised {e!r}; whether it is stored is unknown")
                raise
            res, msg_id = answer[0]
            if res != pulsar.Result.Ok or msg_id.entry_id() < 0:
                self._unplaced = True
                why = NO_POSITION if res == pulsar.Result.Ok else f"failed: {res}"
                self.errors.append(why)
                raise AppendFailed(f"transaction {self.txn_id}: an append to {self.segment} "
                                   f"{why}, so the transaction cannot commit")
            self._on_appended(Position.of(msg_id))

    def _expect(self, sends: int) -> None:
        """Count ``sends`` more callbacks to wait for."""
        with self._count:
            self._outstanding += sends
            self._idle.clear()

    def _raised(self, e: BaseException) -> None:
        """A send raised: whether it was queued is unknown (pulsar-client queues the
        message, then checks for signals, so a KeyboardInterrupt can come after the
        queueing), so no callback count can be trusted: the run fails, and ``flush``
        says so at once rather than waiting for a callback that may never come."""
        self._failed_send = f"a send raised {e!r}; whether it was queued is unknown"

    def _acked(self, res, msg_id, _ok=pulsar.Result.Ok) -> None:
        """Per-message callback: kept minimal, it runs once per append. A failure is
        recorded before the count drops, so ``flush`` sees it once the run is idle."""
        if res != _ok:
            if not (self._fence is not None and res == pulsar.Result.TopicTerminated):
                self.errors.append(str(res))
        elif msg_id.entry_id() < 0:
            self.errors.append(NO_POSITION)
        with self._count:
            self._outstanding -= 1
            if self._outstanding <= 0:
                self._idle.set()

    def fail(self, reason: str) -> None:
        """An append of this run is owed and will not be made (a re-route after a seal
        failed): the transaction cannot commit."""
        self.errors.append(reason)

    def _chained(self, callback: Callable):
        def done(res, msg_id) -> None:
            self._acked(res, msg_id)
            callback(res, msg_id)

        return done

    def _on_appended(self, pos: Position) -> None:
        """Record a confirmed append as the first if it is the run's lowest.

        Runs under ``_first_lock`` while ``first`` is None (see :meth:`send`).
        """
        if self.first is not None or self._unplaced:
            return
        try:
            self.store.record_write(self.txn_id, self.segment, self.writer,
                                    pos.entry_position, None)
        except BaseException:
            self._unplaced = True  # stored at pos, but no record pins it
            raise
        self.first = pos.entry_position

    def flush(self, timeout_s: float = 120.0) -> None:
        """Wait until every append is acknowledged; raise if any failed."""
        try:
            self.producer.flush()
        except Exception:
            # a sealed segment's producer is closed once its sends resolved (the
            # scalable producer drained it); the outstanding count below is the truth
            if self._fence is None:
                raise
        if self._failed_send is not None:
            raise AppendFailed(f"transaction {self.txn_id}: appends to {self.segment} "
                               f"failed: {self._failed_send}")
        if not self._idle.wait(timeout_s):
            self.errors.append(f"{self._outstanding} sends unacknowledged after {timeout_s}s")
        if self._entries is not None:
            if not self._entries.wait(timeout_s):
                self.errors.append(f"{self._entries.outstanding} entries unacknowledged "
                                   f"after {timeout_s}s")
            self.errors.extend(self._entries.verify())
        if self.errors:
            raise AppendFailed(f"transaction {self.txn_id}: {len(self.errors)} appends to "
                                 f"{self.segment} failed: {self.errors[0]}")
