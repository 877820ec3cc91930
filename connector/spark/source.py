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
import time
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from pulsar_txn.errors import ConfigError, PulsarTxnError

from .options import SourceOptions

log = logging.getLogger("pulsar_txn.spark.source")

BEFORE = (-1, -1, -1)
WHOLE_ENTRY = 2**31 - 1
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


class Planner:
    """Driver-side: last confirmed entries and gates per segment (no data read)."""

    def __init__(self, opts: SourceOptions) -> None:
        import pulsar

        from pulsar_txn.buffer import max_read_position
        from pulsar_txn.client import quiet_logger
        from pulsar_txn.metastore import open_store

        self.opts = opts
        self.store = open_store(opts.metastore_url, namespace=opts.namespace)
        self.pulsar = pulsar.Client(opts.service_url, **{"logger": quiet_logger(),
                                                         **opts.client})
        self._max_read_position = max_read_position

    def last_entry(self, segment: str) -> tuple[int, int] | None:
        from pulsar_txn.topics import last_entry

        return last_entry(self.pulsar, segment)

    def gate(self, segment: str, start: Pos) -> Pos:
        """Highest position that may be planned now: min(LAC, first OPEN write - 1)."""
        from pulsar_txn.records import Position

        lac = self.last_entry(segment)
        if lac is None:
            return start
        previous = Position(start[0], start[1]) if start != BEFORE else Position(-1, -1)
        g = self._max_read_position(Position(*lac), self.store.open_writes(segment), previous)
        entry = (g.ledger, g.entry, WHOLE_ENTRY)
        return entry if entry > start else start

    def before_time(self, segment: str, ts_ms: int) -> Pos:
        """The offset just before the first message published at or after ``ts_ms``.

        A scan from the earliest entry (pulsar-lite cannot seek by time); the gate
        caps it like any other planned offset.
        """
        end = self.gate(segment, BEFORE)
        last = BEFORE
        for pos, raw in scan(self.pulsar, segment, BEFORE, end):
            if raw.publish_timestamp() >= ts_ms:
                return last
            last = pos
        return end

    def first_entry(self, segment: str) -> tuple[int, int] | None:
        for pos, _ in scan(self.pulsar, segment, BEFORE, (2**62, 0, 0), timeout_ms=5_000,
                           fail_on_data_loss=False):
            return pos[0], pos[1]
        return None

    def count_until(self, segment: str, start: Pos, end: Pos, budget: int
                    ) -> tuple[Pos, int]:
        """Walk messages after ``start`` up to ``end``; stop after ``budget`` of them."""
        n, last = 0, start
        for pos, _ in scan(self.pulsar, segment, start, end):
            n += 1
            last = pos
            if n >= budget:
                break
        return last, n

    def close(self) -> None:
        self.pulsar.close()
        self.store.close()


class DataLoss(PulsarTxnError):
    """Entries of a planned range can no longer be read (deleted topic or ledgers)."""


def scan(client, segment: str, start: Pos, end: Pos, timeout_ms: int = 30_000,
         fail_on_data_loss: bool = True) -> Iterator[tuple[Pos, object]]:
    """Yield (position, native message) for start < position <= end, in order.

    Starts the reader *inclusively* at the start entry and filters, rather than
    trusting exclusive starts inside batches; never seeks (pulsar-lite cannot).
    """
    import pulsar

    if end <= start:
        return
    if start == BEFORE or start[1] < 0:  # earlier ledgers are filtered out below
        mid, inclusive = pulsar.MessageId.earliest, False
    else:
        mid, inclusive = pulsar.MessageId(-1, start[0], start[1], -1), True
    reader = client.create_reader(segment, mid, start_message_id_inclusive=inclusive,
                                  receiver_queue_size=2000)
    native = reader._reader
    last: Pos | None = None
    try:
        while True:
            at_end_entry = last is not None and (last[0], last[1]) == (end[0], end[1])
            wait = 200 if at_end_entry else timeout_ms
            try:
                raw = native.read_next(wait)
            except pulsar.Timeout:
                if at_end_entry:
                    return  # the end entry's batch is complete
                msg = (f"{segment}: no entry after {encode(last or start)} within {timeout_ms} "
                       f"ms although {encode(end)} was planned: its data is gone (deleted "
                       "topic or ledgers). Set failOnDataLoss=false to skip lost ranges.")
                if fail_on_data_loss:
                    raise DataLoss(msg) from None
                log.warning("%s (failOnDataLoss=false: skipped)", msg)
                return
            m = raw.message_id()
            pos = (m.ledger_id(), m.entry_id(), m.batch_index())
            if last is not None and pos <= last:
                continue  # a redelivery (pulsar-lite duplicates unbatched topics)
            last = pos
            if pos <= start:
                continue
            if pos > end:
                return
            yield pos, raw
            if pos == end or (pos[2] < 0 and (pos[0], pos[1]) == (end[0], end[1])):
                return
    finally:
        reader.close()


def read_partition(opts: SourceOptions, part: SegmentPartition, chunk: int = 2000):
    """Executor-side: yield Arrow batches of the committed rows of one segment range."""
    import pulsar
    import pyarrow as pa

    from pulsar_txn.buffer import DELIVER, WAIT, TransactionBuffer
    from pulsar_txn.client import quiet_logger
    from pulsar_txn.metastore import open_store
    from pulsar_txn.records import PROP_TXN, PROP_WRITER, TxnId

    schema = pa.schema([
        ("key", pa.string()), ("value", pa.binary()), ("topic", pa.string()),
        ("segment", pa.string()), ("messageId", pa.string()),
        ("publishTime", pa.timestamp("us", tz="UTC")),
        ("eventTime", pa.timestamp("us", tz="UTC")),
        ("properties", pa.map_(pa.string(), pa.string())), ("txnId", pa.string())])
    store = open_store(opts.metastore_url, namespace=opts.namespace)
    client = pulsar.Client(opts.service_url, **{"logger": quiet_logger(), **opts.client})
    tb = TransactionBuffer(store)
    outcome_timeout_s = 120.0
    try:
        pending: list = []

        def flush():
            pairs = [(TxnId.parse(t), w) for _, _, _, t, w in pending if t]
            verdicts = iter(tb.classify(part.segment, pairs)) if pairs else iter(())
            cols: dict[str, list] = {f.name: [] for f in schema}
            for pos, raw, props, t, w in pending:
                if t:
                    verdict = next(verdicts)
                    if verdict == WAIT:  # H1 fallback: wait for the outcome, never guess
                        txn = TxnId.parse(t)
                        if not tb.wait_for_outcome(txn, outcome_timeout_s):
                            raise PulsarTxnError(f"{part.segment}: {t} still OPEN below the gate")
                        verdict = tb.classify(part.segment, [(txn, w)])[0]
                    if verdict != DELIVER:
                        continue
                cols["key"].append(raw.partition_key() or None)
                cols["value"].append(raw.data())
                cols["topic"].append(part.segment)
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

        for pos, raw in scan(client, part.segment, decode(part.start), decode(part.end),
                             timeout_ms=opts.data_timeout_ms,
                             fail_on_data_loss=opts.fail_on_data_loss):
            props = raw.properties()
            t = props.get(PROP_TXN)
            pending.append((pos, raw, props, t, props.get(PROP_WRITER, "") if t else ""))
            if len(pending) >= chunk:
                yield flush()
        if pending:
            yield flush()
    finally:
        client.close()
        store.close()


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
                    first_entry=None) -> list[SegmentPartition]:
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
    return [SegmentPartition(t, encode(a), encode(b))
            for t, lo, hi in ranges for a, b in _split(lo, hi, per_segment)]


class StreamSource:
    """Core of the streaming reader (the Spark classes delegate here)."""

    def __init__(self, options) -> None:
        self.opts = SourceOptions.from_options(options)
        self._planner: Planner | None = None
        self._target: dict[str, Pos] | None = None  # Trigger.AvailableNow cap
        self._waiting_since: float | None = None

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.opts)
        return self._planner

    def initial_offset(self) -> dict:
        if self.opts.starting_timestamp_ms is not None:
            ts = self.opts.starting_timestamp_ms
            return to_offset({t: self.planner.before_time(t, ts) for t in self.opts.topics})
        s = self.opts.starting
        if s == "earliest":
            return to_offset({t: BEFORE for t in self.opts.topics})
        if s == "latest":
            return to_offset({t: self.planner.gate(t, BEFORE) for t in self.opts.topics})
        return to_offset({t: s.get(t, BEFORE) for t in self.opts.topics})

    def latest_offset(self, start: dict, limit) -> dict:
        from pyspark.sql.streaming.datasource import ReadMaxRows, ReadMinRows

        cur = from_offset(start)
        ends = {t: self.planner.gate(t, cur.get(t, BEFORE)) for t in self.opts.topics}
        if self._target is not None:
            ends = {t: min(p, self._target.get(t, p)) for t, p in ends.items()}
        if isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
            for t in self.opts.topics:
                s = cur.get(t, BEFORE)
                if budget <= 0:
                    ends[t] = s
                    continue
                ends[t], n = self.planner.count_until(t, s, ends[t], budget)
                budget -= n
        elif isinstance(limit, ReadMinRows):
            available = sum(self.planner.count_until(t, cur.get(t, BEFORE), ends[t],
                                                     limit.min_rows)[1]
                            for t in self.opts.topics)
            now = time.monotonic()
            if available < limit.min_rows:
                self._waiting_since = self._waiting_since or now
                if now - self._waiting_since < self.opts.max_trigger_delay_ms / 1000:
                    return start
            self._waiting_since = None
        return to_offset({t: max(p, cur.get(t, BEFORE)) for t, p in ends.items()})

    def default_read_limit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

        if self.opts.max_records is not None:
            return ReadMaxRows(self.opts.max_records)
        if self.opts.min_records is not None:
            return ReadMinRows(self.opts.min_records)
        return ReadAllAvailable()

    def prepare_available_now(self) -> None:
        self._target = {t: self.planner.gate(t, BEFORE) for t in self.opts.topics}

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


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
            start = {t: (s.get(t, BEFORE) if isinstance(s, dict) else
                         planner.before_time(t, ts) if ts is not None else BEFORE)
                     for t in self.opts.topics}
            e = self.opts.ending
            end = {t: (e[t] if isinstance(e, dict) and t in e else planner.gate(t, start[t]))
                   for t in self.opts.topics}
            return plan_partitions(to_offset(start), to_offset(end), self.opts.min_partitions,
                                   planner.first_entry)
        finally:
            planner.close()


def describe(offset: dict) -> str:
    return json.dumps(offset, sort_keys=True)
