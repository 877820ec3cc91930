"""The READ_COMMITTED source: offsets planned from the gate, rows classified by outcome.

Offsets are human-readable JSON, one position per segment (a plain topic is one
segment): ``{"persistent://public/default/orders": "12:345:-1"}`` = the last
message the query has read (ledgerId:entryId:batchIndex; ``-1:-1:-1`` = nothing
yet; batch ``2147483647`` = the whole entry). An end offset never passes the
segment's max read position, so every entry in a planned range has a final
outcome and replaying the range returns the same rows (invariant 3), also after
header GC (H2) and restarts.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from pulsar_txn.errors import ConfigError, PulsarTxnError
from pulsar_txn.topics import WHOLE_ENTRY, DataLoss, scan  # noqa: F401  (DataLoss: API)

from .options import SourceOptions, client_kwargs

log = logging.getLogger("pulsar_txn.spark.source")

BEFORE = (-1, -1, -1)
SCHEMA = ("key string, value binary, topic string, segment string, messageId string, "
          "publishTime timestamp, eventTime timestamp, properties map<string,string>, "
          "txnId string")

Pos = tuple[int, int, int]


def encode(p: Pos) -> str:
    return f"{p[0]}:{p[1]}:{p[2]}"


def decode(s: str) -> Pos:
    a, b, c = (int(x) for x in s.split(":"))
    return (a, b, c)


def to_offset(positions: dict[str, Pos]) -> dict:
    return {t: encode(p) for t, p in sorted(positions.items())}


def from_offset(offset: dict) -> dict[str, Pos]:
    return {t: decode(v) for t, v in offset.items()}


@dataclass
class SegmentPartition(InputPartition):
    segment: str
    start: str  # exclusive
    end: str    # inclusive
    topic: str = ""  # what the user reads: topic:// for a scalable topic's segment


@dataclass(frozen=True)
class Unit:
    """One segment to plan now: a plain topic, or a scalable topic's readable segment."""

    topic: str
    segment: str
    cap: Pos | None = None         # a sealed segment's end: never plan past it
    lac: tuple[int, int] | None = None  # known last entry (sealed: its end), else probed
    hold: bool = False             # sealed, end not fixed yet: do not advance


_SEGMENT = re.compile(r"^persistent://(.+)-seg-(\d+)$")


def complete(seg, pos: Pos) -> bool:
    """A sealed segment read up to its fixed end: its children may be planned."""
    from pulsar_txn.records import BEFORE_EARLIEST

    if seg.active or seg.end is None:
        return False
    if seg.end == BEFORE_EARLIEST:
        return True
    end = (seg.end.ledger, seg.end.entry)
    return pos[:2] > end or (pos[:2] == end and pos[2] in (-1, WHOLE_ENTRY))


class Planner:
    """Driver-side: last confirmed entries and gates per segment (no data read)."""

    def __init__(self, opts: SourceOptions) -> None:
        import pulsar

        from pulsar_txn.buffer import TransactionBuffer, max_read_position
        from pulsar_txn.connection import check_reachable
        from pulsar_txn.coordinator import TransactionCoordinator
        from pulsar_txn.metastore import open_store

        self.opts = opts
        self.store = open_store(opts.metastore_url, namespace=opts.namespace)
        self.pulsar = pulsar.Client(opts.service_url, **client_kwargs(opts))
        named = [t for t in opts.topics if t.startswith("persistent://")]
        if named:  # a wrong address fails as the query starts, naming the option
            try:
                check_reachable(self.pulsar, opts.service_url, named[0])
            except Exception:
                self.close()
                raise
        self._max_read_position = max_read_position
        self._topic_of: dict[str, str] = {}
        self._partitions: dict[str, list[str]] = {}
        self._completing: dict[str, float] = {}
        self._consumers: dict[str, bool] = {}  # segments whose subscription exists
        self._acked: dict[str, Pos] = {}
        self.coordinator = TransactionCoordinator(self.store, materialize_inline=True)
        self.buffer = TransactionBuffer(self.store)  # ended txns' writes hold no gate

    def last_entry(self, segment: str) -> tuple[int, int] | None:
        from pulsar_txn.topics import last_entry

        return last_entry(self.pulsar, segment)

    def gate(self, segment: str, start: Pos, lac: tuple[int, int] | None = None) -> Pos:
        """Highest position that may be planned now: min(LAC, first OPEN write - 1)."""
        return self.gate_and_lac(segment, start, lac)[0]

    def gate_and_lac(self, segment: str, start: Pos, lac: tuple[int, int] | None = None
                     ) -> tuple[Pos, tuple[int, int] | None, int]:
        """(gate, last confirmed entry, open txns holding the gate below it)."""
        from pulsar_txn.records import Position

        lac = self.last_entry(segment) if lac is None else lac
        if lac is None:
            return start, None, 0
        previous = Position(start[0], start[1]) if start != BEFORE else Position(-1, -1)
        open_writes = self.buffer.live_writes(segment)
        g = self._max_read_position(Position(*lac), open_writes, previous)
        holding = len({w.txn_id for w in open_writes
                       if w.first is None or (w.first.ledger, w.first.entry) <= lac})
        if g.entry < 0:  # held before the first entry: nothing to plan
            return start, lac, holding
        entry = (g.ledger, g.entry, WHOLE_ENTRY)
        return (entry if entry > start else start), lac, holding

    # ---- what to read: topics, patterns, scalable topics' segments ----
    def resolve(self) -> tuple[str, ...]:
        """The topics read now; a ``topicsPattern`` is matched again at every call."""
        if self.opts.pattern is None:
            return self.opts.topics
        from pulsar_txn.admin import admin_request

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

    def layout(self, topic: str):
        from pulsar_txn.scalable import read_layout

        lay = read_layout(self.store, topic[len("topic://"):])
        if lay is None:  # the client's error: what the name is (a 5.0 native topic?)
            from pulsar_txn.scalable import ScalableTopics

            return ScalableTopics(self.store, self.pulsar, self.opts.admin_url,
                                  admin_auth=self._admin_auth()).layout(topic)
        return lay

    def units(self, cur: dict[str, Pos]) -> list[Unit]:
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
            for s in lay.read_order():
                if s.id in done or not all(p in done for p in s.parents):
                    continue
                if not s.active and s.end is None:
                    out.append(Unit(name, s.backing, hold=True))
                    self._complete_seals(name)
                elif not s.active:
                    end = (s.end.ledger, s.end.entry)
                    out.append(Unit(name, s.backing, (*end, WHOLE_ENTRY), end))
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
        from pulsar_txn.scalable import ScalableTopics

        try:
            ScalableTopics(self.store, self.pulsar, self.opts.admin_url,
                           admin_auth=self._admin_auth()).complete_seals(
                name, wait=False)
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
                end = (s.end.ledger, s.end.entry)
                out.append(Unit(name, s.backing, (*end, WHOLE_ENTRY), end))
        return out

    def topic_of(self, segment: str) -> str:
        """The user-facing topic of a segment (``topic://…`` for a scalable one)."""
        hit = self._topic_of.get(segment)
        if hit is None:
            m = _SEGMENT.match(segment)
            hit = segment
            if m:
                from pulsar_txn.scalable import read_layout

                lay = read_layout(self.store, m.group(1))
                if lay is not None and lay.by_backing(segment) is not None:
                    hit = f"topic://{m.group(1)}"
            self._topic_of[segment] = hit
        return hit

    # ---- the optional subscription the source advances at commit ----
    def _subscribe(self, segment: str):
        import pulsar

        return self.pulsar.subscribe(
            segment, self.opts.subscription, consumer_type=pulsar.ConsumerType.Failover,
            initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=1)

    def subscription_consumer(self, segment: str) -> None:
        """Create the subscription at the query's start (its backlog = all unread)."""
        if segment not in self._consumers:
            self._subscribe(segment).close()
            self._consumers[segment] = True

    def advance_subscription(self, end: dict[str, Pos]) -> None:
        """Cumulative ack, then close: Spark never calls a Python reader's stop(), and
        closing is what flushes the client's grouped acks to the broker."""
        import pulsar

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

    def before_time(self, segment: str, ts_ms: int) -> Pos:
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

    def first_entry(self, segment: str) -> tuple[int, int] | None:
        for pos, _ in scan(self.pulsar, segment, BEFORE, (2**62, 0, 0), timeout_ms=5_000,
                           fail_on_data_loss=False, reader=self.opts.reader):
            return pos[0], pos[1]
        return None

    def count_until(self, segment: str, start: Pos, end: Pos, budget: int,
                    byte_budget: int | None = None) -> tuple[Pos, int, int]:
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
        from pulsar_txn.topics import partitions_of

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
        from pulsar_txn.connection import admin_auth

        return admin_auth(self.opts.auth_plugin, self.opts.auth_params, self.opts.client)

    def close(self) -> None:
        self.pulsar.close()
        self.store.close()


_OUTCOME_GRACE_S = 30.0  # past a txn's deadline: time for some sweeper to abort it


def read_partition(opts: SourceOptions, part: SegmentPartition, chunk: int = 2000):
    """Executor-side: yield Arrow batches of the committed rows of one segment range."""
    if not isinstance(part, SegmentPartition):
        return  # Spark's stand-in partition for an empty plan: nothing to read
    import pyarrow as pa

    from pulsar_txn.buffer import DELIVER, WAIT, TransactionBuffer
    from pulsar_txn.connection import naming
    from pulsar_txn.errors import InvalidTxnId
    from pulsar_txn.records import PROP_TXN, PROP_WRITER, TxnId, own_txn

    from .resources import RESOURCES

    schema = pa.schema([
        ("key", pa.string()), ("value", pa.binary()), ("topic", pa.string()),
        ("segment", pa.string()), ("messageId", pa.string()),
        ("publishTime", pa.timestamp("us", tz="UTC")),
        ("eventTime", pa.timestamp("us", tz="UTC")),
        ("properties", pa.map_(pa.string(), pa.string())), ("txnId", pa.string())])
    # kept for the worker's later tasks (resources.RESOURCES): no connect, persistence
    # check or client start-up per micro-batch
    RESOURCES.begin_task()
    store = RESOURCES.store(opts.metastore_url, opts.namespace)
    client = RESOURCES.client(opts)
    tb = TransactionBuffer(store)
    watch = None
    try:
        pending: list = []

        def txn_of(t: str, pos) -> TxnId | None:
            try:
                return TxnId.parse(t)
            except InvalidTxnId:  # not ours, or corrupt: never delivered (fail closed)
                log.warning("%s: message %s: its %s property %r is malformed or of another "
                            "deployment; it is never delivered", part.segment, encode(pos),
                            PROP_TXN, t)
                return None

        def wait_for(txn: TxnId) -> None:
            """H1 fallback: an OPEN txn's entry below the gate waits for its end, woken by
            the store's events (a watch opened on first need), at most until its deadline
            plus a sweep's grace: never guessed, never a fixed timeout."""
            nonlocal watch
            if watch is None:
                watch = store.watch(tb.on_event)
            header = store.get_header(txn)
            left = 0.0 if header is None else (header.deadline_ms - store.server_time_ms()) / 1000
            if not tb.wait_for_outcome(txn, max(left, 0.0) + _OUTCOME_GRACE_S):
                raise PulsarTxnError(f"{part.segment}: {txn} is still OPEN below the gate "
                                     f"{_OUTCOME_GRACE_S:.0f} s after its deadline; is any "
                                     "sweeper running?")

        def flush():
            ids = {t: txn_of(t, pos) for pos, _, _, t, _ in pending if t}
            pairs = [(ids[t], w) for _, _, _, t, w in pending if t and ids[t] is not None]
            verdicts = iter(tb.classify(part.segment, pairs)) if pairs else iter(())
            cols: dict[str, list] = {f.name: [] for f in schema}
            for pos, raw, props, t, w in pending:
                if t:
                    txn = ids[t]
                    if txn is None:
                        continue
                    verdict = next(verdicts)
                    if verdict == WAIT:
                        wait_for(txn)
                        verdict = tb.classify(part.segment, [(txn, w)])[0]
                    if verdict != DELIVER:
                        continue
                cols["key"].append(raw.partition_key() or None)
                cols["value"].append(raw.data())
                cols["topic"].append(part.topic or part.segment)
                cols["segment"].append(part.segment)
                cols["messageId"].append(encode(pos))
                cols["publishTime"].append(raw.publish_timestamp() * 1000)
                et = raw.event_timestamp()
                cols["eventTime"].append(et * 1000 if et else None)
                cols["properties"].append(
                    [(k, v) for k, v in props.items() if not k.startswith("__ptxn.")]
                    if t or props else [])
                cols["txnId"].append(t)
            pending.clear()
            return pa.RecordBatch.from_pydict(cols, schema=schema)

        with naming(opts.service_url, what=f"reading {part.segment}"):
            for pos, raw in scan(client, part.segment, decode(part.start), decode(part.end),
                                 timeout_ms=opts.data_timeout_ms,
                                 fail_on_data_loss=opts.fail_on_data_loss, reader=opts.reader):
                props = raw.properties()
                t = own_txn(props, store.deployment)
                pending.append((pos, raw, props, t, props.get(PROP_WRITER, "") if t else ""))
                if len(pending) >= chunk:
                    yield flush()
        if pending:
            yield flush()
    finally:
        if watch is not None:
            watch.close()


def _split(start: Pos, end: Pos, pieces: int) -> list[tuple[Pos, Pos]]:
    """Split (start, end] into up to ``pieces`` ranges by entry id, within one ledger.

    Entry ids are dense inside a ledger, so the cut points exist; a range that
    crosses ledgers is kept whole (ledger ids are not dense).
    """
    first = start[1] + 1
    if pieces <= 1 or start == BEFORE or start[0] != end[0] or end[1] - first < pieces:
        return [(start, end)]
    step = (end[1] - first + 1) // pieces
    cuts = [(start[0], first + step * i - 1, WHOLE_ENTRY) for i in range(1, pieces)]
    bounds = [start, *cuts, end]
    return list(zip(bounds, bounds[1:]))


def plan_partitions(start: dict, end: dict, min_partitions: int = 1,
                    first_entry=None, topic_of=None) -> list[SegmentPartition]:
    """One partition per segment range, split further when ``min_partitions`` asks.

    ``first_entry(segment)`` places a range that starts before the earliest entry,
    so that it can be split too (only needed when splitting).
    """
    s, e = from_offset(start), from_offset(end)
    ranges = [(t, s.get(t, BEFORE), p) for t, p in sorted(e.items()) if p > s.get(t, BEFORE)]
    if min_partitions > len(ranges) and first_entry is not None:
        placed = []
        for t, lo, hi in ranges:
            if lo == BEFORE:
                first = first_entry(t)
                if first is not None and first[1] > 0:
                    lo = (first[0], first[1] - 1, WHOLE_ENTRY)
                elif first is not None:
                    lo = BEFORE if first[0] != hi[0] else (first[0], -1, WHOLE_ENTRY)
            placed.append((t, lo, hi))
        ranges = placed
    per_segment = -(-min_partitions // max(1, len(ranges)))  # ceil
    return [SegmentPartition(t, encode(a), encode(b), topic_of(t) if topic_of else t)
            for t, lo, hi in ranges for a, b in _split(lo, hi, per_segment)]


class StreamSource:
    """Core of the streaming reader (the Spark classes delegate here)."""

    def __init__(self, options) -> None:
        self.opts = SourceOptions.from_options(options)
        self._planner: Planner | None = None
        self._target: dict[str, Pos] | None = None  # Trigger.AvailableNow cap
        self._waiting_since: float | None = None
        self._report: dict | None = None
        self._logged: tuple | None = None

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.opts)
        return self._planner

    def _units(self) -> list[Unit]:
        return [u for name in self.planner.resolve() for u in self.planner.all_segments(name)]

    def initial_offset(self) -> dict:
        units = self._units()
        if self.opts.starting_timestamp_ms is not None:
            ts = self.opts.starting_timestamp_ms
            return to_offset({u.segment: self.planner.before_time(u.segment, ts) for u in units})
        s = self.opts.starting
        if s == "earliest":
            return to_offset({u.segment: BEFORE for u in units})
        if s == "latest":  # sealed segments count as read to their end
            from pulsar_txn.topics import last_entry_strict

            # an unknown last entry raises: 'latest' never silently becomes 'earliest'
            return to_offset({u.segment: u.cap if u.cap else self.planner.gate(
                u.segment, BEFORE, last_entry_strict(self.planner.pulsar, u.segment))
                for u in units})
        return to_offset({u.segment: s.get(u.segment, BEFORE) for u in units})

    def latest_offset(self, start: dict, limit) -> dict:
        from pyspark.sql.streaming.datasource import ReadMaxBytes, ReadMaxRows, ReadMinRows

        # once per trigger, also when idle: the deployment's background work (a query
        # must not stall behind an abandoned txn when no other process sweeps)
        self.planner.coordinator.sweep_if_due(self.opts.retention_ms)
        cur = from_offset(start)
        units = self.planner.units(cur)
        ends: dict[str, Pos] = dict(cur)
        latest: dict[str, str] = {}
        behind = holding = 0
        for u in units:
            s = cur.get(u.segment, BEFORE)
            if u.hold:
                ends[u.segment] = s
                continue
            g, lac, held = self.planner.gate_and_lac(u.segment, s, u.lac)
            if u.cap is not None:
                g = min(g, u.cap)
            if self._target is not None:
                g = min(g, self._target.get(u.segment, s))
            ends[u.segment] = max(g, s)
            holding += held
            if lac is not None:
                latest[u.segment] = f"{lac[0]}:{lac[1]}"
                behind += _entries_between(ends[u.segment], lac)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.opts.max_records
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.opts.max_bytes
        if max_rows is not None or max_bytes is not None:
            rows, size = max_rows or 2**62, max_bytes
            for u in units:
                s = cur.get(u.segment, BEFORE)
                if ends[u.segment] <= s:
                    continue
                if rows <= 0 or (size is not None and size <= 0):
                    ends[u.segment] = s
                    continue
                ends[u.segment], n, nbytes = self.planner.count_until(
                    u.segment, s, ends[u.segment], rows, size)
                rows -= n
                if size is not None:
                    size -= nbytes
        elif isinstance(limit, ReadMinRows):
            available = sum(self.planner.count_until(u.segment, cur.get(u.segment, BEFORE),
                                                     ends[u.segment], limit.min_rows)[1]
                            for u in units if ends[u.segment] > cur.get(u.segment, BEFORE))
            now = time.monotonic()
            if available < limit.min_rows:
                self._waiting_since = self._waiting_since or now
                if now - self._waiting_since < self.opts.max_trigger_delay_ms / 1000:
                    ends = dict(cur)
            if ends != cur:
                self._waiting_since = None
        if self.opts.subscription:
            for u in units:
                self.planner.subscription_consumer(u.segment)
            # Spark's loop is construct -> run -> commit log -> construct: the start of
            # a new plan is the end of a committed batch (after a crash the last batch
            # is re-run first, without latestOffset). Acking here also covers the last
            # batch of Trigger.AvailableNow, for which commit() never comes.
            self.planner.advance_subscription(cur)
        self._metrics(latest, behind, holding, len(units))
        return to_offset(ends)

    def _metrics(self, latest: dict, behind: int, holding: int, segments: int) -> None:
        """Progress: shown as the source's latestOffset in each query progress."""
        self._report = {"latest": latest, "entriesBehindLatest": behind,
                        "openTxnsHoldingGate": holding, "segmentsRead": segments}
        state = (behind, holding, segments)
        if state != self._logged:
            self._logged = state
            log.info("pulsar-txn source: %d entries behind latest on %d segments; %d open "
                     "transactions hold the gate", behind, segments, holding)

    def report_latest_offset(self) -> dict | None:
        return self._report

    def partitions(self, start: dict, end: dict) -> list[SegmentPartition]:
        return plan_partitions(start, end, self.opts.min_partitions, self.planner.first_entry,
                               self.planner.topic_of)

    def commit(self, end: dict) -> None:
        """Spark committed the batch ending at ``end``: advance the optional subscription."""
        if self.opts.subscription:
            self.planner.advance_subscription(from_offset(end))

    def default_read_limit(self):
        from pyspark.sql.streaming.datasource import (
            ReadAllAvailable,
            ReadMaxBytes,
            ReadMaxRows,
            ReadMinRows,
        )

        if self.opts.max_records is not None:
            return ReadMaxRows(self.opts.max_records)
        if self.opts.max_bytes is not None:
            return ReadMaxBytes(self.opts.max_bytes)
        if self.opts.min_records is not None:
            return ReadMinRows(self.opts.min_records)
        return ReadAllAvailable()

    def prepare_available_now(self) -> None:
        self._target = {u.segment: (u.cap if u.cap else self.planner.gate(u.segment, BEFORE,
                                                                             u.lac))
                        for u in self._units()}

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


def _entries_between(end: Pos, lac: tuple[int, int]) -> int:
    """Entries after ``end`` up to ``lac``: exact within a ledger (entry ids are dense);
    across ledgers, the entries of the last ledger (a lower bound)."""
    if (end[0], end[1]) >= lac:
        return 0
    if end[0] == lac[0]:
        return lac[1] - end[1]
    return lac[1] + 1


class BatchSource:
    def __init__(self, options) -> None:
        self.opts = SourceOptions.from_options(options, batch=True)

    def partitions(self) -> list[SegmentPartition]:
        planner = Planner(self.opts)
        try:
            s = self.opts.starting
            if s == "latest":
                raise ConfigError("option 'startingOffsets' cannot be 'latest' in a batch query")
            ts = self.opts.starting_timestamp_ms
            e = self.opts.ending

            def first(seg: str) -> Pos:
                return (s.get(seg, BEFORE) if isinstance(s, dict) else
                        planner.before_time(seg, ts) if ts is not None else BEFORE)

            start: dict[str, Pos] = {}
            end: dict[str, Pos] = {}
            # A scalable topic's child joins once its parents are planned to their end:
            # iterate to the fixpoint, so the snapshot never holds a key's later rows
            # (in a child) without its earlier ones (in a parent).
            while True:
                units = [u for u in planner.units({**start, **end}) if u.segment not in end]
                if not units:
                    break
                for u in units:
                    start[u.segment] = first(u.segment)
                    if u.hold:
                        end[u.segment] = start[u.segment]
                        continue
                    if isinstance(e, dict) and u.segment in e:
                        # as given (Kafka's semantics: a missing range is data loss);
                        # READ_COMMITTED still holds: executors wait for OPEN outcomes
                        end[u.segment] = e[u.segment]
                        continue
                    g = planner.gate(u.segment, start[u.segment], u.lac)
                    end[u.segment] = min(g, u.cap) if u.cap else g
            return plan_partitions(to_offset(start), to_offset(end), self.opts.min_partitions,
                                   planner.first_entry, planner.topic_of)
        finally:
            planner.close()


def describe(offset: dict) -> str:
    return json.dumps(offset, sort_keys=True)
