"""The segment DAG of a scalable topic (PIP-460's model), as pure data.

A scalable topic ``topic://tenant/ns/name`` covers a fixed key-hash space
``[0, HASH_SPACE)``. Each segment owns an inclusive hash range and is backed by
an ordinary ``persistent://`` topic. A split seals one ACTIVE segment and
creates two children covering its range; a merge seals two adjacent ACTIVE
segments and creates one child covering both. At every epoch the ACTIVE
segments partition the hash space exactly, so every key has one home.

Nothing here talks to Redis or Pulsar: routing, planning a change and the
reader's happens-before order are plain functions, unit-tested on their own.
"""

from __future__ import annotations

import zlib
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from pulsar_txn.errors import ConfigError
from pulsar_txn.hashing import murmur3_32
from pulsar_txn.records import Segment
from pulsar_txn.topics import SCHEME

HASH_SPACE = 1 << 16

# How a layout maps keys to its hash space. A layout records its function: topics
# created before it was recorded keep CRC-32 (their keys stay where they are).
# New topics use upstream Pulsar's current rule (PIP-486, the v5 client's
# SegmentRouter and ScalableTopicHashing): the HIGH 16 bits of the raw Murmur3_32
# of the key's UTF-8 bytes. 'murmur3-low16' is the earlier rule of upstream's
# client-behavior spec (PIP-468: makeHash(key) & 0xFFFF), kept for topics made by
# clients that follow it.
HASH_FUNCTIONS = {
    "murmur3": lambda data: murmur3_32(data) >> 16,
    "murmur3-low16": lambda data: murmur3_32(data) & (HASH_SPACE - 1),
    "crc32": lambda data: zlib.crc32(data) % HASH_SPACE,
}
DEFAULT_HASH = "murmur3"
LEGACY_HASH = "crc32"  # a layout with no recorded function


def key_hash(key: str | bytes | None, fn: str = DEFAULT_HASH) -> int:
    """The key's point in the hash space under the layout's function ``fn``."""
    if key is None:
        raise ValueError("unkeyed messages are spread, not hashed")
    data = key.encode() if isinstance(key, str) else bytes(key)
    try:
        return HASH_FUNCTIONS[fn](data)
    except KeyError:
        raise ConfigError(f"unknown key hash function {fn!r}; known: "
                          f"{', '.join(HASH_FUNCTIONS)}") from None


def backing_topic(topic: str, segment_id: int) -> str:
    """The ordinary Pulsar topic that stores one segment's entries."""
    return f"persistent://{topic}-seg-{segment_id}"


@dataclass(frozen=True)
class Layout:
    """One epoch of a scalable topic's DAG: every segment ever created."""

    topic: str  # tenant/ns/name
    epoch: int
    segments: dict[int, Segment] = field(default_factory=dict)
    version: int = 0  # grows with every change, ends fixed included
    hash_fn: str = DEFAULT_HASH  # recorded at creation; LEGACY_HASH if none was

    @property
    def name(self) -> str:
        return SCHEME + self.topic

    @cached_property
    def _active(self) -> tuple[tuple[Segment, ...], tuple[int, ...]]:
        """ACTIVE segments by range start, and those starts (computed once per layout:
        routing runs for every message)."""
        act = tuple(sorted((s for s in self.segments.values() if s.active), key=lambda s: s.lo))
        return act, tuple(s.lo for s in act)

    def active(self) -> list[Segment]:
        return list(self._active[0])

    def route(self, h: int) -> Segment:
        act, starts = self._active
        i = bisect_right(starts, h) - 1
        if i < 0 or not act[i].covers(h):
            raise AssertionError(f"{self.name}: hash {h} has no ACTIVE segment (corrupt layout)")
        return act[i]

    def by_backing(self, backing: str) -> Segment | None:
        for s in self.segments.values():
            if s.backing == backing:
                return s
        return None

    def admissible(self, done: Iterable[int], started: Iterable[int] = ()) -> list[Segment]:
        """The one admission rule: segments that may be read now, in read order —
        not done, not started, and every parent read to its end (so for any key,
        every entry of a parent comes before every entry of a child)."""
        finished, skip = set(done), set(started)
        return [s for s in self.read_order() if s.id not in finished and s.id not in skip
                and all(p in finished for p in s.parents)]

    def read_order(self) -> list[Segment]:
        """Segments in happens-before order: every parent before its children."""
        out, placed = [], set()
        pending = sorted(self.segments.values(), key=lambda s: (s.created_epoch, s.id))
        while pending:
            rest = []
            for s in pending:
                if all(p in placed for p in s.parents):
                    out.append(s)
                    placed.add(s.id)
                else:
                    rest.append(s)
            if len(rest) == len(pending):
                raise AssertionError(f"{self.name}: cycle or missing parent in the DAG")
            pending = rest
        return out

    def check(self) -> None:
        """The ACTIVE segments tile the hash space exactly (a layout invariant)."""
        nxt = 0
        for s in self.active():
            if s.lo != nxt or s.hi < s.lo:
                raise AssertionError(f"{self.name}@{self.epoch}: gap or overlap at {nxt}")
            nxt = s.hi + 1
        if nxt != HASH_SPACE:
            raise AssertionError(f"{self.name}@{self.epoch}: hash space not covered")


def initial_segments(topic: str, n: int) -> list[Segment]:
    if not 1 <= n <= 256:
        raise ConfigError(f"segments must be between 1 and 256, got {n}")
    bounds = [HASH_SPACE * i // n for i in range(n + 1)]
    return [Segment(i, bounds[i], bounds[i + 1] - 1, backing_topic(topic, i))
            for i in range(n)]


def plan_split(layout: Layout, segment_id: int, next_id: int,
               at: int | None = None) -> tuple[list[int], list[Segment]]:
    """Seal ``segment_id``; two children split its range at ``at`` (default: the middle)."""
    seg = _active(layout, segment_id)
    if seg.hi == seg.lo:
        raise ConfigError(f"segment {segment_id} covers one hash value and cannot be split")
    cut = (seg.lo + seg.hi + 1) // 2 if at is None else at
    if not seg.lo < cut <= seg.hi:
        raise ConfigError(f"split point {cut} must be in ({seg.lo}, {seg.hi}] of segment "
                          f"{segment_id}")
    epoch = layout.epoch + 1
    kids = [Segment(next_id, seg.lo, cut - 1, backing_topic(layout.topic, next_id),
                    parents=(seg.id,), created_epoch=epoch),
            Segment(next_id + 1, cut, seg.hi, backing_topic(layout.topic, next_id + 1),
                    parents=(seg.id,), created_epoch=epoch)]
    return [seg.id], kids


def plan_merge(layout: Layout, a: int, b: int, next_id: int) -> tuple[list[int], list[Segment]]:
    """Seal two adjacent ACTIVE segments; one child covers both ranges."""
    left, right = sorted((_active(layout, a), _active(layout, b)), key=lambda s: s.lo)
    if left.hi + 1 != right.lo:
        raise ConfigError(f"segments {a} and {b} are not adjacent "
                          f"([{left.lo},{left.hi}] and [{right.lo},{right.hi}])")
    kid = Segment(next_id, left.lo, right.hi, backing_topic(layout.topic, next_id),
                  parents=(left.id, right.id), created_epoch=layout.epoch + 1)
    return [left.id, right.id], [kid]


def _active(layout: Layout, segment_id: int) -> Segment:
    seg = layout.segments.get(segment_id)
    if seg is None:
        raise ConfigError(f"{layout.name} has no segment {segment_id}")
    if not seg.active:
        raise ConfigError(f"segment {segment_id} of {layout.name} is {seg.state.value}, not ACTIVE")
    return seg
