"""PendingAckStore: acks under a transaction, per (segment, subscription).

An ack under T first *claims* the message in the (segment, subscription) claim
table (PENDING_ACK: another txn's claim conflicts), then records it under T's
header, which is the fence (no ack joins after the end CAS). Commit applies the
recorded acks to the Pulsar subscription; abort releases the claims so the
messages are redelivered. ``recover`` re-applies committed-but-unapplied acks
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
                holder = TxnId.parse(conflict.holder)
                h = self.store.get_header(holder)
                if h is not None and h.state is not TxnState.ABORTED:
                    raise
                # An aborted (or collected) holder's claim is void: release and retry.
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
        if rec is None or rec.get("applied"):
            self.store.release_acks(txn_id, self.segment, self.subscription)
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
        # mark before release: a crash in between leaves a claim that recovery
        # finds and releases; the reverse order would strand the mark.
        self.store.mark_acks_applied(txn_id, self.segment, self.subscription)
        self.store.release_acks(txn_id, self.segment, self.subscription)

    def pending_txns(self) -> list[TxnId]:
        with self._lock:
            return list(self._pending)

    # ---- Recovery ----
    def recover(self) -> dict[str, int]:
        """After a crash: finish the materialization of every ended holder of a claim."""
        claims = self.store.list_claims(self.segment, self.subscription)
        holders = {v.split("|", 1)[0] if k == CUM else v for k, v in claims.items()}
        ids = [TxnId.parse(h) for h in holders]
        headers = self.store.get_headers(ids) if ids else {}
        stats = {"applied": 0, "released": 0, "open": 0}
        for t, h in headers.items():
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
