"""Every Redis key the project uses is built here, and every encoding of what the
scripts store inside those keys (members, fields, values): the store's users deal
in positions, ids and typed records, never in ``~cum`` or ``seq|writer``.

Slot layout (Redis Cluster): all records of one transaction *and* every
per-partition index that its scripts update carry the hash tag ``{<ns>:<p>}``,
where ``p = partition(txn)``. One Lua script can therefore touch the header, the
write/ack records, the per-segment open-write index, the aborted-writer set, the
deadline/finalized indexes and the event stream of partition ``p`` atomically.
Readers that need a per-segment view query all P partitions and merge.

The only keys outside a partition slot are the pending-ack claim tables, one
slot per (segment, subscription): conflicts between transactions of different
partitions must be decided in one place; and each scalable topic's DAG with its
event stream, one slot per topic ``{<ns>:st:<topic>}``, so a split or merge
(seal parents + create children + bump the epoch) is one script.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from pulsar_txn.errors import AckConflict, AckConflictReason, ConfigError
from pulsar_txn.records import BEFORE_EARLIEST, Position, Segment, TxnId
from pulsar_txn.state import SegmentState

from .claims import AckRecord, ClaimKind, Claims, ClaimView, Holding

SEP = "|"
SPREAD_LAYOUT = "spread1"  # what new namespaces use (the algorithm below, version 1)
LAYOUTS = ("plain", SPREAD_LAYOUT)


@cache
def _spread_tags(ns: str, partitions: int) -> tuple[str, ...]:
    """One tag ``{ns~<salt>}`` per partition, its slot within a narrow window around
    the middle of the partition's even slot range (the first salts that land there)."""
    width = REDIS_CLUSTER_HASH_SLOTS / partitions
    half = max(0, int(width / 16))  # far from every even shard boundary for <= 4x P shards
    wanted = {int((p + 0.5) * width): p for p in range(partitions)}
    tags: list[str | None] = [None] * partitions
    left, salt = partitions, 0
    while left:
        tag = f"{{{ns}~{salt}}}"
        slot = key_slot(tag.encode())
        for mid in (slot - d for d in range(-half, half + 1)):
            p = wanted.get(mid)
            if p is not None and tags[p] is None:
                tags[p] = tag
                left -= 1
                break
        salt += 1
    return tuple(t for t in tags if t is not None)


def namespace_refused(ns: str) -> str:
    """Why ``ns`` cannot be a namespace: it prefixes every key, and braces would
    change which part of a key Redis Cluster hashes (the partition tags)."""
    return (f"option 'metastore.namespace' {ns!r}: a namespace must be non-empty and "
            "contain no braces ({ or }): it prefixes every key, whose {...} part Redis "
            "Cluster hashes")


class Keys:
    """Key builder for one deployment (``ns`` is the per-deployment prefix).

    ``layout`` ``spread1``: partition p's tag is chosen so that its cluster slot lies in the
    middle of the p-th of P even slot ranges, so a cluster whose slots are split
    in even ranges (``redis-cli --cluster create``, the harness) holds the same
    number of partitions on every shard, give or take one. Plain tags
    ``{ns:p}`` hash anywhere: 16 partitions on 3 shards measured 3/8/5. A
    deployment records which it uses at first use (``ns:config`` field ``tags``);
    those created before keep the plain ones. The layout name is versioned: a
    change to ``_spread_tags`` would rename every key of a namespace (and restart
    its id counters under the same deployment id), so it must be a new name.
    """

    def __init__(self, ns: str, partitions: int, layout: str = "plain") -> None:
        if not ns or any(c in ns for c in "{}"):
            raise ConfigError(namespace_refused(ns))
        if layout not in LAYOUTS:
            raise ValueError(f"unknown key layout {layout!r}")
        if not 1 <= partitions <= REDIS_CLUSTER_HASH_SLOTS:
            raise ValueError(f"partitions must be 1..{REDIS_CLUSTER_HASH_SLOTS}, got {partitions}")
        self.ns = ns
        self.partitions = partitions
        self.layout = layout
        self._tags = _spread_tags(ns, partitions) if layout == SPREAD_LAYOUT else None

    # ---- deployment-wide ----
    def config(self) -> str:
        return f"{self.ns}:config"

    # ---- partition slot ``{ns:p}`` ----
    def tag(self, p: int) -> str:
        if not 0 <= p < self.partitions:  # never another partition's keys (a tuple's [-1])
            raise ValueError(f"partition {p} is not one of namespace {self.ns!r}'s "
                             f"0..{self.partitions - 1}")
        if self._tags is not None:
            return self._tags[p]
        return f"{{{self.ns}:{p}}}"

    def seq(self, p: int) -> str:
        return f"{self.tag(p)}:seq"

    def header(self, p: int, seq: int) -> str:
        return f"{self.tag(p)}:h:{seq}"

    def writes(self, p: int, seq: int) -> str:
        return f"{self.tag(p)}:w:{seq}"

    def acks(self, p: int, seq: int) -> str:
        return f"{self.tag(p)}:a:{seq}"

    def open_writes(self, p: int, segment: str) -> str:
        """Sorted set (lex) of OPEN writes on a segment: ``pos|seq|writer``."""
        return f"{self.tag(p)}:ow:{segment}"

    def open_writes_segment(self, p: int, key: str) -> str:
        """The segment an open-write index key of partition ``p`` is for (a scan's find)."""
        return key[len(self.open_writes(p, "")):]

    def aborted_writers(self, p: int, segment: str) -> str:
        """Set of ``seq|writer`` whose entries on the segment must never show (H2)."""
        return f"{self.tag(p)}:ab:{segment}"

    def live(self, p: int) -> str:
        """Sorted set of ids whose header exists (by seq): the oldest pins the watermark."""
        return f"{self.tag(p)}:live"

    def gc(self, p: int) -> str:
        """Hash ``w``: every id at or below is collected or can never be created;
        ``run``: the server run this state was last used on (a change opens a gap)."""
        return f"{self.tag(p)}:gc"

    def collected(self, p: int) -> str:
        """Sorted set of collected ids the watermark does not cover yet."""
        return f"{self.tag(p)}:gcs"

    def gaps(self, p: int) -> str:
        """Sorted set ``first:last`` of id ranges that may have been lost: never collected."""
        return f"{self.tag(p)}:gaps"

    def deadlines(self, p: int) -> str:
        return f"{self.tag(p)}:dl"

    def finalized(self, p: int) -> str:
        return f"{self.tag(p)}:fin"

    def unmaterialized(self, p: int) -> str:
        """Ended txns whose segment indexes are not cleaned yet (by end time)."""
        return f"{self.tag(p)}:um"

    def events(self, p: int) -> str:
        return f"{self.tag(p)}:ev"

    def counters(self, p: int) -> str:
        """Hash: opened, committed, aborted, timed_out (kept by the scripts, exact)."""
        return f"{self.tag(p)}:n"

    def fsync_mark(self, p: int) -> str:
        """A counter a repeated end (waitaof) writes so WAITAOF covers the earlier
        decision too: the AOF is written and fsynced in order."""
        return f"{self.tag(p)}:fs"

    def owners(self, p: int) -> str:
        """Hash owner → txn seq, so a Spark sink finds the txn of (sink id, batchId)."""
        return f"{self.tag(p)}:own"

    def wire(self, p: int) -> str:
        """The wire format (records.WIRE_*) registrations of partition ``p`` append in,
        set by an operator's switch (``ns:config``'s ``wire`` until one runs): read by
        register_write.lua, so a switch reaches every writer at its next registration."""
        return f"{self.tag(p)}:wire"

    def sink(self, p: int, sink_id: str) -> str:
        """A Spark sink's progress: ``batch``, ``txn``, ``qid`` (the query it belongs to).
        In the partition of the sink's transactions, so the commit CAS advances it."""
        return f"{self.tag(p)}:sink:{sink_id}"

    def sink_id(self, p: int, key: str) -> str:
        """The sink a progress key of partition ``p`` is for (a scan's find)."""
        return key[len(self.sink(p, "")):]

    # ---- scalable topic slot ``{ns:st:<tenant/ns/name>}`` ----
    def topic_tag(self, topic: str) -> str:
        return f"{{{self.ns}:st:{topic}}}"

    def topic_dag(self, topic: str) -> str:
        """Hash: ``epoch``, ``next`` (segment id), ``created``, ``seg:<id>`` → descriptor."""
        return f"{self.topic_tag(topic)}:dag"

    def topic_events(self, topic: str) -> str:
        return f"{self.topic_tag(topic)}:ev"

    def topics(self) -> str:
        """Set of scalable topics of the deployment (a listing aid; the DAG is the truth)."""
        return f"{self.ns}:topics"

    # ---- pending-ack slot, one per (segment, subscription) ----
    def ack_claims(self, segment: str, subscription: str) -> str:
        return f"{{{self.ns}:pa:{segment}{SEP}{subscription}}}"


# ---- write records and open-write indexes ----
# Why text and not scores: the sorted sets are ordered by member (lex), because a
# position needs 128 bits and a double score is exact only to 2**53.

PENDING = "!"  # the position of a registered writer-run that has not appended yet
# lex ranges of an open-write index: '!' sorts before '"' and every hex digit after it
PENDING_WRITES = ("[!", '("')
POSITIONED_WRITES = ("[0", "+")


def record_field(segment: str, name: str) -> str:
    """The field of a write record (``segment|writer``) or an ack record
    (``segment|subscription``) in its transaction's hash."""
    return f"{segment}{SEP}{name}"


def split_record_field(field: str) -> tuple[str, str]:
    seg, _, rest = field.rpartition(SEP)
    return seg, rest


def decode_write_span(value: str) -> tuple[Position | None, Position | None]:
    """A write record's value ``first,last`` (either empty while unknown)."""
    first, _, last = value.partition(",")
    return (Position.decode(first) if first else None,
            Position.decode(last) if last else None)


def decode_open_write(member: str) -> tuple[Position | None, int, str]:
    """An open-write member ``pos|seq|writer`` as (first position or None while
    pending, txn seq, writer)."""
    pos, seq, writer = member.split(SEP)
    return (None if pos == PENDING else Position.decode(pos)), int(seq), writer


def open_write_seq(member: str) -> int:
    return int(member.split(SEP, 2)[1])


def is_pending_write(member: str) -> bool:
    return member.startswith(PENDING)


def writer_member(seq: int, writer: str) -> str:
    """A member of an aborted-writer set: one writer-run of one transaction."""
    return f"{seq}{SEP}{writer}"


def decode_gap(member: str) -> tuple[int, int]:
    """A range of possibly lost ids, ``first:last`` (both included)."""
    first, _, last = member.partition(":")
    return int(first), int(last)


# ---- scalable topic DAG ----
SEGMENT_FIELD = "seg:"  # DAG field prefix of a segment's descriptor


def segment_field(segment_id: int) -> str:
    return f"{SEGMENT_FIELD}{segment_id}"


def segment_of_field(field: str) -> int | None:
    """The segment id a DAG field holds the descriptor of (None: not a segment)."""
    return int(field[len(SEGMENT_FIELD):]) if field.startswith(SEGMENT_FIELD) else None


def encode_end(end: Position | None) -> str:
    """A sealed segment's end as the DAG stores it: '' not fixed, '-' no entry, 'l:e'."""
    return "" if end is None else "-" if end == BEFORE_EARLIEST else str(end)


def decode_end(text: str | None) -> Position | None:
    return None if not text else BEFORE_EARLIEST if text == "-" else Position.parse(text)


def encode_segment(s: Segment) -> str:
    """A segment's descriptor: compact JSON the DAG scripts read and re-encode."""
    return json.dumps({"id": s.id, "lo": s.lo, "hi": s.hi, "backing": s.backing,
                       "state": s.state.value, "parents": list(s.parents),
                       "children": list(s.children), "ce": s.created_epoch,
                       "se": s.sealed_epoch, "st": s.sealed_ms, "end": encode_end(s.end)},
                      separators=(",", ":"))


def decode_segment(raw: str) -> Segment:
    d = json.loads(raw)
    return Segment(id=int(d["id"]), lo=int(d["lo"]), hi=int(d["hi"]), backing=d["backing"],
                   state=SegmentState(d["state"]), parents=tuple(_ids(d.get("parents"))),
                   children=tuple(_ids(d.get("children"))), created_epoch=int(d.get("ce", 1)),
                   sealed_epoch=d.get("se"), sealed_ms=d.get("st"),
                   end=decode_end(d.get("end")))


def _ids(v) -> list[int]:
    return [int(x) for x in v] if isinstance(v, list) else []  # cjson: [] may come back as {}



# ---- pending-ack claim tables ----
# A table maps a message (its ack key) to its holder's txn id, or to ``=<txn>`` once
# the holder committed (a tombstone); three more fields hold what is not one message.
CUM = "~cum"          # a live cumulative claim: "txn|ack key"
TOMB = "~tomb"        # the highest committed cumulative ack: "txn|ack key"
TRIMMED = "~trimmed"  # tombstones at or below this ack key were dropped; claims there conflict
TOMBSTONE = "="


def ack_key(p: Position) -> str:
    """Lexicographic key of one message: entry, then batch index (-1 = whole entry,
    after every batch index of the entry: a whole-entry ack covers them)."""
    return f"{p.encode()}:{'ffffffff' if p.batch < 0 else format(p.batch, '08x')}"


def ack_position(key: str) -> Position:
    base, _, batch = key.partition(":")
    b = -1 if batch in ("", "ffffffff") else int(batch, 16)
    return Position(int(base[:16], 16), int(base[16:32], 16), b)


def claim_fields(positions: Iterable[Position], cumulative: bool) -> list[str]:
    """The claim-table fields to settle: these messages' individual claims, and (if
    ``cumulative``) the one cumulative claim, whatever its position."""
    return [ack_key(p) for p in positions] + ([CUM] if cumulative else [])


def tombstone_arg(p: Position, holder: TxnId) -> str:
    """A tombstone to trim, as trim_acks.lua takes it: ``ack key|holder``."""
    return f"{ack_key(p)}{SEP}{holder}"


TRIMMED_HOLDER = "an ack at or below the trimmed horizon"  # claim_acks.lua's text


def ack_conflict(key: str, holder: str, committed: bool) -> AckConflict:
    """A claim script's CONFLICT answer as the typed error."""
    if holder == TRIMMED_HOLDER:
        return AckConflict(ack_position(key), None, AckConflictReason.ON_CURSOR)
    return AckConflict(ack_position(key), TxnId.parse(holder),
                       AckConflictReason.COMMITTED if committed else AckConflictReason.HELD)


def _holding(value: str | None) -> Holding | None:
    if not value:
        return None
    holder, _, key = value.partition(SEP)
    return Holding(TxnId.parse(holder), ack_position(key))


def _row(value: str) -> tuple[ClaimKind, TxnId]:
    if value.startswith(TOMBSTONE):
        return ClaimKind.COMMITTED, TxnId.parse(value[len(TOMBSTONE):])
    return ClaimKind.HELD, TxnId.parse(value)


def decode_claims(table: Mapping[str, str]) -> Claims:
    """A claim table read whole (HGETALL)."""
    live: dict[Position, TxnId] = {}
    tombstones: dict[Position, TxnId] = {}
    for k, v in table.items():
        if k in (CUM, TOMB, TRIMMED):
            continue
        kind, holder = _row(v)
        (tombstones if kind is ClaimKind.COMMITTED else live)[ack_position(k)] = holder
    trimmed = table.get(TRIMMED)
    return Claims(live, tombstones, _holding(table.get(CUM)), _holding(table.get(TOMB)),
                  ack_position(trimmed) if trimmed else None)


def claim_view_fields(positions: Sequence[Position]) -> list[str]:
    """The fields ``decode_claim_view`` reads, in its order."""
    return [*(ack_key(p) for p in positions), CUM, TOMB, TRIMMED]


def decode_claim_view(positions: Sequence[Position], row: Sequence[str | None]) -> ClaimView:
    """``row``: the HMGET of ``claim_view_fields(positions)``."""
    n = len(positions)
    trimmed = row[n + 2]
    return ClaimView({p: _row(v) for p, v in zip(positions, row[:n]) if v},
                     _holding(row[n]), _holding(row[n + 1]),
                     ack_position(trimmed) if trimmed else None)


def decode_ack_record(rec: Mapping) -> AckRecord:
    """An ack record's JSON (record_acks.lua) as the typed record."""
    ind = rec.get("ind") or ()
    cum = rec.get("cum") or ""
    return AckRecord(tuple(ack_position(k) for k in ind) if isinstance(ind, (list, tuple))
                     else (), ack_position(cum) if cum else None, bool(rec.get("applied")))
