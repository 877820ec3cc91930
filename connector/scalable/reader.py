"""The READ_COMMITTED reader of a scalable topic, in the DAG's happens-before order."""

from __future__ import annotations

import logging
import time

from pulsar_txn.broker_io import last_entry_strict
from pulsar_txn.errors import ConfigError, PulsarTxnError, ReadTimeout
from pulsar_txn.readers import Reader, ReadSide
from pulsar_txn.records import BEFORE_EARLIEST, Position, Segment
from pulsar_txn.scalable.admin import ScalableTopics
from pulsar_txn.topics import normalize_scalable

log = logging.getLogger(__name__)


class ScalableReader:
    """READ_COMMITTED reader of a scalable topic, in the DAG's happens-before order.

    A segment is read only once all its parents were read to their end, so for
    any key every entry of a parent comes before every entry of a child. Within
    the readable segments, messages are taken round-robin.
    """

    def __init__(self, side: ReadSide, topics: ScalableTopics, name: str,
                 start: str = "earliest", poll_ms: int = 50, **kwargs) -> None:
        if start not in ("earliest", "latest"):
            raise ConfigError(f"start must be 'earliest' or 'latest' for a scalable topic, "
                              f"got {start!r}")
        self._side = side
        self._topics = topics
        self.topic = normalize_scalable(name)
        self._kwargs = kwargs
        self._poll_ms = poll_ms
        self._layout = self._topics.follow(self.topic)
        self._readers: dict[int, Reader] = {}
        self._done: set[int] = set()
        self._turn = 0
        self._completing = 0.0  # last time this reader tried to finish a seal
        self._admitted: tuple[int, int] | None = None  # (layout version, segments done)
        self._starts: dict[int, Position] = {}  # a 'latest' reader's start: read up to here
        if start == "latest":
            for s in self._layout.segments.values():
                if not s.active:
                    self._done.add(s.id)
            for s in self._layout.active():
                self._readers[s.id] = self._reader_after_last(s)

    @property
    def name(self) -> str:
        return self._layout.name

    def _reader_after_last(self, seg: Segment):
        """A 'latest' reader that starts after the entry the broker reports last now.

        Its start is an explicit position, so once the segment is sealed the reader
        knows whether it is past the end even if it never receives anything (a
        native 'latest' start is not a position it could compare). An unknown last
        entry raises: 'latest' never silently becomes 'earliest'.
        """
        last = last_entry_strict(self._side.pulsar, seg.backing)
        if last is None:
            return Reader(self._side, seg.backing, "earliest", **self._kwargs)
        self._starts[seg.id] = last
        return Reader(self._side, seg.backing, self._starts[seg.id], **self._kwargs)

    def _admit(self) -> None:
        self._layout = self._topics.layout(self.topic)
        state = (self._layout.version, len(self._done))
        if state == self._admitted:
            return  # nothing changed since the last look: no DAG walk per message
        self._admitted = state
        for s in self._layout.admissible(self._done, self._readers):
            if s.end == BEFORE_EARLIEST:
                self._done.add(s.id)  # sealed empty: nothing to read, its children may go
                continue
            self._readers[s.id] = Reader(self._side, s.backing, "earliest", **self._kwargs)

    def _exhausted(self, sid: int, reader) -> bool:
        """Sealed, its end fixed, and the reader holds nothing and is at or past the end.

        "Past" counts the reader's start, not only what it received: a reader of an
        empty segment, or one started after the end, receives nothing and is done all
        the same (else the segment's children would never be read).
        """
        seg = self._layout.segments[sid]
        if seg.active:
            return False
        if seg.end is None:  # sealed, end not fixed yet: finish the seal if it is ready
            if time.monotonic() - self._completing > 1.0:
                self._completing = time.monotonic()
                try:
                    self._layout = self._topics.complete_seals(self.topic, wait=False)
                except PulsarTxnError as e:  # tried again in a second; never guessed
                    log.warning("completing the seals of %s failed: %s", self.topic, e)
            return False
        at = max(reader.received_entry(), self._starts.get(sid, BEFORE_EARLIEST))
        return reader.holds_nothing() and at >= seg.end.entry_position

    def read_next(self, timeout_millis: int | None = None):
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        while True:
            self._admit()
            ids = sorted(self._readers)
            for i in range(len(ids)):
                sid = ids[(self._turn + i) % len(ids)]
                reader = self._readers[sid]
                try:  # a short broker wait per segment (read_next(0) would not pull)
                    msg = reader.read_next(max(2, self._poll_ms // len(ids)))
                except ReadTimeout:
                    if self._exhausted(sid, reader):
                        reader.close()
                        del self._readers[sid]
                        self._done.add(sid)
                    continue
                end = self._layout.segments[sid].end
                if end is not None and end != BEFORE_EARLIEST and \
                        msg.position.entry_position > end:
                    # past a sealed segment's end (a stale plain producer on a broker
                    # without termination): never delivered, and the segment is done
                    reader.close()
                    del self._readers[sid]
                    self._done.add(sid)
                    continue
                self._turn = (self._turn + i + 1) % max(1, len(ids))
                return msg
            if deadline is not None and time.monotonic() >= deadline:
                raise ReadTimeout(f"{self.name}: no committed message in time")
            if not ids:  # nothing readable yet: wait for a layout change (an end fixed)
                self._topics.wait_for_change(self.topic, self._layout.epoch,
                                             self._poll_ms / 1000)

    def read_batch(self, max_messages: int, timeout_millis: int = 100) -> list:
        out = []
        try:
            out.append(self.read_next(timeout_millis))
            while len(out) < max_messages:
                out.append(self.read_next(0))
        except ReadTimeout:
            pass
        return out

    def close(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()
