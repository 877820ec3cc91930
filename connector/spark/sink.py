"""The exactly-once sink: each (sink id, batchId) is exactly one transaction.

Tasks (executors) join the batch's transaction through its owner key
``<sink id>:<batchId>`` (create-or-get in one script), write as their own writer
(one per task attempt) and report it in their commit message. The driver's
commit names the winners — only attempts whose messages reached it — in the one
CAS. A replayed batch that already committed writes nothing.
"""

from __future__ import annotations

import logging
import os
import signal
import uuid
from dataclasses import dataclass
from datetime import timezone

import pulsar
from pyspark.sql.datasource import WriterCommitMessage

from pulsar_txn.errors import ConfigError, InvalidTxnTransition, PulsarTxnError, SinkFenced
from pulsar_txn.records import SinkBatch, TxnId, sink_owner
from pulsar_txn.state import TxnState

from .options import SinkOptions, default_sink_id
from .resources import RESOURCES

log = logging.getLogger("pulsar_txn.spark.sink")
if not log.handlers:  # Spark keeps a Python worker's stderr in the driver/executor log
    _h = logging.StreamHandler()
    _h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(_h)
    log.setLevel(logging.INFO)

ACCEPTED = {"value": ("binary", "string"), "key": ("string", "binary"),
            "properties": ("map<string,string>",), "eventtime": ("timestamp",),
            "topic": ("string",)}
_NAMES = {"value": "value", "key": "key", "properties": "properties", "eventtime": "eventTime",
          "topic": "topic"}


def check_sink_schema(schema, opts: SinkOptions) -> dict[str, str]:
    """Map each accepted role to the input column; any other column or type is an error."""
    roles: dict[str, str] = {}
    for f in schema.fields:
        role = f.name.lower()
        if role not in ACCEPTED:
            raise ConfigError(
                f"column {f.name!r} is not accepted by the pulsar-txn sink; accepted columns: "
                f"value (binary|string, required), key, properties, eventTime, topic")
        type_name = f.dataType.simpleString()
        if type_name not in ACCEPTED[role]:
            raise ConfigError(f"column {f.name!r} has type {type_name}; the pulsar-txn sink "
                              f"expects {' or '.join(ACCEPTED[role])}")
        roles[role] = f.name
    if "value" not in roles:
        raise ConfigError("the pulsar-txn sink needs a 'value' column (binary or string)")
    if not opts.topic and "topic" not in roles:
        raise ConfigError("set option 'topic' or provide a 'topic' column")
    return roles


@dataclass
class PulsarTxnCommitMessage(WriterCommitMessage):
    sink_id: str
    txn_id: str | None
    writer: str
    segments: tuple[str, ...]
    rows: int
    already_committed: bool = False
    query_id: str = ""


def _kill_driver(reason: str) -> None:
    """Test seam: SIGKILL the Spark driver JVM (the Python worker's java ancestor)."""
    log.warning("fault injection: killing the Spark driver (%s)", reason)
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
        if b"java" in cmd.split(b"\0")[0]:
            os.kill(pid, signal.SIGKILL)
            os._exit(137)
        pid = parent
    os._exit(137)


def _fault(opts: SinkOptions, kind: str, batch_id: int) -> bool:
    for spec in filter(None, opts.fault.split(",")):
        name, _, arg = spec.partition(":")
        if name == kind and arg.split(":")[0] == str(batch_id):
            return True
    return False


def _fault_arg(opts: SinkOptions, kind: str, batch_id: int) -> str | None:
    for spec in filter(None, opts.fault.split(",")):
        parts = spec.split(":")
        if parts[0] == kind and len(parts) > 2 and parts[1] == str(batch_id):
            return parts[2]
    return None


class _PlainRun:
    """transactional=false: the same appends without a transaction (at-least-once)."""

    def __init__(self, producer) -> None:
        self._p = producer
        self.errors: list[str] = []

    def _done(self, res, _msg_id) -> None:
        if res != pulsar.Result.Ok:
            self.errors.append(str(res))

    def send_async(self, value, properties=None, **kw) -> None:
        self._p.send_async(value, self._done, properties=properties or {}, **kw)

    def send_many(self, values: list, keys: list | None = None,
                  properties: list | None = None, event_times: list | None = None) -> None:
        """Like WriterRun.send_many, without a transaction."""
        import _pulsar

        native, done, builder = self._p._producer, self._done, _pulsar.MessageBuilder
        for j in range(len(values)):
            mb = builder()
            mb.content(values[j])
            if properties is not None and properties[j]:
                mb.properties(properties[j])
            if keys is not None and keys[j]:
                mb.partition_key(keys[j])
            if event_times is not None and event_times[j]:
                mb.event_timestamp(event_times[j])
            native.send_async(mb.build(), done)

    def flush(self) -> None:
        self._p.flush()
        if self.errors:
            raise PulsarTxnError(f"{len(self.errors)} appends failed: {self.errors[0]}")


class _ScalableWrites:
    """A task's writes to ``topic://`` targets: rows routed by key hash to the ACTIVE
    segments, re-routed in order if a split or merge seals one mid-batch (the same
    ScalableProducer the client API uses), under the batch's txn as the task's writer."""

    def __init__(self, opts: SinkOptions, client, store, txn_id: TxnId | None,
                 writer: str, producer_kw: dict) -> None:
        from pulsar_txn.client import Transaction
        from pulsar_txn.scalable import ScalableTopics

        if store is None:  # transactional=false: no store was borrowed yet
            store = RESOURCES.store(opts.metastore_url, opts.namespace)
        self.pulsar, self.store, self.writer = client, store, writer
        self.scalable = ScalableTopics(store, client)
        self._kw = producer_kw
        self.producers: dict[str, object] = {}
        self.txn = None
        if txn_id is not None:
            header = store.get_header(txn_id)
            if header is None:
                raise PulsarTxnError(f"transaction {txn_id} not found")
            self.txn = Transaction(self, header)
        self.errors: list[str] = []

    def _failed(self, res, _msg_id) -> None:
        if res != pulsar.Result.Ok:
            self.errors.append(str(res))

    def send(self, topic: str, value: bytes, key, props, event_time_ms) -> None:
        from pulsar_txn.scalable import ScalableProducer

        p = self.producers.get(topic)
        if p is None:
            p = self.producers[topic] = ScalableProducer(self, topic, writer_id=self.writer,
                                                         **self._kw)
        p.send_async(value, self._failed, key=key, properties=props, txn=self.txn,
                     event_time_ms=event_time_ms)

    def flush(self) -> list[str]:
        """Every append acknowledged (re-routed ones included); the segments written."""
        for p in self.producers.values():
            p.flush()
        if self.txn is not None:
            for run in list(self.txn._runs.values()):
                run.flush()
        if self.errors:
            raise PulsarTxnError(f"{len(self.errors)} appends failed: {self.errors[0]}")
        return sorted(self.txn.segments) if self.txn is not None else [
            s.backing for p in self.producers.values() for s in p._layout.segments.values()]

    def close(self) -> None:
        try:
            for p in self.producers.values():
                p.close()
        finally:
            self.scalable.close()


def wire_columns(batch, roles: dict[str, str]) -> tuple[list, list | None, list | None,
                                                       list | None]:
    """(values, keys, properties, event times) of an Arrow batch as the producer takes
    them: bytes, str, dict, epoch milliseconds; converted by Arrow, not row by row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    value = batch.column(roles["value"])
    if value.null_count:
        raise ConfigError("column 'value' is null in a row; the pulsar-txn sink needs a "
                          "value for every row")
    values = (value if pa.types.is_binary(value.type) else value.cast(pa.binary())).to_pylist()
    keys = None
    if "key" in roles:
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


def write_rows(opts: SinkOptions, roles: dict[str, str], batches, txn_id: TxnId | None,
               writer: str, store) -> tuple[list[str], int]:
    """Append every row of the Arrow batches under ``txn_id`` as ``writer`` (None: plain)."""
    from pulsar_txn.connection import naming
    from pulsar_txn.topics import normalize_any, partition_for, partitions_of
    from pulsar_txn.writer import WriterRun

    RESOURCES.begin_task()
    client = RESOURCES.client(opts)  # kept for the worker's later tasks, like producers
    producer_kw = {"batching_enabled": True, "batching_max_messages": 1000,
                   "batching_max_publish_delay_ms": 5, "block_if_queue_full": True,
                   "max_pending_messages": 10_000, **opts.producer}
    runs: dict[str, WriterRun] = {}
    partitioned: dict[str, list[str]] = {}

    def run_for(topic: str):
        """This task's writer-run on a plain topic, on the worker's kept producer."""
        run = runs.get(topic)
        if run is None:
            with naming(opts.service_url, what=f"creating a producer on {topic}"):
                producer = RESOURCES.producer(opts, topic, producer_kw)
            run = runs[topic] = (_PlainRun(producer) if txn_id is None else
                                 WriterRun(store, txn_id, topic, writer, producer))
        return run

    def partitions(topic: str) -> list[str]:
        split = partitioned.get(topic)
        if split is None:
            with naming(opts.service_url, what=f"looking up {topic}"):
                split = partitioned[topic] = partitions_of(client, topic)
        return split

    scalable: _ScalableWrites | None = None
    rows = 0
    try:
        default_topic = normalize_any(opts.topic) if opts.topic else None
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            if (default_topic is not None and not default_topic.startswith("topic://")
                    and len(partitions(default_topic)) == 1):
                # the common case, one plain topic: whole columns, no per-row routing
                run_for(default_topic).send_many(*wire_columns(batch, roles))
                rows += n
                continue
            cols = {role: batch.column(name).to_pylist() for role, name in roles.items()}
            values = cols["value"]
            keys = cols.get("key")
            props = cols.get("properties")
            times = cols.get("eventtime")
            topics = cols.get("topic")
            for i in range(n):
                v = values[i]
                if v is None:
                    raise ConfigError("column 'value' is null in a row; the pulsar-txn sink "
                                      "needs a value for every row")
                if isinstance(v, str):
                    v = v.encode()
                topic = default_topic or normalize_any(topics[i])
                kw = {}
                if keys is not None and keys[i] is not None:
                    k = keys[i]
                    kw["partition_key"] = k.decode() if isinstance(k, bytes) else k
                if times is not None and times[i] is not None:
                    t = times[i]
                    if t.tzinfo is None:
                        t = t.replace(tzinfo=timezone.utc)
                    kw["event_timestamp"] = int(t.timestamp() * 1000)
                p = dict(props[i]) if props is not None and props[i] else None
                if topic.startswith("topic://"):
                    if scalable is None:
                        scalable = _ScalableWrites(opts, client, store, txn_id, writer,
                                                   producer_kw)
                    scalable.send(topic, v, kw.get("partition_key"), p,
                                  kw.get("event_timestamp"))
                    continue
                split = partitions(topic)
                if len(split) > 1:  # a partitioned topic: one writer-run per partition
                    topic = split[partition_for(kw.get("partition_key"), len(split), rows + i)]
                run_for(topic).send_async(v, p, **kw)
            rows += n
        for run in runs.values():
            run.flush()
        segments = sorted(runs)
        if scalable is not None:
            segments = sorted(set(segments) | set(scalable.flush()))
        return segments, rows
    except BaseException:
        RESOURCES.discard([run._p for run in runs.values()])  # sends of unknown outcome
        raise
    finally:
        if scalable is not None:
            scalable.close()


class StreamSinkWriter:
    """Mixin-free core of the streaming writer (the Spark classes delegate here)."""

    def __init__(self, options, schema) -> None:
        self.opts = SinkOptions.from_options(options)
        self.roles = check_sink_schema(schema, self.opts)
        self._check_broker()

    def _check_broker(self) -> None:
        """Driver-side, as the query starts: a wrong service.url fails here, naming
        the option and the address, not in every task after its timeout."""
        from pulsar_txn.connection import check_reachable
        from pulsar_txn.topics import normalize_any

        topic = normalize_any(self.opts.topic) if self.opts.topic else None
        if topic is None or not topic.startswith("persistent://"):
            return
        # Spark makes the writer again for every micro-batch: one check per worker
        # process is enough, on the worker's kept client
        checked = ("reachable", RESOURCES.client_key(self.opts), topic)  # with credentials
        if RESOURCES.checked(checked):
            return
        check_reachable(RESOURCES.client(self.opts), self.opts.service_url, topic)
        RESOURCES.mark_checked(checked)

    # ---- executor ----
    def write(self, batches) -> PulsarTxnCommitMessage:
        from pyspark import TaskContext

        from pulsar_txn.coordinator import TransactionCoordinator

        ctx = TaskContext.get()
        if not self.opts.transactional:
            segments, rows = write_rows(self.opts, self.roles, batches, None, "", None)
            return PulsarTxnCommitMessage("", None, "", tuple(segments), rows)
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        sink_id = self.opts.sink_id or default_sink_id(query_id)
        writer = f"t{ctx.partitionId()}.a{ctx.attemptNumber()}.{uuid.uuid4().hex[:10]}"
        store = RESOURCES.store(self.opts.metastore_url, self.opts.namespace)  # kept
        # progress is per query: a new checkpoint never inherits another query's
        if store.bind_sink(sink_id, query_id, self.opts.rebind) >= batch_id:
            return PulsarTxnCommitMessage(sink_id, None, writer, (), 0, True, query_id)
        coord = TransactionCoordinator(store, materialize_inline=True)
        header = coord.new_transaction(self.opts.timeout_ms,
                                       owner=sink_owner(sink_id, query_id, batch_id))
        if header.state is TxnState.COMMITTED:  # replay of a committed batch: write nothing
            return PulsarTxnCommitMessage(sink_id, str(header.txn_id), writer, (), 0, True,
                                          query_id)
        segments, rows = write_rows(self.opts, self.roles, batches, header.txn_id, writer,
                                    store)
        if _fault(self.opts, "fail-first-attempt", batch_id) and ctx.attemptNumber() == 0:
            raise RuntimeError(f"fault injection: attempt 0 of batch {batch_id} fails after "
                               "writing")
        slow = _fault_arg(self.opts, "slow-partition0", batch_id)
        if slow and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            import time

            time.sleep(int(slow) / 1000)
        return PulsarTxnCommitMessage(sink_id, str(header.txn_id), writer, tuple(segments),
                                      rows, False, query_id)

    # ---- driver ----
    def commit(self, messages, batch_id: int) -> None:
        from pulsar_txn.coordinator import TransactionCoordinator

        msgs = [m for m in messages if m is not None]
        if not msgs or not self.opts.transactional:
            return
        sink_id, query_id = msgs[0].sink_id, msgs[0].query_id
        sink = SinkBatch(sink_id, query_id, batch_id)
        txns = {m.txn_id for m in msgs if m.txn_id and not m.already_committed}
        store = RESOURCES.store(self.opts.metastore_url, self.opts.namespace)  # kept
        coord = TransactionCoordinator(store, materialize_inline=True)
        if not txns:  # every task saw the batch as committed: a replay
            for t in {m.txn_id for m in msgs if m.txn_id}:  # repeat the end: idempotent
                coord.commit(TxnId.parse(t), sink=sink)
            log.info("pulsar-txn sink %s batch %d: already committed, nothing new",
                     sink_id, batch_id)
            return
        if len(txns) != 1 or any(m.already_committed for m in msgs):
            raise PulsarTxnError(f"sink {sink_id} batch {batch_id}: tasks reported "
                                 f"different transactions {sorted(txns)}; failing the batch")
        txn_id = TxnId.parse(txns.pop())
        if _fault(self.opts, "crash-before-commit", batch_id):
            _kill_driver(f"before commit of batch {batch_id}")
        winners = sorted({m.writer for m in msgs})
        segments = sorted({s for m in msgs for s in m.segments})
        # one CAS: the decision and the sink's progress (a replay is recognised
        # whatever happens after it, however late the restart: invariant 5)
        try:
            coord.commit(txn_id, winners, segments, sink=sink)
        except SinkFenced:  # the sink id moved to another query: end this batch now
            coord.abort(txn_id, segments)
            raise
        if _fault(self.opts, "crash-after-commit", batch_id):
            _kill_driver(f"after commit of batch {batch_id}")
        # after the decision, never before it (a GC pass must not push this batch's
        # txn past its deadline): the deployment's background work, which a
        # Spark-only deployment has no other process for
        coord.sweep_if_due(self.opts.retention_ms)
        log.info("pulsar-txn sink %s batch %d: committed %s, %d rows from %d writers on %d "
                 "segments", sink_id, batch_id, txn_id, sum(m.rows for m in msgs),
                 len(winners), len(segments))

    def abort(self, messages, batch_id: int) -> None:
        from pulsar_txn.coordinator import TransactionCoordinator

        txns = {m.txn_id for m in messages if m is not None and m.txn_id
                and not m.already_committed}
        if not txns:
            return  # tasks that wrote but reported nothing are left to the timeout
        store = RESOURCES.store(self.opts.metastore_url, self.opts.namespace)  # kept
        coord = TransactionCoordinator(store, materialize_inline=True)
        for t in txns:
            try:
                coord.abort(TxnId.parse(t))
            except InvalidTxnTransition:
                pass  # Spark may call abort after a successful commit: that changes nothing


class BatchSinkWriter(StreamSinkWriter):
    """``df.write.format("pulsar-txn")``: one transaction for the whole job."""

    def __init__(self, options, schema) -> None:
        super().__init__(options, schema)
        from pulsar_txn.coordinator import TransactionCoordinator
        from pulsar_txn.metastore import open_store

        store = open_store(self.opts.metastore_url, namespace=self.opts.namespace)
        try:
            owner = sink_owner(self.opts.sink_id or "batch", f"job-{uuid.uuid4().hex}", 0)
            self.txn_id = str(TransactionCoordinator(store, materialize_inline=True)
                              .new_transaction(self.opts.timeout_ms, owner=owner).txn_id)
            self.sink_id = owner
        finally:
            store.close()

    def write(self, batches) -> PulsarTxnCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        writer = f"t{ctx.partitionId()}.a{ctx.attemptNumber()}.{uuid.uuid4().hex[:10]}"
        store = RESOURCES.store(self.opts.metastore_url, self.opts.namespace)  # kept
        segments, rows = write_rows(self.opts, self.roles, batches,
                                    TxnId.parse(self.txn_id), writer, store)
        return PulsarTxnCommitMessage(self.sink_id, self.txn_id, writer, tuple(segments),
                                      rows)

    def commit_job(self, messages) -> None:
        from pulsar_txn.coordinator import TransactionCoordinator
        from pulsar_txn.metastore import open_store

        msgs = [m for m in messages if m is not None]
        store = open_store(self.opts.metastore_url, namespace=self.opts.namespace)
        try:
            TransactionCoordinator(store, materialize_inline=True).commit(
                TxnId.parse(self.txn_id), sorted({m.writer for m in msgs}),
                sorted({s for m in msgs for s in m.segments}))
        finally:
            store.close()

    def abort_job(self, messages) -> None:
        self.abort([PulsarTxnCommitMessage(self.sink_id, self.txn_id, "", (), 0)], -1)
