"""PendingAckStore: acks under a transaction, per (segment, subscription).

An ack under T first *claims* the message in the (segment, subscription) claim
table (PENDING_ACK: another txn's claim conflicts), then records it under T's
header, which is the fence (no ack joins after the end CAS). Commit applies the
recorded acks to the Pulsar subscription and turns the claims into tombstones
(a Shared subscription may still redeliver an acked message: a later claim of it
must conflict, invariant 7); abort releases the claims so the messages are
redelivered. ``recover`` re-applies committed-but-unapplied acks
after a crash; applying is idempotent (acking an acked message is a no-op).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from pulsar_txn.errors import AckConflict, PulsarTxnError
from pulsar_txn.metastore.base import MetadataStore
from pulsar_txn.records import Position, TxnId
from pulsar_txn.state import TxnState

log = logging.getLogger(__name__)

CUM = "~cum"
TOMB = "~tomb"  # the highest committed cumulative ack: "txn|position"
TRIMMED = "~trimmed"  # tombstones at or below it were dropped; claims there conflict


def ack_key(p: Position) -> str:
    """Lexicographic key of one message: entry, then batch index (-1 = whole entry)."""
    return f"{p.encode()}:{'ffffffff' if p.batch < 0 else format(p.batch, '08x')}"


def ack_position(key: str) -> Position:
    base, _, batch = key.partition(":")
    b = -1 if batch in ("", "ffffffff") else int(batch, 16)
    return Position(int(base[:16], 16), int(base[16:32], 16), b)


# apply(positions, cumulative) acknowledges on the Pulsar subscription;
# release(positions) makes the broker redeliver them (negative ack).
ApplyFn = Callable[[list[Position], bool], None]
# cursor() -> the subscription's mark-delete position on the broker (every message at
# or below it is acked and never delivered again), or None if unknown.
CursorFn = Callable[[], "Position | None"]

TRIM_INTERVAL_S = 30.0


class PendingAckStore:
    def __init__(self, store: MetadataStore, segment: str, subscription: str,
                 apply: ApplyFn, redeliver: Callable[[list[Position]], None] | None = None,
                 cursor: CursorFn | None = None) -> None:
        if "|" in subscription:
            raise ValueError(f"subscription {subscription!r} must not contain '|'")
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
        # Positions acked by recovery: a consumer may already hold them prefetched.
        self.recovered_acks: set[Position] = set()
        self.recovered_cumulative: Position | None = None

    # ---- Ack path ----
    def acknowledge(self, txn_id: TxnId, positions: Sequence[Position],
                    cumulative: bool = False, given: Sequence[Position] = ()) -> None:
        """``given`` (cumulative only): the messages up to the ack that the consumer
        handed out since its last cumulative ack, other than its own individual acks.
        One of them already acked under a committed txn was delivered twice (a
        Failover switch): acking it again would duplicate its output (invariant 7)."""
        keys = sorted(ack_key(p) for p in positions)
        self._claim(txn_id, keys, cumulative, [ack_key(p) for p in given])
        try:
            self.store.record_acks(txn_id, self.segment, self.subscription, keys, cumulative)
        except PulsarTxnError:
            self.store.release_acks(txn_id, self.segment, self.subscription,
                                    [CUM] if cumulative else keys)
            raise
        with self._lock:
            self._pending.setdefault(txn_id, []).append((list(positions), cumulative))

    def _claim(self, txn_id: TxnId, keys: list[str], cumulative: bool,
               given: list[str]) -> None:
        for _ in range(3):
            try:
                self.store.claim_acks(txn_id, self.segment, self.subscription, keys,
                                      cumulative, given)
                return
            except AckConflict as conflict:
                if conflict.committed:  # a committed ack is final (invariant 7)
                    raise
                holder = TxnId.parse(conflict.holder)
                h = self.store.get_header(holder)
                if h is not None and h.state is not TxnState.ABORTED:
                    raise
                # An aborted holder's claim is void: release and retry. A live claim
                # whose header is gone is void too: a committed holder turns its claims
                # into tombstones before its header can be collected.
                self.store.release_acks(holder, self.segment, self.subscription)
        raise AckConflict(keys[0], "a concurrently re-claiming transaction")

    # ---- Materialization (after the decision) ----
    def on_end(self, txn_id: TxnId, state: TxnState) -> None:
        """Apply (COMMITTED) or release (ABORTED) this store's acks of ``txn_id``."""
        with self._lock:
            local = self._pending.pop(txn_id, None)
        if local is None and state is TxnState.ABORTED:
            return
        if state is TxnState.COMMITTED:
            self._apply_committed(txn_id)
        elif state is TxnState.ABORTED:
            self.store.release_acks(txn_id, self.segment, self.subscription)
            if self._redeliver and local:
                self._redeliver([p for ps, cum in local if not cum for p in ps])

    def _apply_committed(self, txn_id: TxnId, recovering: bool = False) -> None:
        rec = self.store.list_acks(txn_id).get((self.segment, self.subscription))
        if rec is None:  # claimed, never recorded: the txn did not ack them
            self.store.release_acks(txn_id, self.segment, self.subscription)
            return
        if rec.get("applied"):
            self._settle(txn_id, rec)
            return
        ind = [ack_position(k) for k in rec.get("ind", [])]
        if ind:
            self._apply(ind, False)
        if rec.get("cum"):
            self._apply([ack_position(rec["cum"])], True)
        if recovering:
            self.recovered_acks.update(ind)
            if rec.get("cum"):
                cum = ack_position(rec["cum"])
                if self.recovered_cumulative is None or cum > self.recovered_cumulative:
                    self.recovered_cumulative = cum
        # Tombstones before the mark: GC collects a committed header only once every
        # ack record is marked, so a live claim whose header is gone is never a
        # committed one. A crash between the two leaves a tombstone of a header with
        # an unmarked record: ``recover`` finishes the mark.
        self._settle(txn_id, rec)
        self.store.mark_acks_applied(txn_id, self.segment, self.subscription)
        self._trim_if_due()

    def _settle(self, txn_id: TxnId, rec: dict) -> None:
        """Tombstone the recorded acks; release any claim the txn never recorded."""
        acked = list(rec.get("ind", [])) + ([CUM] if rec.get("cum") else [])
        if acked:
            self.store.release_acks(txn_id, self.segment, self.subscription, acked,
                                    committed=True)
        self.store.release_acks(txn_id, self.segment, self.subscription)

    # ---- Tombstone trimming ----
    def trim(self) -> int:
        """Drop tombstones of messages that can no longer be delivered: at or below the
        committed cumulative ack ('~tomb' stays the conflict for them), or behind the
        subscription's cursor on the broker. A holder whose ack record is not marked
        applied keeps its tombstones (recovery finds it through them). Returns the
        number dropped."""
        claims = self.store.list_claims(self.segment, self.subscription)
        horizon = claims.get(TOMB, "|").split("|", 1)[1]
        cursor = self._cursor() if self._cursor else None
        if cursor is not None:
            horizon = max(horizon, ack_key(Position(cursor.ledger, cursor.entry, -1)))
        below = [(k, v[1:]) for k, v in claims.items()
                 if v.startswith("=") and not k.startswith("~") and k <= horizon]
        if not below:
            return 0
        done = self._holders_done({TxnId.parse(h) for _, h in below})
        gone = [(k, h) for k, h in below if h in done]
        if not gone:
            return 0
        # the horizon stays a conflict: the broker may have handed out a copy of a
        # message before its cursor passed it (another consumer's prefetch)
        return self.store.trim_tombstones(self.segment, self.subscription,
                                          max(k for k, _ in gone), gone)

    def _holders_done(self, holders: set[TxnId]) -> set[str]:
        """Holders whose ack record here is marked applied (or collected, which GC
        does only after every mark). A header missing for another reason is unknown:
        its tombstones stay (fail closed)."""
        headers = self.store.get_headers(list(holders))
        done, gone = set(), []
        for t, h in headers.items():
            if h is None:
                gone.append(t)
            elif h.state is TxnState.COMMITTED and h.open_ack_records == 0:
                done.add(str(t))
            elif h.state is TxnState.COMMITTED:
                rec = self.store.list_acks(t).get((self.segment, self.subscription))
                if rec is None or rec.get("applied"):
                    done.add(str(t))
        if gone:
            done.update(str(t) for t in self.store.collected(gone))
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
        with self._lock:
            return list(self._pending)

    # ---- Recovery ----
    def recover(self) -> dict[str, int]:
        """After a crash: finish the materialization of every ended holder of a claim,
        and the mark of every committed holder whose claims are tombstones already."""
        claims = self.store.list_claims(self.segment, self.subscription)
        holders, settled = set(), set()
        for k, v in claims.items():
            if k == TRIMMED:
                continue
            if k == TOMB:
                settled.add(v.split("|", 1)[0])
            elif k == CUM:
                holders.add(v.split("|", 1)[0])
            elif v.startswith("="):
                settled.add(v[1:])
            else:
                holders.add(v)
        ids = [TxnId.parse(h) for h in holders | settled]
        headers = self.store.get_headers(ids) if ids else {}
        stats = {"applied": 0, "released": 0, "open": 0}
        for t, h in headers.items():
            if str(t) in settled and str(t) not in holders:
                if h is not None and h.open_ack_records > 0:
                    rec = self.store.list_acks(t).get((self.segment, self.subscription))
                    if rec is not None and not rec.get("applied"):
                        self.store.mark_acks_applied(t, self.segment, self.subscription)
                continue
            if h is None or h.state is TxnState.ABORTED:
                self.store.release_acks(t, self.segment, self.subscription)
                stats["released"] += 1
            elif h.state is TxnState.COMMITTED:
                self._apply_committed(t, recovering=True)
                stats["applied"] += 1
            else:
                stats["open"] += 1
        return stats

    def acked_by_recovery(self, p: Position) -> bool:
        cum = self.recovered_cumulative
        return p in self.recovered_acks or (cum is not None and p <= cum)
