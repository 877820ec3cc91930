"""The pending-ack claim table of one (segment, subscription), held in memory.

Why a module of its own: the claim rules are the subtlest part of the store
(PENDING_ACK conflicts, commit tombstones, the trimmed horizon), and the memory
backend must decide exactly as Redis does. Each function here is the script of the
same name in ``lua/`` (claim_acks, release_acks, trim_acks), ported line for line,
so the two can be read side by side; the scripts' comments are the specification.

A table is the script's hash as a dict: message key -> holder txn id (a live
claim) or ``'=' + holder`` (a committed ack: a tombstone), plus three fields:
``~cum`` (``holder|position``, a live cumulative claim), ``~tomb``
(``holder|position``, the highest committed cumulative ack) and ``~trimmed`` (the
horizon at or below which tombstones were dropped). Positions compare as strings,
like the scripts compare them: ack keys are fixed-width hex, so that is numeric.
"""

from __future__ import annotations

from collections.abc import Sequence

from pulsar_txn.errors import MetastoreError
from pulsar_txn.records import Position, TxnId

from .claims import AckRecord, Claims, ClaimView
from .keys import (
    CUM,
    TOMB,
    TRIMMED,
    TRIMMED_HOLDER,
    ack_conflict,
    ack_key,
    claim_fields,
    claim_view_fields,
    decode_ack_record,
    decode_claim_view,
    decode_claims,
    tombstone_arg,
)
from .memory_state import Server

Table = dict[str, str]
Conflict = tuple[str, str, bool]  # (position, holder, committed)


def _txn_and_pos(value: str | None) -> tuple[str | None, str | None]:
    if value is None:
        return None, None
    txn, _, pos = value.partition("|")
    return txn, pos


def claim(table: Table, txn: str, cumulative: bool, argv: Sequence[str]) -> Conflict | None:
    """claim_acks.lua. ``argv``: the individual positions, or (cumulative) the ack
    position followed by the positions its consumer was given. All or nothing."""
    tomb_txn, tomb_pos = _txn_and_pos(table.get(TOMB))
    cum_txn, cum_pos = _txn_and_pos(table.get(CUM))
    trimmed = table.get(TRIMMED)
    if not cumulative:
        for pos in argv:
            held = table.get(pos)
            if held is not None and held != txn:
                return (pos, held[1:], True) if held.startswith("=") else (pos, held, False)
            if cum_txn is not None and cum_txn != txn and pos <= cum_pos:
                return pos, cum_txn, False
            if tomb_pos is not None and pos <= tomb_pos:
                return pos, tomb_txn, True
            if trimmed is not None and pos <= trimmed:
                return pos, TRIMMED_HOLDER, True
        for pos in argv:
            table[pos] = txn
        return None
    if not argv:  # the script fails on a missing position: a malformed call
        raise MetastoreError("a cumulative ack claim needs a position")
    pos, given = argv[0], argv[1:]
    if tomb_pos is not None and pos <= tomb_pos:
        return pos, tomb_txn, True
    if trimmed is not None and pos <= trimmed:
        return pos, TRIMMED_HOLDER, True
    if cum_txn is not None and cum_txn != txn:
        return pos, cum_txn, False
    for g in given:
        if tomb_pos is not None and g <= tomb_pos:
            return g, tomb_txn, True
        if trimmed is not None and g <= trimmed:
            return g, TRIMMED_HOLDER, True
        held = table.get(g)
        if held is not None and held.startswith("="):
            return g, held[1:], True
    for f, v in table.items():
        # messages acked below a cumulative ack are fine (Pulsar acks past them); live
        # claims of other transactions are not
        if not f.startswith("~") and not v.startswith("=") and v != txn and f <= pos:
            return f, v, False
    if cum_txn == txn and cum_pos > pos:
        pos = cum_pos
    table[CUM] = f"{txn}|{pos}"
    return None


def release(table: Table, holder: str, positions: Sequence[str], commit: bool) -> int:
    """release_acks.lua: delete the holder's claims, or (``commit``) make them
    tombstones; ``positions`` empty means every claim of the holder. The count."""
    n = 0
    new_tomb: str | None = None

    def settle(field: str, value: str | None) -> None:
        nonlocal n, new_tomb
        if value is None:
            return
        pos = None
        if field == CUM:
            value, _, pos = value.partition("|")
        if value != holder:
            return
        n += 1
        if not commit or pos is not None:
            del table[field]
        if commit:
            if pos is not None:
                new_tomb = pos
            else:
                table[field] = "=" + holder

    if not positions:
        for field, value in list(table.items()):  # one snapshot, like HGETALL
            if field != TOMB:
                settle(field, value)
    else:
        for field in positions:  # read one at a time: a repeated position settles once
            settle(field, table.get(field))
    if new_tomb is not None:
        _, cur_pos = _txn_and_pos(table.get(TOMB))
        if new_tomb > (cur_pos or ""):
            table[TOMB] = f"{holder}|{new_tomb}"
    return n


def trim(table: Table, horizon: str, tombstones: Sequence[str]) -> int:
    """trim_acks.lua: drop the ``position|holder`` tombstones at or below the horizon
    still held by that holder; the horizon stays a conflict (raised only)."""
    cur = table.get(TRIMMED)
    if cur is None or horizon > cur:
        table[TRIMMED] = horizon
    n = 0
    for arg in tombstones:
        pos, _, holder = arg.partition("|")
        if pos <= horizon and table.get(pos) == "=" + holder:
            del table[pos]
            n += 1
    return n


class AckTables:
    """The ack methods of MemoryMetadataStore: the tables above, and the ack records
    kept with each header (record_acks.lua, mark_acks_applied.lua)."""

    _s: Server

    def _claims(self, segment: str, subscription: str) -> dict[str, str]:
        return self._s.claims.setdefault((segment, subscription), {})

    def claim_acks(self, txn_id: TxnId, segment: str, subscription: str,
                   positions: Sequence[Position], cumulative: bool,
                   given: Sequence[Position] = ()) -> None:
        argv = [*map(ack_key, positions), *(map(ack_key, given) if cumulative else ())]
        with self._s.lock:
            conflict = claim(self._claims(segment, subscription), str(txn_id), cumulative,
                             argv)
        if conflict is not None:
            raise ack_conflict(*conflict)

    def release_acks(self, holder: TxnId, segment: str, subscription: str,
                     positions: Sequence[Position] = (), committed: bool = False,
                     cumulative: bool = False) -> int:
        with self._s.lock:
            return release(self._claims(segment, subscription), str(holder),
                           claim_fields(positions, cumulative), committed)

    def record_acks(self, txn_id: TxnId, segment: str, subscription: str,
                    positions: Sequence[Position], cumulative: bool) -> None:
        """record_acks.lua: the header check is the fence (no ack joins after the end)."""
        if cumulative and not positions:
            raise MetastoreError("a cumulative ack record needs a position")
        with self._s.lock:
            txn = self._s.open_txn(txn_id, check_deadline=True)
            txn.ack_calls += 1
            rec = txn.acks.get((segment, subscription))
            if rec is None:
                rec = txn.acks[(segment, subscription)] = {"ind": [], "cum": "", "applied": False}
                txn.open_acks += 1
            keys = [ack_key(p) for p in positions]
            if cumulative:
                rec["cum"] = max(rec["cum"], keys[0])
            else:
                rec["ind"] += [k for k in dict.fromkeys(keys) if k not in rec["ind"]]

    def list_acks(self, txn_id: TxnId) -> dict[tuple[str, str], AckRecord]:
        with self._s.lock:
            txn = self._s.part(txn_id.partition).txns.get(txn_id.seq)
            return {k: decode_ack_record(r) for k, r in (txn.acks if txn else {}).items()}

    def list_claims(self, segment: str, subscription: str) -> Claims:
        with self._s.lock:
            return decode_claims(dict(self._s.claims.get((segment, subscription), {})))

    def has_claims(self, segment: str, subscription: str) -> bool:
        with self._s.lock:
            return bool(self._s.claims.get((segment, subscription)))

    def claims_of(self, segment: str, subscription: str,
                  positions: Sequence[Position]) -> ClaimView:
        with self._s.lock:
            table = self._s.claims.get((segment, subscription), {})
            row = [table.get(f) for f in claim_view_fields(positions)]
        return decode_claim_view(positions, row)

    def claim_reads(self, segment: str, subscription: str) -> MemoryClaimReads:
        return MemoryClaimReads(self._s, (segment, subscription))

    def mark_acks_applied(self, txn_id: TxnId, segment: str, subscription: str) -> None:
        """mark_acks_applied.lua."""
        with self._s.lock:
            txn = self._s.part(txn_id.partition).txns.get(txn_id.seq)
            rec = txn.acks.get((segment, subscription)) if txn else None
            if rec is None or rec["applied"]:
                return
            rec["applied"] = True
            txn.open_acks -= 1

    def trim_tombstones(self, segment: str, subscription: str, horizon: Position,
                        tombstones: Sequence[tuple[Position, TxnId]]) -> int:
        args = [tombstone_arg(p, h) for p, h in tombstones]
        with self._s.lock:
            return trim(self._claims(segment, subscription), ack_key(horizon), args)


class MemoryClaimReads:
    """ClaimReads in process: the table as last read, compared with the table now
    (any write, a wipe or a restore of an earlier copy shows as a change)."""

    def __init__(self, server: Server, table: tuple[str, str]) -> None:
        self._s, self._table = server, table
        self._seen: dict[str, str] | None = None

    def read(self, positions: Sequence[Position]) -> ClaimView:
        with self._s.lock:
            table = dict(self._s.claims.get(self._table, {}))
        self._seen = table
        return decode_claim_view(positions, [table.get(f)
                                             for f in claim_view_fields(positions)])

    def unchanged(self) -> bool:
        with self._s.lock:
            return self._seen is not None and self._s.claims.get(self._table, {}) == self._seen
