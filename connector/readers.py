"""READ_COMMITTED readers and consumers of one plain topic (segment): the hot path.

A message is returned only when its entry lies at or below the segment's max
read position (the gate: no OPEN write below it) and its (txn, writer) is
classified DELIVER; entries of aborted transactions and losing writers are
skipped, entries of OPEN ones wait. Native message ids are compared directly
and verdicts are cached per (txn, writer), so the per-message cost is a few
comparisons.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import _pulsar
import pulsar

from pulsar_txn.admin import AdminAuth
from pulsar_txn.buffer import TransactionBuffer, Verdict
from pulsar_txn.deployments import CLIENT_OPTION, foreign_deployment, foreign_entries_error
from pulsar_txn.errors import (
    ConfigError,
    InvalidTxnId,
    PulsarTxnError,
    ReadTimeout,
)
from pulsar_txn.message import TxnMessage, typed_schema
from pulsar_txn.metastore.base import MetadataStore
from pulsar_txn.pending_ack import PendingAckStore
from pulsar_txn.records import (
    BEFORE_EARLIEST,
    PROP_TXN,
    WHOLE_ENTRY,
    EventKind,
    Position,
    TxnEvent,
    TxnId,
    entry_txn_cached,
)
from pulsar_txn.topics import INTERNAL_PREFIX, normalize_topic

log = logging.getLogger(__name__)

DRAIN = 1000  # messages pulled without blocking before one gate query
VERDICT_MEMO = 10_000  # verdicts (and parsed ids) a stream keeps; emptied past it


class AckParticipants:
    """The pending-ack stores of one process's consumers: each learns a transaction's
    end from the store's event stream, and all re-check after a missed stretch."""

    def __init__(self) -> None:
        self._stores: list[PendingAckStore] = []
        self._lock = threading.Lock()

    def register(self, store: PendingAckStore) -> None:
        with self._lock:
            self._stores.append(store)

    def unregister(self, store: PendingAckStore) -> None:
        with self._lock:
            if store in self._stores:
                self._stores.remove(store)

    def on_event(self, ev: TxnEvent) -> None:
        if ev.kind is EventKind.END and ev.txn_id is not None and ev.state is not None:
            with self._lock:
                stores = [s for s in self._stores if ev.txn_id in s.pending_txns()]
            for s in stores:
                try:
                    s.on_end(ev.txn_id, ev.state)
                except PulsarTxnError as e:
                    log.warning("materializing %s on %s failed: %s", ev.txn_id, s.segment, e)
        elif ev.kind is EventKind.RESYNC:
            with self._lock:
                stores = list(self._stores)
            for s in stores:
                s.recover()


@dataclass
class ReadSide:
    """What a READ_COMMITTED stream needs: the broker, the store, the transaction
    buffer that gates and classifies, and (for consumers) the admin API for the
    cursor and the registry that hands them transaction ends."""
    pulsar: pulsar.Client
    store: MetadataStore
    buffer: TransactionBuffer
    admin_url: str | None = None
    admin_auth: AdminAuth | None = None
    participants: AckParticipants = field(default_factory=AckParticipants)
    skip_foreign: bool = False  # pass other deployments' entries (deployments.py)




def _gate_id(entry: Position):
    return _pulsar.MessageId(-1, entry.ledger, entry.entry, WHOLE_ENTRY)


class GatedStream:
    """Shared READ_COMMITTED logic of readers and consumers of one segment.

    Hot path: native message ids are compared directly (no Python position
    objects), final verdicts are cached per (txn, writer), and a message is
    wrapped only when it is returned.
    """

    def __init__(self, side: ReadSide, segment: str, dedupe: bool) -> None:
        self.side = side
        self.segment = segment
        self._buf: deque = deque()  # (raw, native message id, txn id str | None, writer)
        self._gate: Position = BEFORE_EARLIEST  # an entry: everything up to it is decided
        self._gate_id = _gate_id(self._gate)
        self._received = None  # highest native id held (entries at or below it are known)
        self._dedupe = dedupe
        self._last = None
        # positions an abort released: their redelivered copies pass the duplicate filter
        self.expected_copies: set[tuple[int, int, int]] = set()
        self._is_reader = isinstance(self, Reader)
        self._verdicts: dict[tuple[str, str], Verdict] = {}
        self._resyncs = side.buffer.resyncs
        self._ids: dict[str, TxnId] = {}
        self._tags: dict[str, tuple[str | None, str]] = {}  # see records.entry_txn_cached
        self._below = False
        self.skipped = 0
        self.skipped_foreign = 0  # other deployments' entries passed (skip_foreign)
        self._foreign: set[str] = set()  # their txn texts, as entry_txn gives them
        self.schema = None  # pulsar-client's schema object of a typed reader (wrap decodes)

    def _set_gate(self, entry: Position) -> None:
        self._gate = entry
        self._gate_id = _gate_id(entry)
        # every held entry is below the gate: the hot path skips the per-message compare
        self._below = self._received is not None and self._received <= self._gate_id

    def _pull(self, timeout_ms: int) -> None:
        raise NotImplementedError

    def _on_skip(self, raw) -> None:
        pass

    def _accept(self, raw) -> None:
        self.ingest((raw,))

    def ingest(self, raws) -> None:
        """Append received messages to the buffer (one tight loop per drained batch)."""
        self.side.buffer.check_server_starts()  # met by another query since the last pull
        if self.side.buffer.resyncs != self._resyncs:  # the store may have gone back
            self._resyncs = self.side.buffer.resyncs
            self._verdicts.clear()
        append = self._buf.append
        last, received = self._last, self._received
        dep = self.side.store.deployment
        tags = self._tags
        if self._is_reader:  # in order: the last id held is the highest
            for raw in raws:
                mid = raw.message_id()
                if last is not None and mid <= last:
                    continue  # a broker redelivery (pulsar-lite duplicates unbatched topics)
                last = mid
                props = raw.properties()
                t, w = entry_txn_cached(props, dep, tags)
                append((raw, mid, t, w))
            received = last
        else:
            dedupe = self._dedupe
            for raw in raws:
                mid = raw.message_id()
                expect = self.expected_copies
                if expect:  # a copy an abort asked for, however it comes: once
                    key = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
                    if key in expect:
                        expect.discard(key)
                        if dedupe and last is not None and mid <= last:
                            if received is None or received < mid:
                                received = mid
                            props = raw.properties()
                            t, w = entry_txn_cached(props, dep, tags)
                            append((raw, mid, t, w))
                            continue
                if dedupe and raw.redelivery_count() == 0:
                    if last is not None and mid <= last:
                        continue
                    last = mid
                if received is None or received < mid:
                    received = mid
                props = raw.properties()
                t, w = entry_txn_cached(props, dep, tags)
                append((raw, mid, t, w))
        self._last, self._received = last, received
        self._below = received is not None and received <= self._gate_id

    def unread(self, head) -> None:
        """Put back what ``next_raw`` just returned (a check of it failed): handed out
        first next time, never lost."""
        self._buf.appendleft(head)

    def held_keys(self) -> list[tuple[int, int, int]]:
        """(ledger, entry, batch index) of every message held, in order (at most one
        pull's worth: a pull happens when nothing is held)."""
        return [(mid.ledger_id(), mid.entry_id(), mid.batch_index())
                for _, mid, _, _ in self._buf]

    def received_entry(self) -> Position:
        """The last entry this stream holds or held (entries at or below it are known)."""
        r = self._received
        return BEFORE_EARLIEST if r is None else Position(r.ledger_id(), r.entry_id())

    def holds_nothing(self) -> bool:
        """Nothing received is waiting to be returned."""
        return not self._buf

    def next_raw(self, timeout_ms: int | None):
        buf = self._buf
        if buf:  # fast path: a non-transactional or already-classified entry below the gate
            head = buf[0]
            if (head[2] is None or self._verdicts.get((head[2], head[3])) is Verdict.DELIVER
                    and self.side.buffer.resyncs == self._resyncs) and (
                    self._below or head[1] <= self._gate_id):
                return buf.popleft()
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        tb = self.side.buffer
        while True:
            if tb.resyncs != self._resyncs:  # the store may have gone back: no memo holds
                self._resyncs = tb.resyncs
                self._verdicts.clear()
            if buf:
                raw, mid, t, writer = head = buf[0]
                if mid <= self._gate_id:
                    if t is None:
                        return buf.popleft()
                    verdict = self._verdicts.get((t, writer)) or self._verdict(
                        t, writer, lambda _txn: _left(deadline, 3600))
                    if tb.resyncs != self._resyncs:
                        continue  # the store went back during a wait: nothing kept holds
                    if verdict is Verdict.DELIVER:
                        return buf.popleft()
                    if verdict is Verdict.WAIT:
                        raise ReadTimeout(f"{self.segment}: waiting for {t} to end")
                    buf.popleft()
                    self.skipped += 1
                    if t in self._foreign:
                        self.skipped_foreign += 1
                    self._on_skip(raw)
                    continue
                gen = tb.generation
                gate = tb.gate(self.segment, self.received_entry(), self._gate,
                               self._seen_first if self._is_reader else None)
                if gate.entry_position > self._gate:
                    self._set_gate(gate.entry_position)
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
            if len(self._ids) >= VERDICT_MEMO:
                self._ids.clear()
            txn = self._ids[t] = TxnId.parse(t)
        return txn

    def _remember(self, pair: tuple[str, str], verdict: Verdict) -> None:
        """Keep a final verdict; past the bound the memo starts again (a forgotten one is
        asked of the TransactionBuffer again, which keeps final outcomes)."""
        if len(self._verdicts) >= VERDICT_MEMO:
            self._verdicts.clear()
        self._verdicts[pair] = verdict

    def _seen_first(self, txn: TxnId, writer: str) -> Position | None:
        """First held entry of a txn's writer (valid for in-order, complete readers)."""
        s = str(txn)
        for _, mid, t, w in self._buf:
            if t == s and w == writer:
                return Position(mid.ledger_id(), mid.entry_id())
        return None

    def _verdict(self, t: str, writer: str,
                 wait_s: Callable[[TxnId], float] | None = None) -> Verdict:
        """The entry's verdict under the readers' one rule (``TransactionBuffer.settle``):
        with ``wait_s``, an OPEN transaction is waited for as long as it allows."""
        if not self._well_formed(t):
            self._remember((t, writer), Verdict.SKIP)
            return Verdict.SKIP
        entry = [(self._txn(t), writer)]
        buffer = self.side.buffer
        verdict = (buffer.classify(self.segment, entry) if wait_s is None
                   else buffer.settle(self.segment, entry, wait_s))[0]
        if verdict is not Verdict.WAIT:
            self._remember((t, writer), verdict)
        return verdict

    def _well_formed(self, t: str) -> bool:
        """A malformed txn property is not ours (or corrupt): never delivered, said once."""
        try:
            self._txn(t)
            return True
        except InvalidTxnId:
            pass
        self._check_foreign(t)
        if t not in self._foreign:
            log.warning("%s: a message's %s property %r is malformed; such messages are "
                        "never delivered", self.segment, PROP_TXN, t)
        return False

    def _check_foreign(self, t: str) -> None:
        """Entries of another deployment are never delivered, and never passed (nor
        acked) silently: first whether this client's own deployment changed (a reset
        metastore: DeploymentChanged), then ForeignDeploymentEntries unless the
        client skips them (``skip_foreign_deployments``)."""
        store = self.side.store
        seen = {dep for raw, _, tt, _ in self._buf if tt == t
                for dep in [foreign_deployment(raw.properties(), store.deployment)] if dep}
        if not seen:
            return  # malformed: skipped (hole 9)
        store.check_deployment()
        if not self.side.skip_foreign:
            raise foreign_entries_error(self.segment, seen, store.deployment, store.namespace,
                                        f"{CLIENT_OPTION}=True")
        self._foreign.add(t)

    def _classify_batch(self) -> None:
        gate = self._gate_id
        pairs = {(t, w) for _, mid, t, w in self._buf
                 if t is not None and (t, w) not in self._verdicts and mid <= gate}
        for t, w in [(t, w) for t, w in pairs if not self._well_formed(t)]:
            self._remember((t, w), Verdict.SKIP)
            pairs.discard((t, w))
        if not pairs:
            return
        pairs = list(pairs)
        verdicts = self.side.buffer.classify(self.segment,
                                                [(self._txn(t), w) for t, w in pairs])
        for pair, verdict in zip(pairs, verdicts):
            if verdict is not Verdict.WAIT:
                self._remember(pair, verdict)

    def wrap(self, head) -> TxnMessage:
        return TxnMessage(head[0], self.segment, head[1], head[2], self.schema)


def _left(deadline: float | None, default: float) -> float:
    return default if deadline is None else deadline - time.monotonic()


class Reader(GatedStream):
    """READ_COMMITTED reader of one topic (segment), from a start position."""

    def __init__(self, side: ReadSide, topic: str, start: str | Position = "earliest",
                 **kwargs) -> None:
        super().__init__(side, normalize_topic(topic), dedupe=True)
        if start == "earliest":
            mid = pulsar.MessageId.earliest
        elif start == "latest":
            mid = pulsar.MessageId.latest
        elif isinstance(start, Position):
            mid = pulsar.MessageId(-1, start.ledger, start.entry, start.batch)
            self._set_gate(start.entry_position)
            self._received = mid._msg_id
        else:
            raise ConfigError(f"start must be 'earliest', 'latest' or a Position, got {start!r}")
        kwargs.setdefault("receiver_queue_size", 2000)
        kwargs.setdefault("subscription_role_prefix", INTERNAL_PREFIX)  # the plugin exempts it
        self._r = side.pulsar.create_reader(self.segment, mid, **kwargs)
        self.schema = typed_schema(self._r)
        self._native = self._r._reader  # skips a Python wrapper object per message

    def _pull(self, timeout_ms: int) -> None:
        read = self._native.read_next
        got = []
        try:
            got.append(read(timeout_ms))
            for _ in range(DRAIN):
                got.append(read(0))
        except pulsar.Timeout:
            pass
        self.ingest(got)

    def read_next(self, timeout_millis: int | None = None) -> TxnMessage:
        return self.wrap(self.next_raw(timeout_millis))

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
        try:
            self._r.close()
        except (pulsar.NotConnected, pulsar.AlreadyClosed) as e:
            # its connection is gone (a terminated segment's reader reconnecting, a
            # broker restart): the broker dropped the reader with it; nothing is left
            log.debug("%s: reader closed while not connected: %s", self.segment, e)


def read_all(reader, idle_ms: int = 500) -> Iterable[TxnMessage]:
    """Yield messages until none arrives for ``idle_ms`` (tests, examples)."""
    read = getattr(reader, "receive", None) or reader.read_next
    while True:
        try:
            yield read(idle_ms)
        except ReadTimeout:
            return
