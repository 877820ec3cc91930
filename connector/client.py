"""Plain-Python client API: transactions, producers, READ_COMMITTED readers/consumers.

    client = PulsarTxnClient("pulsar://127.0.0.1:6650", "redis://127.0.0.1:6379")
    with client.transaction() as txn:
        producer.send(b"x", txn=txn)
        consumer.acknowledge(msg, txn=txn)

pulsar-client has no transaction API, so a transactional send is an ordinary
append carrying the txn id and writer id as properties, preceded by a write
registration in the metastore (once per writer-run and segment, not per message).
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import contextmanager

import _pulsar
import pulsar

from pulsar_txn.admin import AdminAuth, admin_request, admin_topic_path, check_admin_url
from pulsar_txn.buffer import DELIVER, SKIP, WAIT, TransactionBuffer
from pulsar_txn.connection import naming
from pulsar_txn.coordinator import DEFAULT_RETENTION_MS, DEFAULT_TIMEOUT_MS, TransactionCoordinator
from pulsar_txn.dag import is_scalable
from pulsar_txn.errors import (
    AckConflict,
    ConfigError,
    InvalidTxnId,
    PulsarTxnError,
    ReadTimeout,
    TxnNotOpen,
)
from pulsar_txn.metastore import open_store
from pulsar_txn.pending_ack import PendingAckStore, ack_position
from pulsar_txn.records import (
    BEFORE_EARLIEST,
    PROP_DEPLOYMENT,
    PROP_TXN,
    PROP_WRITER,
    Position,
    TxnEvent,
    TxnHeader,
    TxnId,
    own_txn,
)
from pulsar_txn.state import TxnState
from pulsar_txn.topics import normalize_topic
from pulsar_txn.writer import WriterRun

log = logging.getLogger(__name__)

_DRAIN = 1000  # messages pulled without blocking before one gate query


def quiet_logger() -> pulsar.ConsoleLogger:
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


class Transaction:
    """A v5 transaction. Commit flushes this client's producers, then one CAS."""

    def __init__(self, client: PulsarTxnClient, header: TxnHeader) -> None:
        self._client = client
        self.header = header
        self.id: TxnId = header.txn_id
        self._runs: dict[tuple[str, str], WriterRun] = {}
        self._ack_stores: set[PendingAckStore] = set()
        self._flushers: list = []  # scalable producers: re-route refused sends before commit
        self._lock = threading.Lock()
        self._state = TxnState.OPEN

    def __str__(self) -> str:
        return str(self.id)

    @property
    def state(self) -> TxnState:
        return self._state

    def _ensure_open(self) -> None:
        if self._state is not TxnState.OPEN:
            raise TxnNotOpen(str(self.id), self._state.value)

    def _run(self, producer: Producer) -> WriterRun:
        key = (producer.segment, producer.writer_id)
        with self._lock:
            self._ensure_open()
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = WriterRun(self._client.store, self.id, producer.segment,
                                                  producer.writer_id, producer._p,
                                                  getattr(producer, "fence", None))
            return run

    def _has_first(self, producer) -> bool:
        run = self._runs.get((producer.segment, producer.writer_id))
        return run is not None and run.first is not None

    def _add_flusher(self, producer) -> None:
        with self._lock:
            if producer not in self._flushers:
                self._flushers.append(producer)

    def _add_ack_store(self, store: PendingAckStore) -> None:
        with self._lock:
            self._ensure_open()
            self._ack_stores.add(store)

    @property
    def segments(self) -> set[str]:
        return {seg for seg, _ in self._runs}

    def commit(self) -> TxnHeader:
        self._ensure_open()
        try:
            for producer in self._flushers:
                producer.flush()
            for run in list(self._runs.values()):
                run.flush()
        except BaseException:
            self.abort()
            raise
        winners = {w for _, w in self._runs}
        try:
            header = self._client.coordinator.commit(self.id, winners, self.segments)
        except TxnNotOpen as e:
            self._state = TxnState(e.state)
            raise
        self._finish(header)
        return header

    def abort(self) -> TxnHeader:
        if self._state is TxnState.ABORTED:
            return self.header
        header = self._client.coordinator.abort(self.id, self.segments)
        self._finish(header)
        return header

    def _finish(self, header: TxnHeader) -> None:
        """After the decision: nothing here may fail the end, which already happened
        (a caller that saw an error would retry and duplicate). What fails is finished
        by recovery: a restarted consumer re-applies committed acks from the index."""
        self.header = header
        self._state = header.state
        for store in self._ack_stores:  # same-process participants need not wait for events
            try:
                store.on_end(self.id, header.state)
            except Exception as e:  # noqa: BLE001 - pulsar-client raises plain errors too
                log.warning("transaction %s is %s; applying its acks on %s failed (recovery "
                            "finishes it): %s", self.id, header.state.value, store.segment, e)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.commit()
        elif self._state is TxnState.OPEN:
            try:
                self.abort()
            except PulsarTxnError:  # fenced already (timed out / ended elsewhere)
                log.debug("abort after failure of %s did not apply", self.id)
        return False


class TxnMessage:
    """A message as a READ_COMMITTED reader returns it (fields read lazily from the broker's)."""

    __slots__ = ("_raw", "topic", "_mid", "txn_id")

    def __init__(self, raw, topic: str, mid, txn_id: str | None) -> None:
        self._raw = raw
        self.topic = topic
        self._mid = mid
        self.txn_id = txn_id

    @property
    def value(self) -> bytes:
        return self._raw.data()

    def data(self) -> bytes:
        return self._raw.data()

    @property
    def key(self) -> str | None:
        return self._raw.partition_key() or None

    @property
    def properties(self) -> dict[str, str]:
        return {k: v for k, v in self._raw.properties().items() if not k.startswith("__ptxn.")}

    @property
    def position(self) -> Position:
        return Position.of(self._mid)

    @property
    def message_id(self):
        return self._mid

    @property
    def publish_time_ms(self) -> int:
        return self._raw.publish_timestamp()

    @property
    def event_time_ms(self) -> int:
        return self._raw.event_timestamp()

    def __repr__(self) -> str:
        return f"TxnMessage({self.topic}, {self.position}, txn={self.txn_id})"


class Producer:
    """A producer whose sends may join a transaction (``txn=``)."""

    def __init__(self, client: PulsarTxnClient, topic: str, **kwargs) -> None:
        self.segment = normalize_topic(topic)
        self.writer_id = f"p{uuid.uuid4().hex[:16]}"
        self._client = client
        self._p = client.pulsar.create_producer(self.segment, **kwargs)

    def send(self, value: bytes, key: str | None = None, properties: dict | None = None,
             txn: Transaction | None = None, event_time_ms: int | None = None):
        props = _user_props(properties)
        kw = _send_kw(key, event_time_ms)
        if txn is None:
            return self._p.send(value, properties=props, **kw)
        return txn._run(self).send(value, props, **kw)

    def send_async(self, value: bytes, callback: Callable | None = None, key: str | None = None,
                   properties: dict | None = None, txn: Transaction | None = None,
                   event_time_ms: int | None = None) -> None:
        props = _user_props(properties)
        kw = _send_kw(key, event_time_ms)
        if txn is None:
            self._p.send_async(value, callback or (lambda r, m: None), properties=props, **kw)
        else:
            txn._run(self).send_async(value, props, callback, **kw)

    def flush(self) -> None:
        self._p.flush()

    def close(self) -> None:
        self._p.close()


def _user_props(properties: dict | None) -> dict:
    props = {str(k): str(v) for k, v in (properties or {}).items()}
    if PROP_TXN in props or PROP_WRITER in props or PROP_DEPLOYMENT in props:
        raise ConfigError("message properties starting with '__ptxn.' are reserved")
    return props


def _send_kw(key: str | None, event_time_ms: int | None) -> dict:
    kw: dict = {}
    if key is not None:
        kw["partition_key"] = key
    if event_time_ms is not None:
        kw["event_timestamp"] = int(event_time_ms)
    return kw


_BATCH_MAX = 2**31 - 1  # a gate id compares above every batch index of its entry


def _gate_id(entry: tuple[int, int]):
    return _pulsar.MessageId(-1, entry[0], entry[1], _BATCH_MAX)


class _GatedStream:
    """Shared READ_COMMITTED logic of readers and consumers of one segment.

    Hot path: native message ids are compared directly (no Python position
    objects), final verdicts are cached per (txn, writer), and a message is
    wrapped only when it is returned.
    """

    def __init__(self, client: PulsarTxnClient, segment: str, dedupe: bool) -> None:
        self._client = client
        self.segment = segment
        self._buf: deque = deque()  # (raw, native message id, txn id str | None, writer)
        self._gate: tuple[int, int] = (-1, -1)
        self._gate_id = _gate_id(self._gate)
        self._received = None  # highest native id held (entries at or below it are known)
        self._dedupe = dedupe
        self._last = None
        # positions an abort released: their redelivered copies pass the duplicate filter
        self._expect: set[tuple[int, int, int]] = set()
        self._is_reader = isinstance(self, Reader)
        self._verdicts: dict[tuple[str, str], str] = {}
        self._ids: dict[str, TxnId] = {}
        self._below = False
        self.skipped = 0

    def _set_gate(self, entry: tuple[int, int]) -> None:
        self._gate = entry
        self._gate_id = _gate_id(entry)
        # every held entry is below the gate: the hot path skips the per-message compare
        self._below = self._received is not None and self._received <= self._gate_id

    def _pull(self, timeout_ms: int) -> None:
        raise NotImplementedError

    def _on_skip(self, raw) -> None:
        pass

    def _accept(self, raw) -> None:
        self._ingest((raw,))

    def _ingest(self, raws) -> None:
        """Append received messages to the buffer (one tight loop per drained batch)."""
        append = self._buf.append
        last, received = self._last, self._received
        dep = self._client.store.deployment
        if self._is_reader:  # in order: the last id held is the highest
            for raw in raws:
                mid = raw.message_id()
                if last is not None and mid <= last:
                    continue  # a broker redelivery (pulsar-lite duplicates unbatched topics)
                last = mid
                props = raw.properties()
                t = own_txn(props, dep)
                append((raw, mid, t, props.get(PROP_WRITER, "") if t else ""))
            received = last
        else:
            dedupe = self._dedupe
            for raw in raws:
                mid = raw.message_id()
                expect = self._expect
                if expect:  # a copy an abort asked for, however it comes: once
                    key = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
                    if key in expect:
                        expect.discard(key)
                        if dedupe and last is not None and mid <= last:
                            if received is None or received < mid:
                                received = mid
                            props = raw.properties()
                            t = own_txn(props, dep)
                            append((raw, mid, t, props.get(PROP_WRITER, "") if t else ""))
                            continue
                if dedupe and raw.redelivery_count() == 0:
                    if last is not None and mid <= last:
                        continue
                    last = mid
                if received is None or received < mid:
                    received = mid
                props = raw.properties()
                t = own_txn(props, dep)
                append((raw, mid, t, props.get(PROP_WRITER, "") if t else ""))
        self._last, self._received = last, received
        self._below = received is not None and received <= self._gate_id

    def _received_entry(self) -> Position:
        r = self._received
        return BEFORE_EARLIEST if r is None else Position(r.ledger_id(), r.entry_id())

    def _next_raw(self, timeout_ms: int | None):
        buf = self._buf
        if buf:  # fast path: a non-transactional or already-classified entry below the gate
            head = buf[0]
            if (head[2] is None or self._verdicts.get((head[2], head[3])) == DELIVER) and (
                    self._below or head[1] <= self._gate_id):
                return buf.popleft()
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        tb = self._client.buffer
        while True:
            if buf:
                raw, mid, t, writer = head = buf[0]
                if mid <= self._gate_id:
                    if t is None:
                        return buf.popleft()
                    verdict = self._verdicts.get((t, writer)) or self._verdict(t, writer)
                    if verdict == DELIVER:
                        return buf.popleft()
                    if verdict == SKIP:
                        buf.popleft()
                        self.skipped += 1
                        self._on_skip(raw)
                        continue
                    if not tb.wait_for_outcome(self._txn(t), _left(deadline, 3600)):
                        raise ReadTimeout(f"{self.segment}: waiting for {t} to end")
                    continue
                gen = tb.generation
                gate = tb.gate(self.segment, self._received_entry(), Position(*self._gate),
                               self._seen_first if self._is_reader else None)
                if (gate.ledger, gate.entry) > self._gate:
                    self._set_gate((gate.ledger, gate.entry))
                    self._classify_batch()
                    continue
                left = _left(deadline, 1.0)
                if left <= 0:
                    raise ReadTimeout(f"{self.segment}: no committed message in time")
                # pinned by an OPEN txn: wait for an end/position event, don't spin (H4)
                tb.wait_for_change(gen, min(left, 5.0))
                continue
            left = _left(deadline, 0.5)
            if left <= 0:
                raise ReadTimeout(f"{self.segment}: no committed message in time")
            self._pull(max(1, int(left * 1000)))

    def _txn(self, t: str) -> TxnId:
        txn = self._ids.get(t)
        if txn is None:
            txn = self._ids[t] = TxnId.parse(t)
        return txn

    def _seen_first(self, txn: TxnId, writer: str) -> Position | None:
        """First held entry of a txn's writer (valid for in-order, complete readers)."""
        s = str(txn)
        for _, mid, t, w in self._buf:
            if t == s and w == writer:
                return Position(mid.ledger_id(), mid.entry_id())
        return None

    def _verdict(self, t: str, writer: str) -> str:
        if not self._well_formed(t):
            self._verdicts[(t, writer)] = SKIP
            return SKIP
        verdict = self._client.buffer.classify(self.segment, [(self._txn(t), writer)])[0]
        if verdict != WAIT:
            self._verdicts[(t, writer)] = verdict
        return verdict

    def _well_formed(self, t: str) -> bool:
        """A malformed txn property is not ours (or corrupt): never delivered, said once."""
        try:
            self._txn(t)
            return True
        except InvalidTxnId:
            log.warning("%s: a message's %s property %r is malformed or of another "
                        "deployment; such messages are never delivered", self.segment,
                        PROP_TXN, t)
            return False

    def _classify_batch(self) -> None:
        gate = self._gate_id
        pairs = {(t, w) for _, mid, t, w in self._buf
                 if t is not None and (t, w) not in self._verdicts and mid <= gate}
        for t, w in [(t, w) for t, w in pairs if not self._well_formed(t)]:
            self._verdicts[(t, w)] = SKIP
            pairs.discard((t, w))
        if not pairs:
            return
        pairs = list(pairs)
        verdicts = self._client.buffer.classify(self.segment,
                                                [(self._txn(t), w) for t, w in pairs])
        for pair, verdict in zip(pairs, verdicts):
            if verdict != WAIT:
                self._verdicts[pair] = verdict

    def _wrap(self, head) -> TxnMessage:
        return TxnMessage(head[0], self.segment, head[1], head[2])


def _left(deadline: float | None, default: float) -> float:
    return default if deadline is None else deadline - time.monotonic()


class Reader(_GatedStream):
    """READ_COMMITTED reader of one topic (segment), from a start position."""

    def __init__(self, client: PulsarTxnClient, topic: str, start: str | Position = "earliest",
                 **kwargs) -> None:
        super().__init__(client, normalize_topic(topic), dedupe=True)
        if start == "earliest":
            mid = pulsar.MessageId.earliest
        elif start == "latest":
            mid = pulsar.MessageId.latest
        elif isinstance(start, Position):
            mid = pulsar.MessageId(-1, start.ledger, start.entry, start.batch)
            self._set_gate((start.ledger, start.entry))
            self._received = mid._msg_id
        else:
            raise ConfigError(f"start must be 'earliest', 'latest' or a Position, got {start!r}")
        kwargs.setdefault("receiver_queue_size", 2000)
        self._r = client.pulsar.create_reader(self.segment, mid, **kwargs)
        self._native = self._r._reader  # skips a Python wrapper object per message

    def _pull(self, timeout_ms: int) -> None:
        read = self._native.read_next
        got = []
        try:
            got.append(read(timeout_ms))
            for _ in range(_DRAIN):
                got.append(read(0))
        except pulsar.Timeout:
            pass
        self._ingest(got)

    def read_next(self, timeout_millis: int | None = None) -> TxnMessage:
        return self._wrap(self._next_raw(timeout_millis))

    def read_batch(self, max_messages: int, timeout_millis: int = 100) -> list[TxnMessage]:
        out = []
        try:
            out.append(self.read_next(timeout_millis))
            while len(out) < max_messages and self._buf:
                out.append(self.read_next(0))
        except ReadTimeout:
            pass
        return out

    def close(self) -> None:
        self._r.close()


class Consumer(_GatedStream):
    """READ_COMMITTED consumer; ``acknowledge(..., txn=)`` makes the ack transactional."""

    def __init__(self, client: PulsarTxnClient, topic: str, subscription: str,
                 consumer_type: pulsar.ConsumerType = pulsar.ConsumerType.Exclusive,
                 initial_position: pulsar.InitialPosition = pulsar.InitialPosition.Earliest,
                 **kwargs) -> None:
        dedupe = consumer_type in (pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover)
        super().__init__(client, normalize_topic(topic), dedupe=dedupe)
        kwargs.setdefault("negative_ack_redelivery_delay_ms", 200)
        self._c = client.pulsar.subscribe(self.segment, subscription, consumer_type=consumer_type,
                                          initial_position=initial_position, **kwargs)
        self._native = self._c._consumer  # native messages: no wrapper object per message
        self.subscription = subscription
        self.acks = PendingAckStore(client.store, self.segment, subscription,
                                    apply=self._apply_acks, redeliver=self._redeliver,
                                    cursor=self._cursor if client.admin_url else None)
        client._register_ack_store(self.acks)
        self.recovered = self.acks.recover()
        # Messages handed out and not acked since (types that may ack cumulatively):
        # a cumulative ack under a txn names those up to it, so one that was acked
        # under another, committed txn and handed out again conflicts. Insertion
        # ordered; an individual ack removes its message, a new copy adds it again.
        self._track = dedupe
        self._handed: dict[Position, None] = {}

    def _pull(self, timeout_ms: int) -> None:
        try:
            raw = self._native.receive(timeout_ms)
        except pulsar.Timeout:
            return
        if self.acks.recovered_acks or self.acks.recovered_cumulative:
            if self.acks.acked_by_recovery(Position.of(raw.message_id())):
                return  # prefetched before recovery applied its committed ack
        self._accept(raw)

    def _on_skip(self, raw) -> None:
        self._native.acknowledge(raw)  # an aborted/losing entry is never visible: drop it

    def receive(self, timeout_millis: int | None = None) -> TxnMessage:
        head = self._next_raw(timeout_millis)
        if self._track:
            self._handed[Position.of(head[1])] = None
        return self._wrap(head)

    def acknowledge(self, message: TxnMessage, txn: Transaction | None = None) -> None:
        if txn is None:
            self._native.acknowledge(message.message_id)
        else:
            txn._add_ack_store(self.acks)
            self.acks.acknowledge(txn.id, [message.position], cumulative=False)
        if self._track:
            self._handed.pop(message.position, None)
        if self._expect:  # acked: a late copy of it is a duplicate again
            p = message.position
            self._expect.discard((p.ledger, p.entry, p.batch))

    def acknowledge_cumulative(self, message: TxnMessage, txn: Transaction | None = None) -> None:
        upto = message.position
        if txn is None:
            self._native.acknowledge_cumulative(message.message_id)
        else:
            txn._add_ack_store(self.acks)
            given = [p for p in self._handed if p <= upto]
            try:
                self.acks.acknowledge(txn.id, [upto], cumulative=True, given=given)
            except AckConflict as conflict:
                if conflict.committed:  # a redelivery of an acked message: never again
                    known = ack_position(conflict.position)
                    self.acks.recovered_acks.add(known)
                    self._handed.pop(known, None)
                raise
        if self._track and self._handed:
            self._handed = {p: None for p in self._handed if p > upto}

    def _apply_acks(self, positions: list[Position], cumulative: bool) -> None:
        for p in positions:
            mid = pulsar.MessageId(-1, p.ledger, p.entry, p.batch)
            if cumulative:
                self._c.acknowledge_cumulative(mid)
            else:
                self._c.acknowledge(mid)

    def _cursor(self) -> Position | None:
        """The subscription's mark-delete position (admin internalStats), if known."""
        stats = admin_request(self._client.admin_url, "GET",
                              admin_topic_path(self.segment) + "/internalStats",
                              auth=self._client.admin_auth)
        cursors = (stats or {}).get("cursors") or {}
        cur = cursors.get(self.subscription) or cursors.get(
            urllib.parse.quote(self.subscription, safe=""))
        mark = (cur or {}).get("markDeletePosition")
        if not mark or ":" not in mark:
            return None
        ledger, entry = (int(x) for x in mark.split(":"))
        return Position(ledger, entry) if ledger >= 0 and entry >= 0 else None

    def _redeliver(self, positions: list[Position]) -> None:
        """The acks of an aborted txn: the broker delivers those messages again. On an
        Exclusive or Failover subscription it rewinds to the oldest unacked message,
        so the copies must pass this consumer's duplicate filter."""
        if not positions:
            return
        if self._dedupe:
            if len(self._expect) > 100_000:  # copies that never came: forget them
                self._expect.clear()
            self._expect.update((p.ledger, p.entry, p.batch) for p in positions)
        for p in positions:
            # the wrapper's negative_acknowledge takes only the native id
            self._c.negative_acknowledge(pulsar.MessageId(-1, p.ledger, p.entry, p.batch)._msg_id)

    def close(self) -> None:
        self._client._unregister_ack_store(self.acks)
        self._c.close()


class PulsarTxnClient:
    """Entry point: a Pulsar client plus the v5 transaction roles over one metastore."""

    def __init__(self, service_url: str, metastore_url: str, *, namespace: str = "ptxn",
                 partitions: int | None = None, sweeper: bool = True,
                 sweep_interval_s: float = 1.0, retention_ms: int = DEFAULT_RETENTION_MS,
                 admin_url: str | None = None, admin_token: str | None = None,
                 admin_auth: AdminAuth | None = None, seal_grace_ms: int = 300,
                 **pulsar_kwargs) -> None:
        """``admin_token``: the bearer token of a broker with token authentication,
        for the REST admin calls (``admin_url``); their TLS trust follows the
        ``tls_*`` settings in ``pulsar_kwargs``. ``admin_auth``: all of it
        explicitly (e.g. a TLS client certificate for the admin API)."""
        if not service_url.startswith(("pulsar://", "pulsar+ssl://")):
            raise ConfigError(f"service.url {service_url!r} must start with pulsar:// or "
                              "pulsar+ssl://")
        self.store = open_store(metastore_url, namespace=namespace, partitions=partitions)
        self.coordinator = TransactionCoordinator(self.store)
        self.buffer = TransactionBuffer(self.store)
        self._ack_stores: list[PendingAckStore] = []
        self._ack_lock = threading.Lock()
        self._watch = self.store.watch(self._on_event)
        pulsar_kwargs.setdefault("logger", quiet_logger())
        self.pulsar = pulsar.Client(service_url, **pulsar_kwargs)
        self.service_url = service_url
        if sweeper:
            self.coordinator.start_sweeper(sweep_interval_s, retention_ms)
        self.admin_url = check_admin_url(admin_url)
        self.admin_auth = admin_auth or AdminAuth.from_client_settings(admin_token,
                                                                       pulsar_kwargs)
        self._seal_grace_ms = seal_grace_ms
        self._scalable = None

    @property
    def scalable(self):
        """Scalable topics (``topic://``): create, describe, split, merge; layouts watched."""
        if self._scalable is None:
            from pulsar_txn.scalable import ScalableTopics

            self._scalable = ScalableTopics(self.store, self.pulsar, self.admin_url,
                                            self._seal_grace_ms, self.admin_auth)
        return self._scalable

    # ---- transactions ----
    def new_transaction(self, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Transaction:
        return Transaction(self, self.coordinator.new_transaction(timeout_ms))

    @contextmanager
    def transaction(self, timeout_ms: int = DEFAULT_TIMEOUT_MS):
        """Commit on success, abort on an exception (skipped once the txn is fenced)."""
        txn = self.new_transaction(timeout_ms)
        with txn:
            yield txn

    # ---- producers / readers / consumers ----
    def create_producer(self, topic: str, **kwargs) -> Producer:
        """A producer; for a ``topic://`` scalable topic, one that routes by key hash."""
        with naming(self.service_url, what=f"creating a producer on {topic}"):
            if is_scalable(topic):
                from pulsar_txn.scalable import ScalableProducer

                return ScalableProducer(self, topic, **kwargs)
            self._refuse_partitioned(topic)
            return Producer(self, topic, **kwargs)

    def create_reader(self, topic: str, start: str | Position = "earliest", **kwargs) -> Reader:
        """A READ_COMMITTED reader; for a ``topic://`` topic, in the DAG's order."""
        with naming(self.service_url, what=f"creating a reader on {topic}"):
            if is_scalable(topic):
                from pulsar_txn.scalable import ScalableReader

                return ScalableReader(self, topic, start, **kwargs)
            self._refuse_partitioned(topic)
            return Reader(self, topic, start, **kwargs)

    def subscribe(self, topic: str, subscription: str, **kwargs) -> Consumer:
        if is_scalable(topic):
            raise ConfigError(f"topic {topic!r}: subscriptions on scalable topics are not "
                              "supported yet; subscribe to a segment's backing topic, or read "
                              "with create_reader (DAG order)")
        with naming(self.service_url, what=f"subscribing to {topic}"):
            self._refuse_partitioned(topic)
            return Consumer(self, topic, subscription, **kwargs)

    def _refuse_partitioned(self, topic: str) -> None:
        """A transaction registers, gates and classifies per segment, and a partition is
        one; the client API works on them one at a time (the Spark source and sink
        handle a partitioned topic whole)."""
        from pulsar_txn.topics import partitions_of

        name = normalize_topic(topic)
        parts = partitions_of(self.pulsar, name)
        if len(parts) > 1:
            raise ConfigError(
                f"topic {name!r} is partitioned ({len(parts)} partitions): the client API "
                f"works per partition, e.g. {parts[0]!r}; the Spark source and sink read and "
                "write a partitioned topic whole")

    # ---- participants ----
    def _register_ack_store(self, store: PendingAckStore) -> None:
        with self._ack_lock:
            self._ack_stores.append(store)

    def _unregister_ack_store(self, store: PendingAckStore) -> None:
        with self._ack_lock:
            if store in self._ack_stores:
                self._ack_stores.remove(store)

    def _on_event(self, ev: TxnEvent) -> None:
        self.buffer.on_event(ev)
        if ev.kind == "end" and ev.txn_id is not None and ev.state is not None:
            with self._ack_lock:
                stores = [s for s in self._ack_stores if ev.txn_id in s.pending_txns()]
            for s in stores:
                try:
                    s.on_end(ev.txn_id, ev.state)
                except PulsarTxnError as e:
                    log.warning("materializing %s on %s failed: %s", ev.txn_id, s.segment, e)
        elif ev.kind == "resync":
            with self._ack_lock:
                stores = list(self._ack_stores)
            for s in stores:
                s.recover()

    def close(self) -> None:
        self.coordinator.close()
        self._watch.close()
        if self._scalable is not None:
            self._scalable.close()
        try:
            self.pulsar.close()
        finally:
            self.store.close()

    def __enter__(self) -> PulsarTxnClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_all(reader: Reader | Consumer, idle_ms: int = 500) -> Iterable[TxnMessage]:
    """Yield messages until none arrives for ``idle_ms`` (tests, examples)."""
    read = reader.receive if isinstance(reader, Consumer) else reader.read_next
    while True:
        try:
            yield read(idle_ms)
        except ReadTimeout:
            return
