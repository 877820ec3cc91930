"""The write methods of RedisMetadataStore: writer-run records and the per-segment
open-write and aborted-writer indexes (the transaction buffer's side).

Why apart: these are the reader's hot queries (``open_writes`` runs per gate
refresh), tuned to one round trip per call in the common case; keeping them
together keeps the tuning and its reasons in one place.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis

from pulsar_txn.records import (
    OpenWrite,
    Position,
    TxnId,
    WriteRecord,
    check_wire_format,
    in_id_space,
)

from .keys import (
    PENDING_WRITES,
    POSITIONED_WRITES,
    Keys,
    decode_open_write,
    decode_write_span,
    is_pending_write,
    open_write_seq,
    split_record_field,
    writer_member,
)
from .replies import raise_txn_status, translate
from .scripts import Scripts


class RedisWrites:
    """Mixed into RedisMetadataStore, which provides the client and the scripts."""

    r: redis.Redis
    keys: Keys
    scripts: Scripts
    partitions: int
    event_maxlen: int
    wire_format: int

    @translate
    def register_write(self, txn_id: TxnId, segment: str, writer: str) -> int:
        """The wire format the run's appends carry (register_write.lua)."""
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        res = self.scripts.register_write(
            keys=[k.header(p, seq), k.writes(p, seq), k.open_writes(p, segment), k.wire(p)],
            args=[seq, segment, writer, self.wire_format])
        if res[0] not in ("OK", "DUP"):
            raise_txn_status(txn_id, res)
        return check_wire_format(res[-1], k.ns)

    @translate
    def record_write(self, txn_id: TxnId, segment: str, writer: str,
                     first: Position | None, last: Position | None) -> None:
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        res = self.scripts.record_write(
            keys=[k.header(p, seq), k.writes(p, seq), k.open_writes(p, segment), k.events(p)],
            args=[seq, segment, writer, first.encode() if first else "",
                  last.encode() if last else "", self.event_maxlen])
        if res[0] != "OK":
            raise_txn_status(txn_id, res)

    @translate
    def withdraw_write(self, txn_id: TxnId, segment: str, writer: str) -> bool:
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        res = self.scripts.withdraw_write(keys=[k.writes(p, seq), k.open_writes(p, segment)],
                                          args=[seq, segment, writer])
        return res[0] == "OK"

    @translate
    def list_writes(self, txn_id: TxnId) -> tuple[list[WriteRecord], int]:
        p, seq = txn_id.partition, txn_id.seq
        pipe = self.r.pipeline(transaction=True)  # MULTI: records and count agree
        pipe.hgetall(self.keys.writes(p, seq))
        pipe.hget(self.keys.header(p, seq), "wv")
        recs, wv = pipe.execute()
        out = []
        for field, value in recs.items():
            seg, writer = split_record_field(field)
            out.append(WriteRecord(seg, writer, *decode_write_span(value)))
        return out, int(wv or 0)

    @translate
    def open_writes(self, segment: str, skip: Iterable[TxnId] = ()) -> list[OpenWrite]:
        """Per partition: every pending registration and the lowest recorded first
        position, leaving out the txns in ``skip`` (ended ones whose cleanup has not
        run: the next write of their partition must show instead).

        One command per partition in the common case: '!' (pending) sorts before
        every hex position, so the first member says whether a second look is needed.
        A partition holding a skipped txn is read a page at a time up to its first
        member of another txn (a txn has a member per writer).
        """
        k = self.keys
        skipped: dict[int, set[int]] = {}
        for t in skip:
            skipped.setdefault(t.partition, set()).add(t.seq)
        pipe = self.r.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.zrange(k.open_writes(p, segment), 0, 0)
        firsts = pipe.execute()
        members: list[tuple[int, str]] = []
        for p, gone in skipped.items():
            members += [(p, m) for m in self._first_writes(k.open_writes(p, segment), gone)]
        pending = [p for p, m in enumerate(firsts)
                   if p not in skipped and m and is_pending_write(m[0])]
        for p, m in enumerate(firsts):
            if m and p not in pending and p not in skipped:
                members.append((p, m[0]))
        if pending:
            pipe = self.r.pipeline(transaction=False)
            for p in pending:
                ow = k.open_writes(p, segment)
                pipe.zrange(ow, *PENDING_WRITES, bylex=True, offset=0, num=64)
                pipe.zrange(ow, *POSITIONED_WRITES, bylex=True, offset=0, num=1)
            res = pipe.execute()
            for i, p in enumerate(pending):
                members += [(p, m) for m in res[2 * i] + res[2 * i + 1]]
        out: list[OpenWrite] = []
        for p, member in members:
            pos, seq, writer = decode_open_write(member)
            out.append(OpenWrite(TxnId(p, seq), writer, pos))
        return out

    def _first_writes(self, key: str, gone: set[int], page: int = 128) -> list[str]:
        """Pending members (up to 64) and the lowest recorded one of an open-write
        index, leaving out the members of the ``gone`` txn seqs, a page at a time."""
        pending: list[str] = []
        start = 0
        while True:
            ms = self.r.zrange(key, start, start + page - 1)
            for m in ms:
                if open_write_seq(m) in gone:
                    continue
                if is_pending_write(m):
                    if len(pending) < 64:
                        pending.append(m)
                    continue
                return pending + [m]
            if len(ms) < page:
                return pending
            start += page

    @translate
    def aborted_writers(self, segment: str, pairs: Iterable[tuple[TxnId, str]]
                        ) -> set[tuple[TxnId, str]]:
        pairs = [(t, w) for t, w in pairs if in_id_space(t, self.partitions)]
        pipe = self.r.pipeline(transaction=False)
        for t, w in pairs:
            pipe.sismember(self.keys.aborted_writers(t.partition, segment), writer_member(t.seq, w))
        return {pair for pair, hit in zip(pairs, pipe.execute()) if hit}
