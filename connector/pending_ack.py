"""PendingAckStore: acks under a transaction, per (segment, subscription).

An ack under T first *claims* the message in the (segment, subscription) claim
table (PENDING_ACK: another txn's claim conflicts), then records it under T's
header, which is the fence (no ack joins after the end CAS). Commit applies the
recorded acks to the Pulsar subscription and turns the claims into tombstones
(a Shared subscription may still redeliver an acked message: a later claim of it
must conflict, invariant 7); abort releases the claims so the messages are
redelivered. ``recover`` re-applies committed-but-unapplied acks
after a crash; applying is idempotent (acking an acked message is a no-op).

"Applied" means on the subscription's cursor, and pulsar-client cannot say when
that is: its acks are grouped and sent later with no receipt, and an id it did not
hand out acks the whole entry. So the tombstone, not the ack record's mark, is
what makes a committed ack reach the cursor: it stays until the cursor is known
past it (``trim``), and every consumer of the subscription acks again, with the
copy's own id, any message it receives that a tombstone covers, instead of handing
it out. The mark only says the tombstones are written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from pulsar_txn.errors import (
    AckConflict,
    AckConflictReason,
    MetastoreUnavailable,
    PulsarTxnError,
    TxnNotOpen,
)
from pulsar_txn.metastore.base import MetadataStore
from pulsar_txn.metastore.claims import (
    AckRecord,
    ClaimKind,
    ClaimView,
    ack_order,
    check_subscription,
    covers,
)
from pulsar_txn.records import Position, TxnId
from pulsar_txn.state import TxnState

log = logging.getLogger(__name__)

# apply(positions, cumulative) acknowledges on the Pulsar subscription;
# release(positions) makes the broker redeliver them (negative ack).
ApplyFn = Callable[[list[Position], bool], None]
# cursor() -> the subscription's mark-delete position on the broker (every message at
# or below it is acked and never delivered again), or None if unknown.
CursorFn = Callable[[], "Position | None"]

TRIM_INTERVAL_S = 30.0
# deferred acks (acknowledge_async) of one txn registered in one claim and one record
ACK_BATCH = 1000


class PendingAckStore:
    def __init__(self, store: MetadataStore, segment: str, subscription: str,
                 apply: ApplyFn, redeliver: Callable[[list[Position]], None] | None = None,
                 cursor: CursorFn | None = None) -> None:
        check_subscription(subscription)
        self.store = store
        self.segment = segment
        self.subscription = subscription
        self._apply = apply
        self._redeliver = redeliver
        self._cursor = cursor
        self._trim_due = time.monotonic() + TRIM_INTERVAL_S
        self._trimming = False
        self._lock = threading.Lock()
        self._pending: dict[TxnId, list[tuple[list[Position], bool]]] = {}
        self._own: dict[Position, TxnId] = {}  # individually acked by a pending txn
        self._own_cumulative: dict[TxnId, Position] = {}
        self._refused: dict[TxnId, list[Position]] = {}
        # acks taken by acknowledge_async and not yet claimed; a txn whose commit took
        # them (flush_deferred(seal=True)) refuses more
        self._deferred: dict[TxnId, dict[Position, None]] = {}
        self._sealed: set[TxnId] = set()
        self._flushing = threading.Lock()  # one deferred batch claimed at a time
        self._flush_failed: dict[TxnId, BaseException] = {}
        # txns that may hold claims here beyond their recorded acks (a claim or record
        # whose answer was lost): their end settles by reading the whole claim table,
        # every other txn's by naming its positions (the table holds every tombstone
        # until trimmed: reading it whole at every end grows with the subscription)
        self._unsure: set[TxnId] = set()

    # ---- Ack path ----
    def acknowledge(self, txn_id: TxnId, positions: Sequence[Position],
                    cumulative: bool = False, given: Sequence[Position] = ()) -> None:
        """``given`` (cumulative only): the messages up to the ack that the consumer
        handed out since its last cumulative ack, other than its own individual acks.
        One of them already acked under a committed txn was delivered twice (a
        Failover switch): acking it again would duplicate its output (invariant 7)."""
        ordered = sorted(positions, key=ack_order)
        if not cumulative:
            self._refuse_second_ack(txn_id, positions)
        try:
            self._claim(txn_id, ordered, cumulative, list(given))
        except MetastoreUnavailable:  # the claim may exist: see below
            self._not_sure(txn_id)
            raise
        try:
            self.store.record_acks(txn_id, self.segment, self.subscription, ordered,
                                   cumulative)
        except MetastoreUnavailable:
            # the script may have run (the answer lost with the connection): the claims
            # or the record may exist, so they stay until the txn ends (the consumer
            # marks it unable to commit; an aborted holder's claims are void to later
            # claimers), and its end reads the whole table for them
            self._not_sure(txn_id)
            raise
        except PulsarTxnError:  # refused by the script: nothing recorded
            self.store.release_acks(txn_id, self.segment, self.subscription,
                                    () if cumulative else ordered, cumulative=cumulative)
            raise
        with self._lock:
            # a cumulative ack keeps what it was given: an abort hands those out again
            held = list(positions) + (list(given) if cumulative else [])
            self._pending.setdefault(txn_id, []).append((held, cumulative))
            if cumulative:
                top = max(positions)
                if self._own_cumulative.get(txn_id, top) <= top:
                    self._own_cumulative[txn_id] = top
            else:
                self._own.update(dict.fromkeys(positions, txn_id))

    def _not_sure(self, txn_id: TxnId) -> None:
        with self._lock:
            self._unsure.add(txn_id)

    # ---- Deferred acks (acknowledge_async) ----
    def defer(self, txn_id: TxnId, p: Position, still_open: Callable[[], bool]) -> bool:
        """Take an ack of ``p`` under ``txn_id`` without a round trip; it is claimed and
        recorded by ``flush_deferred``, at the latest by the commit's flush. True: the
        batch is full (flush it now). A second ack of ``p`` in the txn is refused as
        ``acknowledge`` refuses it; so is any ack once the commit took the batch or the
        txn ended (``still_open``, asked under the lock the commit's flush takes)."""
        with self._lock:
            if txn_id in self._sealed or not still_open():
                raise TxnNotOpen(str(txn_id), "committing or ended")
            batch = self._deferred.setdefault(txn_id, {})
            if p in batch or self._own.get(p) == txn_id:
                raise AckConflict(p, txn_id, AckConflictReason.AGAIN)
            batch[p] = None
            return len(batch) >= ACK_BATCH

    def deferred_holders(self) -> dict[Position, TxnId]:
        """Messages acked under a txn of this consumer and not claimed yet: a plain ack
        of one conflicts as a claimed one's does."""
        with self._lock:
            return {p: t for t, batch in self._deferred.items() for p in batch}

    def flush_deferred(self, txn_id: TxnId, seal: bool = False) -> None:
        """Claim and record ``txn_id``'s deferred acks in one go (``seal``: the commit's
        flush; nothing more is taken after it). If that raises, the txn must not commit
        (the caller fails it) and every message of the batch goes round again when it
        ends: a conflict is found before any claim is written (all or nothing).
        One batch at a time: the commit's flush waits for a full batch another thread
        is claiming, and raises what that one raised."""
        with self._flushing:
            with self._lock:
                batch = self._deferred.pop(txn_id, None)
                if seal:
                    self._sealed.add(txn_id)
                failed = self._flush_failed.get(txn_id)
            positions = list(batch or ())
            try:
                if failed is not None:  # an earlier batch's acks are missing
                    raise failed
                if positions:
                    self.acknowledge(txn_id, positions)
            except BaseException as e:
                with self._lock:
                    self._refused.setdefault(txn_id, []).extend(positions)
                    self._flush_failed.setdefault(txn_id, e)
                raise

    def recorded(self, txn_id: TxnId) -> int:
        """Ack record calls under ``txn_id`` that succeeded here (the commit's check)."""
        with self._lock:
            return len(self._pending.get(txn_id, ()))

    def _refuse_second_ack(self, txn_id: TxnId, positions: Sequence[Position]) -> None:
        """A message this txn acked already: the application holds a second copy of it
        (a redelivery after a dropped connection, an ack timeout) and processed both in
        one txn; committing would consume one input for two outputs. Refused like
        another txn's claim: the application aborts and the message goes round again."""
        with self._lock:
            deferred = self._deferred.get(txn_id, {})
            again = [p for p in positions if self._own.get(p) == txn_id or p in deferred]
        if again:
            raise AckConflict(again[0], txn_id, AckConflictReason.AGAIN)

    def _claim(self, txn_id: TxnId, positions: list[Position], cumulative: bool,
               given: list[Position]) -> None:
        for _ in range(3):
            try:
                self.store.claim_acks(txn_id, self.segment, self.subscription, positions,
                                      cumulative, given)
                return
            except AckConflict as conflict:
                holder = conflict.holder_id
                if conflict.committed or holder is None:  # final (invariant 7)
                    raise
                h = self.store.get_header(holder)
                if h is not None and h.state is not TxnState.ABORTED:
                    raise
                # An aborted holder's claim is void: release and retry. A live claim
                # whose header is gone is void too: a committed holder turns its claims
                # into tombstones before its header can be collected.
                self.store.release_acks(holder, self.segment, self.subscription)
        raise AckConflict(positions[0], None, AckConflictReason.CONTENDED)

    # ---- Materialization (after the decision) ----
    def on_end(self, txn_id: TxnId, state: TxnState) -> None:
        """Apply (COMMITTED) or release (ABORTED) this store's acks of ``txn_id``.
        A commit is applied only once a crash of the store's host can no longer lose it
        (``durability=waitaof``: fsynced): acks on the cursor cannot be taken back, and
        a lost decision comes back OPEN and times out ABORTED. Until then the txn stays
        pending here; the committer's own call after its WAITAOF, or recovery, applies
        it."""
        with self._lock:
            refused = self._refused.pop(txn_id, None)
            deferred = self._deferred.pop(txn_id, None)
            self._sealed.discard(txn_id)
            self._flush_failed.pop(txn_id, None)
        if deferred:
            if state is TxnState.COMMITTED:  # cannot happen: the commit's flush took them
                log.error("%s|%s: transaction %s committed without %d of its acks; their "
                          "messages stay on the subscription", self.segment,
                          self.subscription, txn_id, len(deferred))
            else:  # never claimed: handed out again, as the txn's other acks are
                refused = (refused or []) + list(deferred)
        if refused and self._redeliver:
            # acks of it this txn was refused (another txn held the message): whatever
            # this txn's end, the message goes round again and is checked again
            self._redeliver(refused)
        if state is TxnState.COMMITTED and not self._durably_committed(txn_id):
            return
        with self._lock:
            local = self._pending.pop(txn_id, None)
            self._own_cumulative.pop(txn_id, None)
            for ps, cum in local or ():
                for p in () if cum else ps:
                    if self._own.get(p) == txn_id:
                        del self._own[p]
            unsure = txn_id in self._unsure
            self._unsure.discard(txn_id)  # recovery reads the whole table anyway
        if local is None and state is TxnState.ABORTED:
            return
        # COMMITTED with nothing local: the event's call got there first and may still
        # be applying; applying again is idempotent and makes the committer's commit()
        # return only once the tombstones are written
        if state is TxnState.COMMITTED:
            self._apply_committed(txn_id, whole_table=unsure)
        elif state is TxnState.ABORTED and local:
            # redelivery first: a copy of a message whose claim is void is handed out
            # and claimed anew, so a failure to release below loses nothing
            if self._redeliver:
                self._redeliver(sorted({p for ps, _ in local for p in ps}))
            if unsure:
                self.store.release_acks(txn_id, self.segment, self.subscription)
            else:  # its claims: the positions it acked (a cumulative ack: its one claim)
                self.store.release_acks(
                    txn_id, self.segment, self.subscription,
                    sorted({p for ps, cum in local if not cum for p in ps}),
                    cumulative=any(cum for _, cum in local))

    def refused(self, txn_id: TxnId, p: Position) -> None:
        """An ack of ``p`` under ``txn_id`` conflicted with another live txn's claim:
        the message is handed out again once ``txn_id`` ends (never stuck in the
        consumer that got the conflict)."""
        with self._lock:
            self._refused.setdefault(txn_id, []).append(p)

    def _durably_committed(self, txn_id: TxnId) -> bool:
        h = self.store.final_headers([txn_id]).get(txn_id)
        return h is not None and h.state is TxnState.COMMITTED

    def _record(self, txn_id: TxnId) -> AckRecord | None:
        """``txn_id``'s acks here (None: it recorded none)."""
        return self.store.list_acks(txn_id).get((self.segment, self.subscription))

    def _apply_committed(self, txn_id: TxnId, whole_table: bool = True) -> bool:
        """Hand the committed acks to the broker, then write their tombstones and the
        mark. False: the broker refused them (a closed consumer, an ack the
        subscription cannot take); the tombstones still make every consumer ack the
        messages when they are delivered, so nothing stays pending because of it.
        ``whole_table``: claims the txn never recorded may exist (recovery, a lost
        answer): settle them too, by reading the whole claim table."""
        rec = self._record(txn_id)
        if rec is None:  # claimed, never recorded: the txn did not ack them
            self.store.release_acks(txn_id, self.segment, self.subscription)
            return True
        clean = True
        if not rec.applied:
            try:
                if rec.individual:
                    self._apply(list(rec.individual), False)
                if rec.cumulative is not None:
                    self._apply([rec.cumulative], True)
            except Exception as e:  # noqa: BLE001 - applied on delivery instead
                clean = False
                log.warning("%s|%s: the broker refused the committed acks of %s (%s); "
                            "they are applied as their messages are delivered",
                            self.segment, self.subscription, txn_id, e)
        # Tombstones before the mark: GC collects a committed header only once every
        # ack record is marked, so a live claim whose header is gone is never a
        # committed one. A crash between the two leaves a tombstone of a header with
        # an unmarked record: ``recover`` finishes the mark.
        self._settle(txn_id, rec, whole_table)
        if not rec.applied:
            self.store.mark_acks_applied(txn_id, self.segment, self.subscription)
        self._trim_if_due()
        return clean

    def _settle(self, txn_id: TxnId, rec: AckRecord, whole_table: bool = True) -> None:
        """Tombstone the recorded acks; release any claim the txn never recorded
        (``whole_table``: there may be some)."""
        if not rec.empty:
            self.store.release_acks(txn_id, self.segment, self.subscription,
                                    rec.individual, committed=True,
                                    cumulative=rec.cumulative is not None)
        if whole_table:
            self.store.release_acks(txn_id, self.segment, self.subscription)

    # ---- Tombstone trimming ----
    def trim(self) -> int:
        """Drop tombstones of messages that can no longer be delivered: at or below the
        committed cumulative ack (which stays the conflict for them), or behind the
        subscription's cursor on the broker. A holder whose ack record is not marked
        applied keeps its tombstones (recovery finds it through them). Returns the
        number dropped."""
        claims = self.store.list_claims(self.segment, self.subscription)
        horizon = claims.committed_horizon
        cursor = self._cursor() if self._cursor else None
        if cursor is not None:
            # the cursor's entry as a whole: every batch index of it is acked too
            at = Position(cursor.ledger, cursor.entry, -1)
            horizon = at if horizon is None else max(horizon, at, key=ack_order)
        below = [(p, h) for p, h in claims.tombstones.items() if covers(horizon, p)]
        if not below:
            return 0
        done = self._holders_done({h for _, h in below})
        gone = [(p, h) for p, h in below if h in done]
        if not gone:
            return 0
        # the horizon stays a conflict: the broker may have handed out a copy of a
        # message before its cursor passed it (another consumer's prefetch)
        return self.store.trim_tombstones(self.segment, self.subscription,
                                          max((p for p, _ in gone), key=ack_order), gone)

    def _holders_done(self, holders: set[TxnId]) -> set[TxnId]:
        """Holders whose ack record here is marked applied (or collected, which GC
        does only after every mark). A header missing for another reason is unknown:
        its tombstones stay (fail closed)."""
        headers = self.store.get_headers(list(holders))
        done, gone = set(), []
        for t, h in headers.items():
            if h is None:
                gone.append(t)
            elif h.state is TxnState.COMMITTED and h.open_ack_records == 0:
                done.add(t)
            elif h.state is TxnState.COMMITTED:
                rec = self._record(t)
                if rec is None or rec.applied:
                    done.add(t)
        if gone:
            done.update(self.store.collected(gone))
        return done

    def _trim_if_due(self) -> None:
        """At most every TRIM_INTERVAL_S, off the caller's thread (it may be the watch's
        or a commit's; the cursor lookup is a REST call)."""
        now = time.monotonic()
        if now < self._trim_due or self._trimming:
            return
        self._trim_due, self._trimming = now + TRIM_INTERVAL_S, True
        threading.Thread(target=self._trim_quietly, daemon=True,
                         name="pulsar-txn-trim").start()

    def _trim_quietly(self) -> None:
        try:
            self.trim()
        except Exception:  # noqa: BLE001 - trimming is housekeeping; retried when due
            log.warning("%s|%s: trimming ack tombstones failed; retried later",
                        self.segment, self.subscription, exc_info=True)
        finally:
            self._trimming = False

    def pending_txns(self) -> list[TxnId]:
        """Txns with acks here (recorded, or deferred: an end missed by a watch outage
        hands those out again too)."""
        with self._lock:
            return list(self._pending) + [t for t in self._deferred if t not in self._pending]

    # ---- Recovery ----
    def recover(self) -> dict[str, int]:
        """After a crash: finish the materialization of every ended holder of a claim,
        and the mark of every committed holder whose claims are tombstones already."""
        claims = self.store.list_claims(self.segment, self.subscription)
        holders = set(claims.live.values())
        settled = set(claims.tombstones.values())
        if claims.cumulative:
            holders.add(claims.cumulative.holder)
        if claims.committed:
            settled.add(claims.committed.holder)
        pending = set(self.pending_txns())
        ids = list(holders | settled | pending)
        # a decision a host crash can still lose counts as not taken (waitaof)
        headers = self.store.final_headers(ids) if ids else {}
        stats = {"applied": 0, "released": 0, "open": 0, "failed": 0}
        for t, h in headers.items():
            if t in pending and (h is None or h.state is not TxnState.OPEN):
                # an end this process missed (a watch outage): the whole on_end, so an
                # abort also hands the messages out again
                self.on_end(t, TxnState.ABORTED if h is None else h.state)
                stats["released" if h is None or h.state is TxnState.ABORTED
                      else "applied"] += 1
                continue
            if t in settled and t not in holders:
                if h is not None and h.open_ack_records > 0:
                    rec = self._record(t)
                    if rec is not None and not rec.applied:
                        self.store.mark_acks_applied(t, self.segment, self.subscription)
                continue
            if h is None or h.state is TxnState.ABORTED:
                self.store.release_acks(t, self.segment, self.subscription)
                stats["released"] += 1
            elif h.state is TxnState.COMMITTED:
                stats["applied" if self._apply_committed(t) else "failed"] += 1
            else:
                stats["open"] += 1
        return stats

    def verdicts(self, view: ClaimView,
                 positions: Sequence[Position]) -> list[tuple[ClaimKind, TxnId | None]]:
        """``view.of`` each position, a claim whose holder committed *and recorded the
        ack* read as COMMITTED: the tombstone comes after the CAS, from the committer's
        follow-up, which can fail or die with its process (recovery writes it later),
        and the message is consumed all the same. A claim its committed holder never
        recorded is no ack: it is released, the message goes round (``_apply_committed``).
        Reads only when a claim is HELD (a copy of a message a txn holds: rare): the
        holders' headers, then a committed one's ack record; a decision a host crash may
        still lose is not one (``final_headers``)."""
        rows = [view.of(p) for p in positions]
        holders = {h for kind, h in rows if kind is ClaimKind.HELD and h is not None}
        if not holders:
            return rows
        headers = self.store.final_headers(list(holders))
        done = [t for t, h in headers.items() if h is not None and h.state is TxnState.COMMITTED]
        if not done:
            return rows
        recs = {t: self._record(t) for t in done}
        individual = {t: set(r.individual) for t, r in recs.items() if r is not None}

        def consumed(p: Position, t: TxnId) -> bool:
            rec = recs.get(t)
            return rec is not None and (p in individual[t] or covers(rec.cumulative, p))

        return [(ClaimKind.COMMITTED, h) if kind is ClaimKind.HELD and consumed(p, h)
                else (kind, h) for p, (kind, h) in zip(positions, rows)]

    def acked_by_own(self, p: Position) -> bool:
        """Whether a pending txn of this store's consumer acked ``p`` individually."""
        return p in self._own

    def claimed_by_own(self, p: Position) -> bool:
        """Whether a pending txn of this store's consumer holds ``p`` (individually, or
        at or below its cumulative ack)."""
        return p in self._own or any(p <= top for top in list(self._own_cumulative.values()))


def settle_committed_acks(store: MetadataStore, txn_id: TxnId) -> int:
    """Write the tombstones and marks of a committed txn's ack records with no consumer
    (an operator's command, or GC finding it ACKS_PENDING past the retention): the
    tombstones make every consumer of those subscriptions ack the messages when they
    are delivered, so nothing of the broker is needed. Returns the records settled."""
    h = store.final_headers([txn_id]).get(txn_id)  # waitaof: only a durable commit
    if h is None or h.state is not TxnState.COMMITTED:
        return 0
    settled = 0
    for (segment, subscription), rec in store.list_acks(txn_id).items():
        if rec.applied:
            continue
        if not rec.empty:
            store.release_acks(txn_id, segment, subscription, rec.individual,
                               committed=True, cumulative=rec.cumulative is not None)
        store.release_acks(txn_id, segment, subscription)
        store.mark_acks_applied(txn_id, segment, subscription)
        settled += 1
    return settled
