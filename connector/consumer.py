"""READ_COMMITTED consumer of one plain topic (segment) with transactional acks.

The read path is the readers' (GatedStream); what a consumer adds is the
PendingAckStore's client side: which id an ack uses, what a received message
already consumed under a committed transaction becomes, and which plain acks
conflict (DESIGN §3, "Acks").
"""

from __future__ import annotations

import threading
import time
import urllib.parse

import pulsar

from pulsar_txn.admin import admin_request, admin_topic_path
from pulsar_txn.errors import (
    AckConflict,
    AckConflictReason,
    AckNotAllowed,
    MetastoreUnavailable,
)
from pulsar_txn.message import TxnMessage, typed_schema
from pulsar_txn.metastore.claims import ClaimKind, ack_order, covers
from pulsar_txn.pending_ack import PendingAckStore
from pulsar_txn.readers import DRAIN, GatedStream, ReadSide
from pulsar_txn.records import Position, TxnId
from pulsar_txn.state import TxnState
from pulsar_txn.topics import normalize_topic
from pulsar_txn.transaction import Transaction


class Consumer(GatedStream):
    """READ_COMMITTED consumer; ``acknowledge(..., txn=)`` makes the ack transactional.

    Every ack of a message uses the id of the copy this consumer received last:
    pulsar-client acks the whole entry for an id it did not hand out, and a batched
    entry holds many messages. Received messages are checked against the
    subscription's claim table first (one round trip per drained batch): a message
    consumed under a committed transaction is acked again, never handed out (its
    first ack may have died in pulsar-client's ack grouping, or with a broker
    connection); a copy of one this consumer's open transaction holds is not handed
    out twice. Once the subscription has claims in view, each message is checked
    again as it is handed out (another consumer may have consumed it meanwhile).
    """

    def __init__(self, side: ReadSide, topic: str, subscription: str,
                 consumer_type: pulsar.ConsumerType = pulsar.ConsumerType.Exclusive,
                 initial_position: pulsar.InitialPosition = pulsar.InitialPosition.Earliest,
                 **kwargs) -> None:
        dedupe = consumer_type in (pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover)
        super().__init__(side, normalize_topic(topic), dedupe=dedupe)
        kwargs.setdefault("negative_ack_redelivery_delay_ms", 200)
        self._c = side.pulsar.subscribe(self.segment, subscription, consumer_type=consumer_type,
                                          initial_position=initial_position, **kwargs)
        self.schema = typed_schema(self._c)
        self._native = self._c._consumer  # native messages: no wrapper object per message
        self.subscription = subscription
        self._type = consumer_type
        # (cumulative acks: Exclusive and Failover only, as pulsar-client's)
        self._track = dedupe
        # Messages handed out and not acked since -> the native id of the newest copy
        # received (what an ack of it must use). Insertion ordered: a cumulative ack
        # under a txn names those up to it (``given``), so one that was acked under
        # another, committed txn and handed out again conflicts.
        self._handed: dict[Key, object] = {}
        # the watch thread applies committed acks (pops, prunes) while the application
        # thread hands out and acks: whole-dict operations take this lock
        self._handed_lock = threading.Lock()
        # handed out while another process's txn held them: a plain ack re-checks
        self._held_elsewhere: set[Key] = set()
        self._claims_seen = False  # this subscription has transactional claims
        self.reacked = 0  # deliveries of messages consumed under a committed txn
        # the claim table, read so that an unchanged one is not asked again
        self._claim_reads = side.store.claim_reads(self.segment, subscription)
        # held messages a re-check found consumed under a committed txn: acked, not
        # handed out, when their turn comes
        self._consumed: set[Key] = set()
        self._stash: list = []  # received, not yet checked against the claim table
        # copies (redelivered, or of a message held or handed out): another copy may be
        # consumed while this one waits, and the server's word of that (an invalidation)
        # may still be on the wire; read again as it is handed out, never taken as is
        self._at_risk: set[Key] = set()
        try:
            self.acks = PendingAckStore(side.store, self.segment, subscription,
                                        apply=self._apply_acks, redeliver=self._redeliver,
                                        cursor=self._cursor if side.admin_url else None)
            side.participants.register(self.acks)
            self.recovered = self.acks.recover()
        except BaseException:
            # the subscription must stay openable: a consumer left connected would
            # hold it (Exclusive: ConsumerBusy) for as long as this process lives
            if getattr(self, "acks", None) is not None:
                side.participants.unregister(self.acks)
            self._c.close()
            raise

    def _pull(self, timeout_ms: int) -> None:
        receive = self._native.receive
        got, self._stash = self._stash, []
        try:
            got.append(receive(0 if got else timeout_ms))
            for _ in range(DRAIN):
                got.append(receive(0))
        except pulsar.Timeout:
            pass
        if not got:
            return
        try:
            passed = self._unclaimed(got)
        except BaseException:
            # taken from pulsar-client, which will not give them again to a live
            # consumer: kept and checked again at the next receive (never dropped)
            self._stash = got
            raise
        self.ingest(passed)

    def _unclaimed(self, raws: list) -> list:
        """The received messages to hand out: a message consumed under a committed txn
        is acked again (with this copy's id) and dropped; a new copy of one this
        consumer handed out and has not acked replaces the old one's id and is not
        handed out twice (unless an abort asked for it again)."""
        store = self.side.store
        if not self._claims_seen and not store.has_claims(self.segment, self.subscription):
            handed = self._handed
            if not handed:  # the common case of a plain consumer: nothing to look at
                return raws
            out = []
            for raw in raws:
                k = _key(raw.message_id())
                if k in handed and self._copy_of_handed(k, raw):
                    continue
                out.append(raw)
            return out
        # a table with anything in it: plain acks on this subscription are checked too
        self._claims_seen = True
        keys = [_key(raw.message_id()) for raw in raws]
        positions = [Position(*k) for k in keys]
        verdicts = self.acks.verdicts(self._claim_reads.read(positions), positions)
        out = []
        for raw, k, p, (kind, _) in zip(raws, keys, positions, verdicts):
            if kind is ClaimKind.COMMITTED:
                self._native.acknowledge(raw)
                self._handed.pop(k, None)
                self.reacked += 1
                continue
            risky = kind is ClaimKind.HELD or k in self._handed or raw.redelivery_count() > 0
            if k in self._handed and self._copy_of_handed(k, raw):
                continue
            if risky:  # another copy may be consumed before this one's turn
                self._at_risk.add(k)
            if kind is ClaimKind.HELD and not self.acks.claimed_by_own(p):
                self._held_elsewhere.add(k)
            out.append(raw)
        return out

    def _copy_of_handed(self, k: Key, raw) -> bool:
        """A new copy of a message handed out and not acked: its id replaces the old
        one's (acks go by the copy the broker now tracks); it is not handed out again
        unless an abort asked for it."""
        self._handed[k] = raw.message_id()
        # a copy the broker sent again on purpose (an ack timeout, a negative ack) is
        # handed out again as pulsar-client would; one of a reconnect is not
        return k not in self.expected_copies and raw.redelivery_count() == 0

    def _on_skip(self, raw) -> None:
        self._native.acknowledge(raw)  # an aborted/losing entry is never visible: drop it

    def receive(self, timeout_millis: int | None = None) -> TxnMessage:
        left, deadline = timeout_millis, None  # the clock is read only if a copy is dropped
        while True:
            head = self.next_raw(left)
            k = _key(head[1])
            if self._claims_seen and self._consumed_meanwhile(head, k):
                if timeout_millis is not None:
                    if deadline is None:
                        deadline = time.monotonic() + timeout_millis / 1000
                    left = max(0, int((deadline - time.monotonic()) * 1000))
                continue
            self._handed[k] = head[1]
            return self.wrap(head)

    def _consumed_meanwhile(self, head, k: Key) -> bool:
        """Checked again as it is handed out: while it waited in the buffer, another
        consumer of the subscription may have received a copy (a Shared subscription
        after a dropped connection, a Failover switch) and acked it under a txn that
        committed. Such a message is acked again here, never handed out. Asked of the
        store only if the claim table may have changed since it was last read (the
        server says when it did: ClaimReads), and then for every held message at
        once; on subscriptions with transactional claims only."""
        if k in self._consumed:
            kind = ClaimKind.COMMITTED
            self._consumed.discard(k)
        elif k in self._at_risk:  # read now, alone (the table's token is left as it is)
            p = Position(*k)
            try:
                view = self.side.store.claims_of(self.segment, self.subscription, [p])
                kind = self.acks.verdicts(view, [p])[0][0]
            except BaseException:
                self.unread(head)  # never dropped: handed out (and checked) next time
                raise
        elif self._claim_reads.unchanged():
            return False  # as read when it was received, or by a re-check since
        else:
            kind = self._recheck(head, k)
        self._at_risk.discard(k)
        if kind is ClaimKind.COMMITTED:
            self._native.acknowledge(head[0])
            self._handed.pop(k, None)
            self.reacked += 1
            return True
        if kind is ClaimKind.HELD and not self.acks.claimed_by_own(Position(*k)):
            self._held_elsewhere.add(k)
        return False

    def _recheck(self, head, k: Key) -> ClaimKind:
        """Read the claims of ``head`` and of every held message again (one round
        trip); the held ones' verdicts are kept for their turn."""
        held = self.held_keys()
        positions = [Position(*x) for x in (k, *held)]
        try:
            verdicts = self.acks.verdicts(self._claim_reads.read(positions), positions)
        except BaseException:
            self.unread(head)  # never dropped: handed out (and checked) next time
            raise
        if len(self._consumed) > 4 * DRAIN:  # of messages skipped, never handed out
            self._consumed.clear()
        if len(self._at_risk) > 10 * DRAIN:  # marks of copies dropped unseen (dedupe)
            self._at_risk &= set(held)
        for x, q, (kind, _) in zip(held, positions[1:], verdicts[1:]):
            if kind is ClaimKind.COMMITTED:
                self._consumed.add(x)
            elif kind is ClaimKind.HELD and not self.acks.claimed_by_own(q):
                self._held_elsewhere.add(x)
        return verdicts[0][0]

    def acknowledge(self, message: TxnMessage, txn: Transaction | None = None) -> None:
        k = _key(message.native_id)
        if txn is None:
            if self._claims_seen or k in self._held_elsewhere:
                try:
                    self._refuse_plain_ack_of_claimed([Position(*k)])
                except AckConflict as conflict:
                    if conflict.committed:  # consumed already: this copy leaves the cursor
                        self._native.acknowledge(self._handed.pop(k, None)
                                                 or message.native_id)
                    raise
            self._native.acknowledge(self._handed.pop(k, None) or message.native_id)
            if self._held_elsewhere:
                self._held_elsewhere.discard(k)
        else:
            txn.enlist(self.acks)
            self._claims_seen = True
            try:
                self.acks.acknowledge(txn.id, [Position(*k)], cumulative=False)
            except AckConflict as conflict:
                self._after_conflict(txn, conflict, Position(*k))
                raise
            except MetastoreUnavailable as e:  # maybe recorded: the txn cannot commit
                txn.send_failed(e, "an ack")
                raise
        if self.expected_copies:  # acked: a late copy of it is a duplicate again
            self.expected_copies.discard(k)

    def acknowledge_async(self, message: TxnMessage, txn: Transaction | None = None) -> None:
        """``acknowledge`` without a metastore round trip per ack under a transaction,
        as the Java client's ``acknowledgeAsync(id, txn)``: the transaction's acks here
        are claimed and recorded together, every ``pending_ack.ACK_BATCH`` acks and
        at the latest by its commit. A conflict found then (another transaction holds
        a message, or consumed it already) fails the transaction instead of the ack:
        the commit raises ``AckConflict`` and aborts, and every message it acked is
        delivered again. A second ack of one message in the transaction is refused at
        once, as is an ack racing the commit (``TxnNotOpen``). Without ``txn``, the
        same as ``acknowledge`` (pulsar-client's acks are asynchronous already)."""
        if txn is None:
            self.acknowledge(message)
            return
        txn.check_deployment()
        txn.enlist(self.acks)
        txn.flush_before_commit(_DeferredAcks(self.acks, txn))  # refused once committing
        self._claims_seen = True
        p = message.position
        if self.acks.defer(txn.id, p, lambda: txn.state is TxnState.OPEN
                           and not txn.committing):
            self._flush_deferred(txn)
        if self.expected_copies:
            self.expected_copies.discard(_pkey(p))

    def _flush_deferred(self, txn: Transaction) -> None:
        try:
            self.acks.flush_deferred(txn.id)
        except BaseException as e:  # the batch's acks are missing: it cannot commit
            txn.send_failed(e, "an ack")
            raise

    def acknowledge_cumulative(self, message: TxnMessage, txn: Transaction | None = None) -> None:
        upto = message.position
        if not self._track:
            raise AckNotAllowed(
                f"{self.segment}: subscription {self.subscription!r} is "
                f"{_type_name(self._type)}: a cumulative ack is allowed on Exclusive and "
                "Failover subscriptions only (as pulsar-client's); ack each message")
        if txn is None:
            if self._claims_seen or self._held_elsewhere:
                self._refuse_plain_cumulative_over_claims(upto)
            self._ack_cumulative_native(upto)
            top = _pkey(upto)
            self._held_elsewhere = {k for k in self._held_elsewhere if k > top}
        else:
            txn.enlist(self.acks)
            self._claims_seen = True
            own = self.acks.acked_by_own
            top = _pkey(upto)
            with self._handed_lock:
                below = [k for k in self._handed if k <= top]
            given = [p for p in (Position(*k) for k in below) if not own(p)]
            try:
                self.acks.acknowledge(txn.id, [upto], cumulative=True, given=given)
            except AckConflict as conflict:
                self._after_conflict(txn, conflict, conflict.position)
                raise
            except MetastoreUnavailable as e:  # maybe recorded: the txn cannot commit
                txn.send_failed(e, "an ack")
                raise
            return
        self._forget_upto(upto)

    def _after_conflict(self, txn: Transaction, conflict: AckConflict, p: Position) -> None:
        """A copy of a message consumed under a committed txn is acked again, never
        again handed out; one another live txn holds goes round again once ``txn`` ends
        (the application aborts it, or commits without it)."""
        if conflict.committed:
            native = self._handed.pop(_pkey(p), None)
            if native is not None:
                self._native.acknowledge(native)
        elif not conflict.again:  # txn's own first ack of it stands: nothing goes round
            self.acks.refused(txn.id, p)

    def _refuse_plain_ack_of_claimed(self, positions: list[Position]) -> None:
        """PENDING_ACK (DESIGN §3): a plain ack of a message a transaction holds, or
        consumed under a committed one, conflicts like another transaction's would
        (one this consumer acked with ``acknowledge_async`` too, claimed or not yet)."""
        deferred = self.acks.deferred_holders()
        for p in positions:
            if p in deferred and self._holder_alive(deferred[p]):
                raise AckConflict(p, deferred[p], AckConflictReason.HELD)
        view = self.side.store.claims_of(self.segment, self.subscription, positions)
        for p, (kind, holder) in zip(positions, self.acks.verdicts(view, positions)):
            if kind is ClaimKind.COMMITTED:
                raise AckConflict(p, holder, AckConflictReason.COMMITTED if holder
                                  else AckConflictReason.ON_CURSOR)
            if kind is ClaimKind.HELD and self._holder_alive(holder):
                raise AckConflict(p, holder, AckConflictReason.HELD)

    def _refuse_plain_cumulative_over_claims(self, upto: Position) -> None:
        claims = self.side.store.list_claims(self.segment, self.subscription)
        held = [(p, h) for p, h in claims.live.items() if covers(upto, p)]
        held += [(p, h) for p, h in self.acks.deferred_holders().items() if covers(upto, p)]
        if claims.cumulative is not None:
            held.append((claims.cumulative.position, claims.cumulative.holder))
        for p, holder in sorted(held, key=lambda ph: ack_order(ph[0])):
            if self._holder_alive(holder):
                raise AckConflict(p, holder, AckConflictReason.HELD)

    def _holder_alive(self, holder: TxnId | None) -> bool:
        """A claim binds while its holder may still commit (an aborted one is void)."""
        h = self.side.store.get_header(holder) if holder is not None else None
        return h is not None and h.state is not TxnState.ABORTED

    def _ack_cumulative_native(self, upto: Position) -> None:
        """A cumulative ack up to ``upto`` and no further: the messages of ``upto``'s
        batched entry handed out up to it are acked one by one with their own ids,
        and whole entries before it cumulatively (an id built from numbers with a
        batch index would ack the rest of the entry too)."""
        if upto.batch < 0:
            self._native.acknowledge_cumulative(_entry_id(upto.ledger, upto.entry))
            return
        if upto.entry > 0:
            self._native.acknowledge_cumulative(_entry_id(upto.ledger, upto.entry - 1))
        top = _pkey(upto)
        with self._handed_lock:
            handed = list(self._handed.items())
        for k, native in handed:
            if k <= top and (upto.entry == 0 or k[:2] == top[:2]):
                self._native.acknowledge(native)

    def _forget_upto(self, upto: Position) -> None:
        """In place (a receive on the other thread adds keys without the lock)."""
        top = _pkey(upto)
        with self._handed_lock:
            for k in [k for k in list(self._handed) if k <= top]:
                self._handed.pop(k, None)

    def _apply_acks(self, positions: list[Position], cumulative: bool) -> None:
        """A committed txn's acks, as far as this consumer can apply them exactly: a
        message it handed out by its own id, an unbatched one by numbers (its entry is
        the message). Any other (a batched message received by another consumer or
        before a restart) is acked when it is delivered: its tombstone covers it."""
        if cumulative:
            for upto in positions:
                if self._track:
                    self._ack_cumulative_native(upto)
                self._forget_upto(upto)
            return
        for p in positions:
            native = self._handed.pop(_pkey(p), None)
            if native is not None:
                self._native.acknowledge(native)
            elif p.batch < 0:
                self._native.acknowledge(_entry_id(p.ledger, p.entry))

    def _cursor(self) -> Position | None:
        """The subscription's mark-delete position (admin internalStats), if known."""
        stats = admin_request(self.side.admin_url, "GET",
                              admin_topic_path(self.segment) + "/internalStats",
                              auth=self.side.admin_auth)
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
        if len(self.expected_copies) > 100_000:  # copies that never came: forget them
            self.expected_copies.clear()
        self.expected_copies.update((p.ledger, p.entry, p.batch) for p in positions)
        for p in positions:
            native = self._handed.get(_pkey(p))
            if native is None:
                native = pulsar.MessageId(-1, p.ledger, p.entry, p.batch)._msg_id
            # the wrapper's negative_acknowledge takes only the native id
            self._c.negative_acknowledge(native)

    def close(self) -> None:
        self.side.participants.unregister(self.acks)
        self._c.close()


Key = tuple[int, int, int]  # (ledger, entry, batch index): hashed and compared in C


class _DeferredAcks:
    """The commit's flush of one transaction's deferred acks on one subscription
    (equal per (store, txn), so each registers once)."""

    __slots__ = ("acks", "txn")

    def __init__(self, acks: PendingAckStore, txn: Transaction) -> None:
        self.acks, self.txn = acks, txn

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _DeferredAcks) and other.acks is self.acks
                and other.txn is self.txn)

    def __hash__(self) -> int:
        return hash((id(self.acks), id(self.txn)))

    def flush(self) -> None:
        """The commit's flush seals the batch; a flush of the user's mid-transaction
        (``Transaction.flush``) only claims what is there."""
        self.acks.flush_deferred(self.txn.id, seal=self.txn.committing)


def _key(mid) -> Key:
    """The key of a native message id (no Position object per message: hot path)."""
    return mid.ledger_id(), mid.entry_id(), mid.batch_index()


def _pkey(p: Position) -> Key:
    return p.ledger, p.entry, p.batch


def _entry_id(ledger: int, entry: int):
    """The native id of a whole entry (no batch index: acks every message in it)."""
    return pulsar.MessageId(-1, ledger, entry, -1)._msg_id


def _type_name(kind: pulsar.ConsumerType) -> str:
    return {pulsar.ConsumerType.Shared: "Shared",
            pulsar.ConsumerType.KeyShared: "Key_Shared"}.get(kind, str(kind))
