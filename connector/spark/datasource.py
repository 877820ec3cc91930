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
    Target topic; else each row's ``topic`` column.
transaction.timeout.ms : int, default 60000
    Deadline of each batch's transaction; must cover the longest batch.
sink.id : str, default ``query-<streaming query id>``
    The idempotence key: one transaction per (sink.id, batchId).
pulsar.producer.* / pulsar.client.* :
    Passed to pulsar-client's ``create_producer`` / ``Client`` (snake_case names).

Input columns: ``value`` (binary or string, required), ``key`` (string or binary),
``properties`` (map<string,string>), ``eventTime`` (timestamp), ``topic`` (string).

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
    DataSourceStreamArrowWriter,
)

from .sink import BatchSinkWriter, PulsarTxnCommitMessage, StreamSinkWriter

__all__ = ["PulsarTxnCommitMessage", "PulsarTxnDataSource"]


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
        return ("key string, value binary, topic string, segment string, messageId string, "
                "publishTime timestamp, eventTime timestamp, properties map<string,string>, "
                "txnId string")

    def streamWriter(self, schema, overwrite: bool):
        return PulsarTxnStreamWriter(self.options, schema)

    def writer(self, schema, overwrite: bool):
        return PulsarTxnBatchWriter(self.options, schema)
