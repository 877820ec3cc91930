"""Source offsets and how a planned range is cut into Spark partitions.

Offsets are human-readable JSON, one position per segment (a plain topic is one
segment): ``{"persistent://public/default/orders": "12:345:-1"}`` = the last
message the query has read (ledgerId:entryId:batchIndex; ``-1:-1:-1`` = nothing
yet; batch ``2147483647`` = the whole entry). They live in Spark's checkpoint, so
the text form is a compatibility promise: a checkpoint written before an upgrade
must still decode. An end offset never passes the segment's max read position,
so every entry in a planned range has a final outcome and replaying the range
returns the same rows (invariant 3), also after header GC (H2) and restarts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from pulsar_txn.records import BEFORE, WHOLE_ENTRY, Position

encode = Position.text  # the checkpoint's text of a position (kept byte-identical)
decode = Position.parse

__all__ = ["BEFORE", "WHOLE_ENTRY", "Position", "SegmentPartition", "decode", "encode",
           "entries_between", "from_offset", "plan_partitions", "to_offset"]


def to_offset(positions: dict[str, Position]) -> dict:
    return {t: encode(p) for t, p in sorted(positions.items())}


def from_offset(offset: dict) -> dict[str, Position]:
    return {t: decode(v) for t, v in offset.items()}


@dataclass
class SegmentPartition(InputPartition):
    segment: str
    start: str  # exclusive
    end: str    # inclusive
    topic: str = ""  # what the user reads: topic:// for a scalable topic's segment


def entries_between(end: Position, lac: Position) -> int:
    """Entries after ``end`` up to ``lac``: exact within a ledger (entry ids are dense);
    across ledgers, the entries of the last ledger (a lower bound)."""
    if Position(end[0], end[1]) >= lac:
        return 0
    if end[0] == lac.ledger:
        return lac.entry - end[1]
    return lac.entry + 1


AUTO_MIN_ENTRIES = 16  # an automatic split never makes a piece of fewer entries
# ... and a streaming micro-batch's piece never fewer than this: a usual trigger's worth
# of entries stays one task per segment (a second task costs its start-up every
# trigger, and the readers workers keep would each read the whole stream); a backlog
# is split
STREAM_MIN_ENTRIES = 512


def cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container or
    ``taskset`` limits it), not the host's: the automatic ``minPartitions``."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _split(start: Position, end: Position, pieces: int,
           min_entries: int = 1) -> list[tuple[Position, Position]]:
    """Split (start, end] into up to ``pieces`` ranges by entry id, within one ledger,
    none of fewer than ``min_entries`` entries (when that is asked).

    Entry ids are dense inside a ledger, so the cut points exist; a range that
    crosses ledgers is kept whole (ledger ids are not dense).
    """
    first = start[1] + 1
    if start == BEFORE or start[0] != end[0]:
        return [(start, end)]
    if min_entries > 1:
        pieces = min(pieces, (end[1] - first + 1) // min_entries)
    if pieces <= 1 or end[1] - first < pieces:
        return [(start, end)]
    step = (end[1] - first + 1) // pieces
    cuts = [Position(start[0], first + step * i - 1, WHOLE_ENTRY) for i in range(1, pieces)]
    bounds = [start, *cuts, end]
    return list(zip(bounds, bounds[1:]))


def plan_partitions(start: dict, end: dict, min_partitions: int | None = 1,
                    first_entry=None, topic_of=None,
                    streaming: bool = False) -> list[SegmentPartition]:
    """One partition per segment range, split further when ``min_partitions`` asks.

    ``min_partitions=None`` (the option unset) asks for one partition per core this
    process may use (:func:`cores`), so a large batch is read by every core without
    tuning, but never cuts a piece under ``AUTO_MIN_ENTRIES`` entries (a task costs
    more than a few entries), nor, for a ``streaming`` micro-batch, under
    ``STREAM_MIN_ENTRIES``: only a backlog is split there.
    ``first_entry(segment)`` places a range that starts before the earliest entry, so
    that it can be split too (only needed when splitting).
    """
    auto = min_partitions is None
    wanted = cores() if auto else min_partitions
    min_entries = (STREAM_MIN_ENTRIES if streaming else AUTO_MIN_ENTRIES) if auto else 1
    s, e = from_offset(start), from_offset(end)
    ranges = [(t, s.get(t, BEFORE), p) for t, p in sorted(e.items()) if p > s.get(t, BEFORE)]
    if wanted > len(ranges) and first_entry is not None:
        placed = []
        for t, lo, hi in ranges:
            if lo == BEFORE:
                try:
                    first = first_entry(t)
                except Exception:  # noqa: BLE001 - only to split: asked for, it must work
                    if not auto:
                        raise
                    first = None  # an automatic split is an optimisation: read it whole
                if first is not None and first.entry > 0:
                    lo = Position(first.ledger, first.entry - 1, WHOLE_ENTRY)
                elif first is not None:
                    lo = BEFORE if first.ledger != hi[0] else Position(first.ledger, -1,
                                                                       WHOLE_ENTRY)
            placed.append((t, lo, hi))
        ranges = placed
    per_segment = -(-wanted // max(1, len(ranges)))  # ceil
    return [SegmentPartition(t, encode(a), encode(b), topic_of(t) if topic_of else t)
            for t, lo, hi in ranges for a, b in _split(lo, hi, per_segment, min_entries)]
