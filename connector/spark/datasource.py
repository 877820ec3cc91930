"""The ``pulsar-txn`` Spark data source.

Name: ``pulsar-txn``

Sink options (case-insensitive)
-------------------------------
service.url : str, required
    ``pulsar://host:port`` of the broker.
metastore.url : str, required
    ``redis://[:password@]host:port/db`` or ``rediss://`` (TLS) of the metadata store.
metastore.namespace : str, default ``ptxn``
    Key prefix of the deployment (must match the readers').
topic : str
    Target topic (``persistent://…`` or a scalable ``topic://…``, whose rows are
    routed by key); else each row's ``topic`` column.
transaction.timeout.ms : int, default 60000
    Deadline of each batch's transaction; must cover the longest batch.
sink.id : str, default ``query-<Spark query id>``
    The idempotence key: one transaction per (sink.id, batchId). The default follows
    the query's identity, which the checkpoint keeps across restarts; a new checkpoint
    is a new query. An explicit id belongs to the first query that writes it.
sink.id.rebind : bool, default false
    Move an explicit ``sink.id`` of another query to this one, starting over.
pulsar.producer.* / pulsar.client.* :
    Passed to pulsar-client's ``create_producer`` / ``Client`` (snake_case names).

Input columns: ``value`` (binary or string, required), ``key`` (string or binary),
``properties`` (map<string,string>), ``eventTime`` (timestamp), ``topic`` (string).

Source options: see docs/configuration.md (``topic``/``topics``/``topicsPattern``,
``startingOffsets``, ``maxRecordsPerTrigger``, ``maxBytesPerTrigger``,
``subscription``, …).

Examples
--------
>>> from pulsar_txn.spark import register
>>> register(spark)  # not needed when the package is installed: auto-registered
>>> (df.writeStream.format("pulsar-txn")
...    .option("service.url", "pulsar://127.0.0.1:6650")
...    .option("metastore.url", "redis://127.0.0.1:6379")
...    .option("topic", "orders")
...    .option("checkpointLocation", "/tmp/ckpt")
...    .start())
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from .sink import BatchSinkWriter, PulsarTxnCommitMessage, StreamSinkWriter
from .source import (
    SCHEMA,
    BatchSource,
    SegmentPartition,
    StreamSource,
    read_partition,
)

__all__ = ["PulsarTxnCommitMessage", "PulsarTxnDataSource", "SegmentPartition"]


class PulsarTxnStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """READ_COMMITTED micro-batch reader; offsets are per-segment positions (JSON)."""

    def __init__(self, options) -> None:
        self._core = StreamSource(options)

    def initialOffset(self) -> dict:
        return self._core.initial_offset()

    def latestOffset(self, start: dict, limit) -> dict:
        return self._core.latest_offset(start, limit)

    def getDefaultReadLimit(self):
        return self._core.default_read_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._core.prepare_available_now()

    def reportLatestOffset(self) -> dict | None:
        return self._core.report_latest_offset()

    def partitions(self, start: dict, end: dict):
        return self._core.partitions(start, end)

    def read(self, partition):
        return read_partition(self._core.opts, partition)

    def commit(self, end: dict) -> None:
        self._core.commit(end)  # advances the optional 'subscription'; offsets are Spark's

    def stop(self) -> None:
        self._core.stop()


class PulsarTxnBatchReader(DataSourceReader):
    def __init__(self, options) -> None:
        self._core = BatchSource(options)

    def partitions(self):
        return self._core.partitions()

    def read(self, partition):
        return read_partition(self._core.opts, partition)


class PulsarTxnStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options, schema) -> None:
        self._core = StreamSinkWriter(options, schema)

    def write(self, iterator):
        return self._core.write(iterator)

    def commit(self, messages, batchId) -> None:
        self._core.commit(messages, batchId)

    def abort(self, messages, batchId) -> None:
        self._core.abort(messages, batchId)


class PulsarTxnBatchWriter(DataSourceArrowWriter):
    def __init__(self, options, schema) -> None:
        self._core = BatchSinkWriter(options, schema)

    def write(self, iterator):
        return self._core.write(iterator)

    def commit(self, messages) -> None:
        self._core.commit_job(messages)

    def abort(self, messages) -> None:
        self._core.abort_job(messages)


class PulsarTxnDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "pulsar-txn"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema):
        return PulsarTxnStreamReader(self.options)

    def reader(self, schema):
        return PulsarTxnBatchReader(self.options)

    def streamWriter(self, schema, overwrite: bool):
        return PulsarTxnStreamWriter(self.options, schema)

    def writer(self, schema, overwrite: bool):
        return PulsarTxnBatchWriter(self.options, schema)
