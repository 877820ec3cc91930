"""Executor side of the sink: a task writes its rows under the batch's transaction.

Tasks (executors) join the batch's transaction through its owner key
``<sink id>|<query id>|<batchId>`` (create-or-get in one script), write as their own
writer (one per task attempt) and report it in their commit message; only the driver
ends the transaction (``sink_commit``), naming the attempts whose messages reached it.
So a retried, speculative or zombie attempt can write, yet never shows, and a
replayed batch that already committed writes nothing.
"""

from __future__ import annotations

import difflib
import logging
import uuid
from dataclasses import dataclass
from datetime import timezone

import pulsar
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage

from pulsar_txn.broker_io import partitions_of
from pulsar_txn.connection import naming
from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.entry_acks import EntryAcks, send_columns
from pulsar_txn.errors import AppendFailed, ConfigError, TxnNotFound
from pulsar_txn.records import PROTOCOL_PREFIX, TxnId, sink_owner
from pulsar_txn.scalable.admin import ScalableTopics
from pulsar_txn.scalable.producer import ScalableProducer
from pulsar_txn.schema_codec import (
    REGISTERED_BY_PRODUCERS,
    EncodedSchema,
    encode_column,
)
from pulsar_txn.schema_key_value import encode_key_values
from pulsar_txn.schemas import TopicSchema
from pulsar_txn.spark.logs import configure_logging
from pulsar_txn.state import TxnState
from pulsar_txn.topics import normalize_any, partition_for
from pulsar_txn.transaction import Transaction
from pulsar_txn.writer import NO_POSITION

from . import faults
from .options import SinkOptions, default_sink_id
from .resources import RESOURCES
from .sink_schema import is_typed

log = logging.getLogger("pulsar_txn.spark.sink")  # the name users configure: kept

ACCEPTED = {"value": ("binary", "string"), "key": ("string", "binary"),
            "properties": ("map<string,string>",), "eventtime": ("timestamp",),
            "topic": ("string",)}


# Kafka's sink columns that mean something else here: refused, never dropped silently.
_KAFKA_COLUMNS = {"headers": "'properties' (map<string,string>)",
                  "partition": "'key' (partitioned topics are routed by key hash)"}


def _refuse_if_meant(name: str) -> None:
    """An unused column is ignored, unless it looks meant for the sink: a near miss of
    an accepted name, or Kafka's ``headers``/``partition`` (their rows would be written
    without their key or properties, without a word)."""
    low = name.lower()
    if low in _KAFKA_COLUMNS:
        raise ConfigError(f"column {name!r} is Kafka's; the pulsar-txn sink takes "
                          f"{_KAFKA_COLUMNS[low]} instead (rename it, or drop it)")
    close = (difflib.get_close_matches(low, list(ACCEPTED), n=1, cutoff=0.75)
             or [a for a in ACCEPTED if sorted(a) == sorted(low)])  # letters swapped
    if close:
        shown = "eventTime" if close[0] == "eventtime" else close[0]
        raise ConfigError(f"column {name!r} is not used by the pulsar-txn sink; did you mean "
                          f"{shown!r}? (other columns are ignored)")


def check_sink_schema(schema, opts: SinkOptions) -> dict[str, str]:
    """Map each accepted role to the input column; a used column of another type is an
    error. Columns the sink does not use are ignored, as Kafka's sink does, so a
    source's output (segment, messageId, txnId …) is written back without a select."""
    roles: dict[str, str] = {}
    for f in schema.fields:
        role = f.name.lower()
        if role not in ACCEPTED:
            _refuse_if_meant(f.name)
            continue
        type_name = f.dataType.simpleString()
        if role in ("value", "key") and is_typed(type_name):
            roles[role] = f.name  # written under a Pulsar schema (sink_schema.py)
            continue
        if type_name not in ACCEPTED[role]:
            raise ConfigError(f"column {f.name!r} has type {type_name}; the pulsar-txn sink "
                              f"expects {' or '.join(ACCEPTED[role])}")
        roles[role] = f.name
    if "value" not in roles:
        raise ConfigError("the pulsar-txn sink needs a 'value' column (binary or string, or "
                          "a struct or primitive written under a Pulsar schema); "
                          f"columns: {', '.join(f.name for f in schema.fields)}")
    if not opts.topic and "topic" not in roles:
        raise ConfigError("set option 'topic' or provide a 'topic' column")
    return roles


@dataclass
class PulsarTxnCommitMessage(WriterCommitMessage):
    """What a task attempt reports to the driver. The driver names winners only from
    these, so an attempt that wrote but whose report never arrived stays invisible."""

    sink_id: str
    txn_id: str | None
    writer: str
    segments: tuple[str, ...]
    rows: int
    already_committed: bool = False
    query_id: str = ""


class _PlainRun:
    """transactional=false: the same appends without a transaction (at-least-once)."""

    def __init__(self, producer) -> None:
        self.producer = producer
        self.errors: list[str] = []
        self._entries: EntryAcks | None = None
        self._flushed = False

    def acknowledge_per_entry(self, max_messages: int, max_bytes: int) -> EntryAcks:
        """As WriterRun.acknowledge_per_entry: ``send_many`` learns outcomes per entry."""
        self._entries = EntryAcks(max_messages, max_bytes)
        return self._entries

    def _done(self, res, msg_id) -> None:
        if res != pulsar.Result.Ok:
            self.errors.append(str(res))
        elif msg_id.entry_id() < 0:  # perhaps never stored: the task fails, Spark retries
            self.errors.append(NO_POSITION)

    def send_async(self, value, callback=None, properties=None, **kw) -> None:
        done = self._done if callback is None else self._chained(callback)
        self.producer.send_async(value, done, properties=properties or {}, **kw)

    def _chained(self, callback):
        def done(res, msg_id) -> None:
            self._done(res, msg_id)
            callback(res, msg_id)
        return done

    def send_many(self, values: list, keys: list | None = None,
                  properties: list | None = None, event_times: list | None = None) -> None:
        """Like WriterRun.send_many, without a transaction (the same loop)."""
        if self._entries is not None and not self._flushed:
            self.producer.flush()  # the per-entry numbering starts from an empty batch
            self._flushed = True
        send_columns(self.producer, values, keys, properties, event_times, {}, self._done,
                     self._entries)

    def flush(self, timeout_s: float = 120.0) -> None:
        self.producer.flush()
        if self._entries is not None:
            if not self._entries.wait(timeout_s):
                self.errors.append(f"{self._entries.outstanding} entries unacknowledged "
                                   f"after {timeout_s}s")
            self.errors.extend(self._entries.verify())
        if self.errors:
            raise AppendFailed(f"{len(self.errors)} appends failed: {self.errors[0]}")


class _ScalableWrites:
    """A task's writes to ``topic://`` targets: rows routed by key hash to the ACTIVE
    segments, re-routed in order if a split or merge seals one mid-batch (the same
    ScalableProducer the client API uses), under the batch's txn as the task's writer."""

    def __init__(self, opts: SinkOptions, client, store, txn: Transaction | None,
                 writer: str, producer_kw: dict) -> None:
        if store is None:  # transactional=false: no store was borrowed yet
            store = RESOURCES.store(opts.metastore_url, opts.namespace)
        self.pulsar, self.store, self.writer = client, store, writer
        self.scalable = ScalableTopics(store, client)
        self._kw = producer_kw
        self.producers: dict[str, ScalableProducer] = {}
        self.txn = txn
        self.errors: list[str] = []

    def _failed(self, res, msg_id) -> None:
        if res != pulsar.Result.Ok:
            self.errors.append(str(res))
        elif msg_id.entry_id() < 0:
            self.errors.append(NO_POSITION)

    def send(self, topic: str, value: bytes, key, props, event_time_ms) -> None:
        p = self.producers.get(topic)
        if p is None:
            p = self.producers[topic] = ScalableProducer(self.pulsar, self.scalable, topic,
                                                         writer_id=self.writer, **self._kw)
        p.send_async(value, self._failed, key=key, properties=props, txn=self.txn,
                     event_time_ms=event_time_ms)

    def flush(self) -> list[str]:
        """Every append acknowledged (re-routed ones included); the segments written."""
        for p in self.producers.values():
            p.flush()
        if self.txn is not None:
            self.txn.flush()
        if self.errors:
            raise AppendFailed(f"{len(self.errors)} appends failed: {self.errors[0]}")
        return sorted(self.txn.segments) if self.txn is not None else [
            s.backing for p in self.producers.values() for s in p.layout.segments.values()]

    def close(self) -> None:
        try:
            for p in self.producers.values():
                p.close()
        finally:
            self.scalable.close()


def refuse_reserved(batch, roles: dict[str, str]) -> None:
    """Refuse a batch whose properties column carries a protocol property: it would make
    a plain row look transactional, or a transactional one malformed (never delivered).
    One vectorised check of the batch's map keys, before anything is appended."""
    if "properties" not in roles:
        return
    col = batch.column(roles["properties"])
    if not len(col.keys):
        return
    # the keys of this batch's rows only (a map's .keys is its whole child array, which
    # a sliced batch or a null map may not own)
    rows = pa.ListArray.from_arrays(col.offsets, col.keys)
    if col.null_count:
        rows = pc.filter(rows, pc.is_valid(col))
    keys = pc.list_flatten(rows)
    if len(keys) and pc.any(pc.starts_with(keys, PROTOCOL_PREFIX)).as_py():
        key = next(k for k in keys.to_pylist() if k.startswith(PROTOCOL_PREFIX))
        raise ConfigError(f"column {roles['properties']!r} has the property {key!r} in a row; "
                          f"properties starting with {PROTOCOL_PREFIX!r} are the protocol's "
                          "and reserved")


def wire_values(batch, roles: dict[str, str], schema: TopicSchema | None,
                topic: str = "") -> list:
    """The payloads of an Arrow batch's value column: bytes as they are, a typed column
    encoded under its schema (a column at a time)."""
    value = batch.column(roles["value"])
    if schema is not None and schema.is_key_value:  # key and value in the payload; a null
        return encode_key_values(batch.column(roles["key"]), value, schema, topic)  # as Java
    if value.null_count:
        raise ConfigError("column 'value' is null in a row; the pulsar-txn sink needs a "
                          "value for every row")
    if schema is not None:
        return encode_column(value, schema, topic)
    return (value if pa.types.is_binary(value.type) else value.cast(pa.binary())).to_pylist()


def wire_columns(batch, roles: dict[str, str], schema: TopicSchema | None = None,
                 topic: str = "") -> tuple[list, list | None, list | None, list | None]:
    """(values, keys, properties, event times) of an Arrow batch as the producer takes
    them: bytes, str, dict, epoch milliseconds; converted by Arrow, not row by row."""
    values = wire_values(batch, roles, schema, topic)
    keys = None
    if "key" in roles and not (schema is not None and schema.is_key_value):
        key = batch.column(roles["key"])
        keys = (key if pa.types.is_string(key.type) else key.cast(pa.string())).to_pylist()
    props = None
    if "properties" in roles:
        props = [dict(p) if p else None for p in batch.column(roles["properties"]).to_pylist()]
    times = None
    if "eventtime" in roles:
        t = batch.column(roles["eventtime"])
        times = pc.cast(pc.cast(t, pa.timestamp("ms", tz=t.type.tz)), pa.int64()).to_pylist()
    return values, keys, props, times


# The producer of a task that writes whole columns to one topic: its batches are cut by
# count and bytes, its time trigger an hour away (the task flushes its last batch), so
# the run learns every append's outcome from the last message of each batch
# (entry_acks).
PER_ENTRY_PRODUCER = {"batching_max_publish_delay_ms": 3_600_000,
                      "batching_max_allowed_size_in_bytes": 128 * 1024}
# A user's producer setting among these leaves the batches' ends to it: per message.
_BATCHING = {"batching_enabled", "batching_max_messages", "batching_max_allowed_size_in_bytes",
             "batching_max_publish_delay_ms", "batching_type", "max_pending_messages",
             "block_if_queue_full", "chunking_enabled"}


class _TaskWrites:
    """A sink task's writes: a writer-run per plain topic (or partition) on the worker's
    kept producers, a router for ``topic://`` targets, and the per-entry outcomes the
    runs learn. ``txn`` None: plain appends (``transactional=false``)."""

    def __init__(self, opts: SinkOptions, store, txn: Transaction | None, writer: str) -> None:
        self.opts, self.store, self.txn, self.writer = opts, store, txn, writer
        self.client = RESOURCES.client(opts)  # kept for the worker's later tasks
        self.producer_kw = {"batching_enabled": True, "batching_max_messages": 1000,
                            "batching_max_publish_delay_ms": 5, "block_if_queue_full": True,
                            "max_pending_messages": 10_000, **opts.producer}
        if opts.value_schema is not None and (
                opts.value_schema.kind in REGISTERED_BY_PRODUCERS):  # as Pulsar's producers do
            self.producer_kw["schema"] = EncodedSchema(opts.value_schema)
        self.runs: dict = {}  # topic -> its WriterRun (or _PlainRun)
        self.per_entry: list[EntryAcks] = []
        self.partitioned: dict[str, list[str]] = {}
        self.scalable: _ScalableWrites | None = None
        self.default_topic = normalize_any(opts.topic) if opts.topic else None

    def run_for(self, topic: str, whole_columns: bool = False):
        """This task's writer-run on a plain topic, on the worker's kept producer.
        ``whole_columns``: every row of the task goes to this topic by ``send_many``, so
        the run may learn outcomes per entry, on a producer of its own kind."""
        run = self.runs.get(topic)
        if run is None:
            kw = self.producer_kw
            if (whole_columns and RESOURCES.per_entry_acks
                    and not self.opts.producer.keys() & _BATCHING):
                kw = {**kw, **PER_ENTRY_PRODUCER}
            with naming(self.opts.service_url, what=f"creating a producer on {topic}"):
                producer = RESOURCES.producer(self.opts, topic, kw)
            run = self.runs[topic] = (_PlainRun(producer) if self.txn is None else
                                      self.txn.run_for(topic, self.writer, producer))
            if kw is not self.producer_kw:
                self.per_entry.append(run.acknowledge_per_entry(
                    kw["batching_max_messages"], kw["batching_max_allowed_size_in_bytes"]))
        return run

    def partitions(self, topic: str) -> list[str]:
        split = self.partitioned.get(topic)
        if split is None:
            with naming(self.opts.service_url, what=f"looking up {topic}"):
                split = self.partitioned[topic] = partitions_of(self.client, topic)
        return split

    def write(self, batch, roles: dict[str, str], rows_before: int) -> None:
        """One Arrow batch: whole columns to the one plain topic (the common case), or
        row by row where rows are routed (a topic column, partitions, ``topic://``)."""
        t = self.default_topic
        if t is not None and not t.startswith("topic://") and len(self.partitions(t)) == 1:
            self.run_for(t, whole_columns=True).send_many(
                *wire_columns(batch, roles, self.opts.value_schema, t))
            return
        cols = {role: batch.column(name).to_pylist() for role, name in roles.items()}
        if self.opts.value_schema is not None:
            cols["value"] = wire_values(batch, roles, self.opts.value_schema,
                                        self.default_topic or "")
        values, keys, props = cols["value"], cols.get("key"), cols.get("properties")
        if self.opts.value_schema is not None and self.opts.value_schema.is_key_value:
            keys = None  # written in the payload (INLINE)
        times, topics = cols.get("eventtime"), cols.get("topic")
        for i in range(batch.num_rows):
            v = values[i]
            if v is None:
                raise ConfigError("column 'value' is null in a row; the pulsar-txn sink "
                                  "needs a value for every row")
            kw = _row_kwargs(keys[i] if keys is not None else None,
                             times[i] if times is not None else None)
            self.route(t or normalize_any(topics[i]), v.encode() if isinstance(v, str) else v,
                       dict(props[i]) if props is not None and props[i] else None, kw,
                       rows_before + i)

    def route(self, topic: str, value: bytes, props: dict | None, kw: dict, row: int) -> None:
        if topic.startswith("topic://"):
            if self.scalable is None:
                self.scalable = _ScalableWrites(self.opts, self.client, self.store, self.txn,
                                                self.writer, self.producer_kw)
            self.scalable.send(topic, value, kw.get("partition_key"), props,
                               kw.get("event_timestamp"))
            return
        split = self.partitions(topic)
        if len(split) > 1:  # a partitioned topic: one writer-run per partition
            topic = split[partition_for(kw.get("partition_key"), len(split), row)]
        self.run_for(topic).send_async(value, properties=props, **kw)

    def finish(self) -> list[str]:
        """Wait for every append; the segments written."""
        for run in self.runs.values():
            run.flush()
        segments = set(self.runs)
        if self.scalable is not None:
            segments |= set(self.scalable.flush())
        return sorted(segments)

    def failed(self) -> None:
        RESOURCES.discard([run.producer for run in self.runs.values()])  # unknown outcomes
        if any(e.unforeseen for e in self.per_entry):
            # the producer cut its batches where this version did not foresee: this
            # worker's later tasks hear of every message (Spark writes this one again)
            RESOURCES.per_entry_acks = False
            log.warning("a producer's batches did not end where expected; this Python "
                        "worker's sink tasks now take one callback per message (slower)")

    def close(self) -> None:
        if self.scalable is not None:
            self.scalable.close()


def _row_kwargs(key, event_time) -> dict:
    kw = {}
    if key is not None:
        kw["partition_key"] = key.decode() if isinstance(key, bytes) else key
    if event_time is not None:
        if event_time.tzinfo is None:
            event_time = event_time.replace(tzinfo=timezone.utc)
        kw["event_timestamp"] = int(event_time.timestamp() * 1000)
    return kw


def write_rows(opts: SinkOptions, roles: dict[str, str], batches, txn_id: TxnId | None,
               writer: str, store) -> tuple[list[str], int]:
    """Append every row of the Arrow batches under ``txn_id`` as ``writer`` (None: plain)."""
    RESOURCES.begin_task()
    txn = None
    if txn_id is not None:  # the batch's transaction: the driver ends it, never a task
        if store.get_header(txn_id) is None:
            raise TxnNotFound(f"transaction {txn_id} not found")
        txn = Transaction.join(store, txn_id)
    writes, rows = _TaskWrites(opts, store, txn, writer), 0
    try:
        for batch in batches:
            if batch.num_rows:
                refuse_reserved(batch, roles)
                writes.write(batch, roles, rows)
                rows += batch.num_rows
        return writes.finish(), rows
    except BaseException:
        writes.failed()
        raise
    finally:
        writes.close()


def _writer_id(ctx) -> str:
    """One writer per task attempt: the driver names winners by it, so two attempts
    of one partition (retry, speculation, zombie) must never share one."""
    return f"t{ctx.partitionId()}.a{ctx.attemptNumber()}.{uuid.uuid4().hex[:10]}"


def write_micro_batch(opts: SinkOptions, roles: dict[str, str], batches
                      ) -> PulsarTxnCommitMessage:
    """A streaming task: join micro-batch ``batchId``'s transaction (or find it
    committed: a replay writes nothing) and append this attempt's rows under it."""
    configure_logging()  # an executor's Python worker never ran the driver's setup
    ctx = TaskContext.get()
    if not opts.transactional:
        segments, rows = write_rows(opts, roles, batches, None, "", None)
        return PulsarTxnCommitMessage("", None, "", tuple(segments), rows)
    batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
    query_id = ctx.getLocalProperty("sql.streaming.queryId")
    sink_id = opts.sink_id or default_sink_id(query_id)
    writer = _writer_id(ctx)
    store = RESOURCES.store(opts.metastore_url, opts.namespace)  # kept
    txn_id, committed = join_batch(store, sink_id, query_id, batch_id, opts.rebind,
                                   opts.timeout_ms)
    if committed:  # a replay of a committed batch: write nothing
        return PulsarTxnCommitMessage(sink_id, txn_id and str(txn_id), writer, (), 0, True,
                                      query_id)
    segments, rows = write_rows(opts, roles, batches, txn_id, writer, store)
    faults.after_task_write(opts, batch_id, ctx)
    return PulsarTxnCommitMessage(sink_id, str(txn_id), writer, tuple(segments),
                                  rows, False, query_id)


def join_batch(store, sink_id: str, query_id: str, batch_id: int, rebind: bool,
               timeout_ms: int) -> tuple[TxnId | None, bool]:
    """The replay guard of a streaming task: (the batch's transaction, whether it is
    already committed). A committed batch is recognised twice over: by the sink's
    progress record, which the commit CAS advanced (it outlives header GC), and by the
    batch's owner key (create-or-get, while the header is kept). Binding the sink id
    first refuses a query the id does not belong to (a new checkpoint never inherits
    another query's progress, an old one never takes its id back: sink.id.rebind)."""
    if store.bind_sink(sink_id, query_id, rebind) >= batch_id:
        return None, True
    header = TransactionCoordinator(store, materialize_inline=True).new_transaction(
        timeout_ms, owner=sink_owner(sink_id, query_id, batch_id))
    return header.txn_id, header.state is TxnState.COMMITTED


def write_job_part(opts: SinkOptions, roles: dict[str, str], batches, sink_id: str,
                   txn_id: str) -> PulsarTxnCommitMessage:
    """A ``df.write`` task: append this attempt's rows under the job's one transaction,
    which the driver opened when it planned the write."""
    configure_logging()  # an executor's Python worker never ran the driver's setup
    writer = _writer_id(TaskContext.get())
    store = RESOURCES.store(opts.metastore_url, opts.namespace)  # kept
    segments, rows = write_rows(opts, roles, batches, TxnId.parse(txn_id), writer, store)
    return PulsarTxnCommitMessage(sink_id, txn_id, writer, tuple(segments), rows)
