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
from collections.abc import Callable, Sequence

from pulsar_txn.errors import AckConflict, PulsarTxnError
from pulsar_txn.metastore.base import MetadataStore
from pulsar_txn.records import Position, TxnId
from pulsar_txn.state import TxnState

log = logging.getLogger(__name__)

CUM = "~cum"
TOMB = "~tomb"  # the highest committed cumulative ack: "txn|position"


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


class PendingAckStore:
    def __init__(self, store: MetadataStore, segment: str, subscription: str,
                 apply: ApplyFn, redeliver: Callable[[list[Position]], None] | None = None
                 ) -> None:
        if "|" in subscription:
            raise ValueError(f"subscription {subscription!r} must not contain '|'")
        self.store = store
        self.segment = segment
        self.subscription = subscription
        self._apply = apply
        self._redeliver = redeliver
        self._lock = threading.Lock()
        self._pending: dict[TxnId, list[tuple[list[Position], bool]]] = {}
        # Positions acked by recovery: a consumer may already hold them prefetched.
        self.recovered_acks: set[Position] = set()
        self.recovered_cumulative: Position | None = None

    # ---- Ack path ----
    def acknowledge(self, txn_id: TxnId, positions: Sequence[Position],
                    cumulative: bool = False) -> None:
        keys = sorted(ack_key(p) for p in positions)
        self._claim(txn_id, keys, cumulative)
        try:
            self.store.record_acks(txn_id, self.segment, self.subscription, keys, cumulative)
        except PulsarTxnError:
            self.store.release_acks(txn_id, self.segment, self.subscription,
                                    [CUM] if cumulative else keys)
            raise
        with self._lock:
            self._pending.setdefault(txn_id, []).append((list(positions), cumulative))

    def _claim(self, txn_id: TxnId, keys: list[str], cumulative: bool) -> None:
        for _ in range(3):
            try:
                self.store.claim_acks(txn_id, self.segment, self.subscription, keys, cumulative)
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

    def _settle(self, txn_id: TxnId, rec: dict) -> None:
        """Tombstone the recorded acks; release any claim the txn never recorded."""
        acked = list(rec.get("ind", [])) + ([CUM] if rec.get("cum") else [])
        if acked:
            self.store.release_acks(txn_id, self.segment, self.subscription, acked,
                                    committed=True)
        self.store.release_acks(txn_id, self.segment, self.subscription)

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
