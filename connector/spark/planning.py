"""Driver-side planning of the source: which segments to read and how far.

Spark asks the driver for offsets; no data is read here. A segment may be planned
only up to its gate, ``min(last confirmed entry, first OPEN write - 1)``, so every
planned entry already has a final outcome; a scalable topic's child segment joins
only after its parents were read to their end, so a key's rows stay in order
across a split or merge. The optional ``subscription`` is advanced here too,
because the driver is the one that knows which batches Spark committed.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

import pulsar

from pulsar_txn.admin import admin_request
from pulsar_txn.broker_io import LastEntryProbes, partitions_of, scan, wait_probe_cleanup
from pulsar_txn.buffer import TransactionBuffer, max_read_position
from pulsar_txn.connection import admin_auth, check_reachable
from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.errors import ConfigError, PulsarTxnError
from pulsar_txn.metastore import open_store
from pulsar_txn.records import AFTER_LAST, BEFORE_EARLIEST, WHOLE_ENTRY, Position
from pulsar_txn.scalable.admin import ScalableTopics, read_layout

from .offsets import BEFORE
from .options import SourceOptions, client_kwargs

log = logging.getLogger("pulsar_txn.spark.source")  # the name users configure: kept


@dataclass(frozen=True)
class Unit:
    """One segment to plan now: a plain topic, or a scalable topic's readable segment."""

    topic: str
    segment: str
    cap: Position | None = None         # a sealed segment's end: never plan past it
    lac: Position | None = None  # known last entry (sealed: its end), else probed
    hold: bool = False             # sealed, end not fixed yet: do not advance


_SEGMENT = re.compile(r"^persistent://(.+)-seg-(\d+)$")


def complete(seg, pos: Position) -> bool:
    """A sealed segment read up to its fixed end: its children may be planned."""
    if seg.active or seg.end is None:
        return False
    if seg.end == BEFORE_EARLIEST:
        return True
    end = seg.end.entry_position
    at = Position(pos[0], pos[1])
    return at > end or (at == end and pos[2] in (-1, WHOLE_ENTRY))


def _sealed(name: str, s) -> Unit:
    """A sealed segment with its end fixed: planned up to the end's last message."""
    end = s.end.entry_position
    return Unit(name, s.backing, Position(end.ledger, end.entry, WHOLE_ENTRY), end)


class Planner:
    """Driver-side: last confirmed entries and gates per segment (no data read)."""

    def __init__(self, opts: SourceOptions) -> None:

        self.opts = opts
        self.pulsar = pulsar.Client(opts.service_url, **client_kwargs(opts))
        self._probes = LastEntryProbes(self.pulsar)  # one kept probe per segment
        named = [t for t in opts.topics if t.startswith("persistent://")]
        try:
            if named:  # a wrong address fails as the query starts, naming the option
                check_reachable(self.pulsar, opts.service_url, named[0])
            # a source never creates its namespace: a typo (or another metastore) fails
            # the query here, naming the namespaces that exist, before any offset is planned
            self.store = open_store(opts.metastore_url, namespace=opts.namespace,
                                    create=False)
        except Exception:
            self._probes.close()
            self.pulsar.close()
            raise
        self._max_read_position = max_read_position
        self._topic_of: dict[str, str] = {}
        self._partitions: dict[str, list[str]] = {}
        self._completing: dict[str, float] = {}
        self._consumers: dict[str, bool] = {}  # segments whose subscription exists
        self._acked: dict[str, Position] = {}
        self.coordinator = TransactionCoordinator(self.store, materialize_inline=True)
        self.buffer = TransactionBuffer(self.store)  # ended txns' writes hold no gate
        self._scalable: ScalableTopics | None = None

    def last_entry(self, segment: str) -> Position | None:
        return self._probes.last(segment)

    def gate(self, segment: str, start: Position, lac: Position | None = None) -> Position:
        """Highest position that may be planned now: min(LAC, first OPEN write - 1)."""
        return self.gate_and_lac(segment, start, lac)[0]

    def gate_and_lac(self, segment: str, start: Position, lac: Position | None = None
                     ) -> tuple[Position, Position | None, int]:
        """(gate, last confirmed entry, open txns holding the gate below it)."""
        lac = self.last_entry(segment) if lac is None else lac
        if lac is None:
            return start, None, 0
        previous = Position(start[0], start[1]) if start != BEFORE else Position(-1, -1)
        open_writes = self.buffer.live_writes(segment)
        g = self._max_read_position(lac, open_writes, previous)
        holding = len({w.txn_id for w in open_writes
                       if w.first is None or w.first.entry_position <= lac})
        if g.entry < 0:  # held before the first entry: nothing to plan
            return start, lac, holding
        entry = Position(g.ledger, g.entry, WHOLE_ENTRY)
        return (entry if entry > start else start), lac, holding

    # ---- what to read: topics, patterns, scalable topics' segments ----
    def resolve(self) -> tuple[str, ...]:
        """The topics read now; a ``topicsPattern`` is matched again at every call."""
        if self.opts.pattern is None:
            return self.opts.topics
        pat = re.compile(self.opts.pattern)
        names = {f"topic://{t}" for t in self.store.list_topics()}
        m = re.match(r"^(persistent)://([^/]+)/([^/]+)/", self.opts.pattern)
        if m:
            if not self.opts.admin_url:
                raise ConfigError(
                    "option 'topicsPattern' over persistent:// topics needs option 'admin.url' "
                    "(the broker's REST admin URL) to list them; pulsar-lite has none: use "
                    "'topics' or topic:// scalable topics")
            listed = admin_request(self.opts.admin_url, "GET",
                                   f"/admin/v2/persistent/{m.group(2)}/{m.group(3)}",
                                   auth=self._admin_auth()) or []
            names |= {t for t in listed if not _SEGMENT.match(t) or not self.topic_of(t)
                      .startswith("topic://")}
        return tuple(sorted(n for n in names if pat.fullmatch(n)))

    @property
    def scalable(self) -> ScalableTopics:
        """The planner's one scalable-topic admin (its errors, its seal completion)."""
        if self._scalable is None:
            self._scalable = ScalableTopics(self.store, self.pulsar, self.opts.admin_url,
                                            admin_auth=self._admin_auth())
        return self._scalable

    def layout(self, topic: str):
        lay = read_layout(self.store, topic[len("topic://"):])
        if lay is None:  # the client's error: what the name is (a 5.0 native topic?)
            return self.scalable.layout(topic)
        return lay

    def units(self, cur: dict[str, Position]) -> list[Unit]:
        """Segments to plan from ``cur``: a scalable topic's child only once every
        parent was read to its end in ``cur`` (so a key's parent rows come in earlier
        micro-batches than its child rows)."""
        out: list[Unit] = []
        for name in self.resolve():
            if not name.startswith("topic://"):
                out += [Unit(name, p) for p in self.partitions(name)]
                continue
            lay = self.layout(name)
            done = {s.id for s in lay.segments.values()
                    if complete(s, cur.get(s.backing, BEFORE))}
            for s in lay.admissible(done):
                if not s.active and s.end is None:
                    out.append(Unit(name, s.backing, hold=True))
                    self._complete_seals(name)
                elif not s.active:
                    out.append(_sealed(name, s))
                else:
                    out.append(Unit(name, s.backing))
        return out

    def _complete_seals(self, name: str) -> None:
        """Finish a seal whose admin stopped before fixing the end (at most once a second
        per topic); the segment is held, never guessed, until its end is fixed."""
        now = time.monotonic()
        if now - self._completing.get(name, 0.0) < 1.0:
            return
        self._completing[name] = now
        try:
            self.scalable.complete_seals(name, wait=False)
        except PulsarTxnError as e:
            log.warning("completing the seal of %s failed (retried): %s", name, e)

    def all_segments(self, name: str) -> list[Unit]:
        """Every segment of a topic (plain: itself), for starting positions."""
        if not name.startswith("topic://"):
            return [Unit(name, p) for p in self.partitions(name)]
        out = []
        for s in self.layout(name).read_order():
            if s.active:
                out.append(Unit(name, s.backing))
            elif s.end is None:
                out.append(Unit(name, s.backing, hold=True))
            else:
                out.append(_sealed(name, s))
        return out

    def topic_of(self, segment: str) -> str:
        """The user-facing topic of a segment (``topic://…`` for a scalable one)."""
        hit = self._topic_of.get(segment)
        if hit is None:
            m = _SEGMENT.match(segment)
            hit = segment
            if m:
                lay = read_layout(self.store, m.group(1))
                if lay is not None and lay.by_backing(segment) is not None:
                    hit = f"topic://{m.group(1)}"
            self._topic_of[segment] = hit
        return hit

    # ---- the optional subscription the source advances at commit ----
    def _subscribe(self, segment: str):
        return self.pulsar.subscribe(
            segment, self.opts.subscription, consumer_type=pulsar.ConsumerType.Failover,
            initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=1)

    def subscription_consumer(self, segment: str) -> None:
        """Create the subscription at the query's start (its backlog = all unread)."""
        if segment not in self._consumers:
            self._subscribe(segment).close()
            self._consumers[segment] = True

    def advance_subscription(self, end: dict[str, Position]) -> None:
        """Cumulative ack, then close: Spark never calls a Python reader's stop(), and
        closing is what flushes the client's grouped acks to the broker."""
        for segment, pos in sorted(end.items()):
            if pos[1] < 0 or self._acked.get(segment) == pos:
                continue
            ledger, entry = pos[0], pos[1]
            if 0 <= pos[2] < WHOLE_ENTRY:
                # inside a batched entry: without batch-index acks the broker would ack
                # the whole entry, past rows not yet committed; ack up to the one before
                entry -= 1
                if entry < 0:
                    continue
            c = self._subscribe(segment)
            try:
                c.acknowledge_cumulative(pulsar.MessageId(-1, ledger, entry, -1))
            finally:
                c.close()
            self._consumers[segment] = True
            self._acked[segment] = pos

    def before_time(self, segment: str, ts_ms: int) -> Position:
        """The offset just before the first message published at or after ``ts_ms``.

        A scan from the earliest entry (pulsar-lite cannot seek by time); the gate
        caps it like any other planned offset.
        """
        end = self.gate(segment, BEFORE)
        last = BEFORE
        for pos, raw in scan(self.pulsar, segment, BEFORE, end, reader=self.opts.reader):
            if raw.publish_timestamp() >= ts_ms:
                return last
            last = pos
        return end

    def first_entry(self, segment: str) -> Position | None:
        for pos, _ in scan(self.pulsar, segment, BEFORE, AFTER_LAST, timeout_ms=5_000,
                           fail_on_data_loss=False, reader=self.opts.reader):
            return Position(pos[0], pos[1])
        return None

    def count_until(self, segment: str, start: Position, end: Position, budget: int,
                    byte_budget: int | None = None) -> tuple[Position, int, int]:
        """Walk messages after ``start`` up to ``end``; stop after ``budget`` of them or
        before passing ``byte_budget`` payload bytes (at least one message: progress).
        Returns (last position, messages, bytes)."""
        n, size, last = 0, 0, start
        for pos, raw in scan(self.pulsar, segment, start, end, reader=self.opts.reader):
            if byte_budget is not None:
                nbytes = len(raw.data())
                if n > 0 and size + nbytes > byte_budget:
                    return last, n, size
                size += nbytes
            n += 1
            last = pos
            if n >= budget or (byte_budget is not None and size >= byte_budget):
                return last, n, size
        # the whole range fits: plan its end as given, so a sealed segment ends at its
        # fixed end (a batched last entry read message by message ends at a batch
        # index, which would never count as "read to the end")
        return end, n, size

    def partitions(self, name: str) -> list[str]:
        """A partitioned topic reads as its partitions, each a segment with its own
        offsets; partitions added later are found at a later trigger and read from
        their start. A failed lookup plans with the last known partitions (they never
        shrink): a broker blip must not end the query."""
        known = self._partitions.get(name)
        try:
            found = partitions_of(self.pulsar, name)
        except Exception as e:  # noqa: BLE001 - planning retries at the next trigger
            if known is None:
                raise
            log.warning("partitions of %s unknown (%s); planning with the last known", name, e)
            return known
        if len(found) > 1:
            for key, offs in (("startingOffsets", getattr(self.opts, "starting", None)),
                              ("endingOffsets", getattr(self.opts, "ending", None))):
                if isinstance(offs, dict) and name in offs:
                    raise ConfigError(
                        f"option {key!r} names {name}, a partitioned topic: give a position "
                        f"per partition ({found[0]}, …), each is read on its own")
        if known is None or len(found) >= len(known):
            self._partitions[name] = found
            for seg in found:
                if seg != name:
                    self._topic_of[seg] = name
        return self._partitions[name]

    def _admin_auth(self):
        return admin_auth(self.opts.auth_plugin, self.opts.auth_params, self.opts.client)

    def close(self) -> None:
        if self._scalable is not None:
            self._scalable.close()
        self._probes.close()  # before the client: it removes them
        wait_probe_cleanup(10.0)  # removals left to the background need the client
        self.pulsar.close()
        self.store.close()
