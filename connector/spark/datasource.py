"""What Spark loads for ``format("pulsar-txn")``; its class docstring is the user manual."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from pulsar_txn.errors import ConfigError
from pulsar_txn.spark.logs import configure_logging
from pulsar_txn.spark.options import SourceOptions

from .partition_reader import SCHEMA
from .sink_commit import PulsarTxnBatchWriter, PulsarTxnStreamWriter
from .source_reader import PulsarTxnBatchReader, PulsarTxnStreamReader
from .value_schema import plan_value_schema, spark_schema

__all__ = ["PulsarTxnDataSource"]


class PulsarTxnDataSource(DataSource):
    """Exactly-once, READ_COMMITTED Spark data source ``pulsar-txn`` for Apache Pulsar.

    The sink makes each micro-batch exactly one transaction (a batch ``df.write`` job:
    one transaction); the source returns only rows of committed transactions, and
    replaying an offset range returns the same rows. Installed with the package, the
    format registers itself; otherwise call ``pulsar_txn.spark.register(spark)``.
    Option names are case-insensitive; an unknown option, a malformed value or an
    unusable input column fails the query before anything is written, naming it.
    Every option below is also in docs/configuration.md (a test keeps the two equal).

    Examples
    --------
    Stream into a topic (one transaction per micro-batch)::

        (df.selectExpr("CAST(id AS STRING) AS key", "CAST(v AS BINARY) AS value")
           .writeStream.format("pulsar-txn")
           .option("service.url", "pulsar://127.0.0.1:6650")
           .option("metastore.url", "redis://127.0.0.1:6379")
           .option("topic", "persistent://public/default/orders")
           .option("checkpointLocation", "/data/ckpt/orders")
           .start())

    Stream committed rows out of topics::

        events = (spark.readStream.format("pulsar-txn")
                  .option("service.url", "pulsar://127.0.0.1:6650")
                  .option("metastore.url", "redis://127.0.0.1:6379")
                  .option("topics", "orders,topic://public/default/clicks")
                  .option("startingOffsets", "earliest")
                  .option("maxRecordsPerTrigger", 10000)
                  .load())

    Write a batch job (the whole job is one transaction)::

        (df.write.format("pulsar-txn").option("service.url", url)
           .option("metastore.url", metastore).option("topic", "orders").save())

    Read a snapshot (every segment up to what is committed now)::

        rows = (spark.read.format("pulsar-txn").option("service.url", url)
                .option("metastore.url", metastore).option("topic", "orders")
                .option("startingOffsets", "earliest").load())

    Sink options
    ------------
    service.url : required
        ``pulsar://host:port`` or ``pulsar+ssl://…`` of the broker.
    metastore.url : required
        ``redis://[user:password@]host:port/db``, ``rediss://…`` (TLS:
        ``?ssl_ca_certs=/ca.pem``, client certificates ``&ssl_certfile=…&ssl_keyfile=…``)
        or ``unix://…``; a Redis Cluster as ``redis+cluster://host:port[,host:port…]``
        (``rediss+cluster://`` with TLS); ``?durability=strict`` (default), ``waitaof``
        or ``relaxed``;
        ``?namespace=`` overrides ``metastore.namespace``. The password is never shown.
    metastore.namespace : ``ptxn``
        Key prefix of the deployment; its readers must use the same.
    topic : —
        Target topic (``persistent://…``, a short name, or a scalable ``topic://…``
        whose rows are routed by key); without it each row's ``topic`` column.
    transaction.timeout.ms : ``60000``
        Deadline of a batch's transaction; must cover the longest batch, retries and
        scheduling delays included.
    sink.id : ``query-<Spark query id>``
        The idempotence key: one transaction per (sink id, batchId). The default follows
        the query's identity, which the checkpoint keeps across restarts; a new
        checkpoint (even at the same path) is a new query and a new id. An explicit id
        belongs to the first query that writes it; another query using it is refused.
    sink.id.rebind : ``false``
        ``true`` moves an explicit ``sink.id`` that belongs to another query to this one
        and starts its progress over; the old query's later commits are fenced,
        and it can never bind the id again (docs/spark.md).
    pulsar.producer.<name> : batching on, 1000 msgs, 5 ms
        Any ``pulsar.Client.create_producer`` keyword, e.g.
        ``pulsar.producer.compression_type=LZ4`` (enum settings by member name).
    pulsar.client.<name> : —
        Any ``pulsar.Client`` keyword, e.g. ``pulsar.client.operation_timeout_seconds``;
        the Java client's TLS names (``pulsar.client.tlsTrustCertsFilePath``, …) too.
    pulsar.client.authPluginClassName : —
        Pulsar authentication as pulsar-spark names it: ``token``, ``tls``, ``oauth2``,
        or the Java class name (``org.apache.pulsar.client.impl.auth.AuthenticationToken``…).
    pulsar.client.authParams : —
        Its parameters, a secret never shown: ``token:<jwt>``, ``file:///path`` (must
        exist on the driver and every executor) or ``env:VAR``; TLS
        ``tlsCertFile:<path>,tlsKeyFile:<path>``; OAuth2 the JSON of
        ``AuthenticationOauth2``.
    transactional : ``true``
        ``false`` writes plain appends without transactions (at-least-once): the
        benchmark baseline.
    schemaLookupTimeoutMs : ``2000``
        With a typed ``value`` column (a struct or primitive, written under a Pulsar
        schema): how long the topic's registry lookup may take; a broker silent that
        long keeps no registry (pulsar-lite): the schema is derived from the DataFrame.
    transaction.retention.ms : ``3600000``
        The query's driver collects finalized transactions older than this (and aborts
        expired ones, finishes cleanups a dead committer left), so a Spark-only
        deployment needs no other sweeper. Replays stay correct after this GC.
    admin.url : —
        The broker's REST admin URL (``http://host:8080``), to read a ``KEY_VALUE``
        topic's schema when ``key`` and ``value`` columns are written to it (typed ones
        need it; with it string and binary ones are looked up too, without it they are
        written as given).
    sink.fault : —
        Test seam for crash injection (``pulsar_txn.spark.faults``); never set in
        production.
    checkpointLocation, path, queryName : —
        Spark's own; ``path`` is an alias of ``topic`` for ``save(path)``; ``queryName``
        is what ``writeStream.queryName(…)`` passes.

    Input columns: ``value`` (binary or string, required; or typed), ``key`` (string or
    binary; typed for a ``KEY_VALUE`` topic),
    ``properties`` (map<string,string>), ``eventTime`` (timestamp), ``topic`` (string).

    Source options
    --------------
    service.url, metastore.url, metastore.namespace : as for the sink
        The same broker and metastore (and namespace) the writers used.
    topic / topics / topicsPattern : one required
        One topic, a comma list, or a regular expression matched in full against topic
        names at every trigger (new matching topics are read from their earliest
        entry). ``persistent://…`` or scalable ``topic://tenant/ns/name``; a pattern over
        ``persistent://`` topics needs ``admin.url``, one over ``topic://`` uses the
        metastore.
    admin.url : —
        The broker's REST admin URL (``http://host:8080``), to list topics for
        ``topicsPattern`` and to read a ``KEY_VALUE`` topic's schema (typed ``key`` and
        ``value`` columns); pulsar-lite has none.
    subscription : —
        Streaming only: after Spark commits a micro-batch, this Pulsar subscription is
        moved (cumulative ack, Failover) to the batch's end on every segment, so backlog
        tools see the query's progress; it never moves for a batch that failed.
    startingOffsets : ``latest`` (stream), ``earliest`` (batch)
        ``earliest``, ``latest``, or JSON ``{"<topic>": "<ledgerId>:<entryId>[:<batch>]"}``:
        the last message already read (a partitioned topic: one per partition).
    endingOffsets : ``latest`` (the gate now)
        Batch only; the same JSON form, inclusive.
    minPartitions : one per core
        Split the segments' ranges into up to N partitions in all (by entry id,
        within a ledger: a range across ledgers, or of N entries or fewer, stays
        whole). Unset: one per core the driver process may use (every core in
        ``local[*]``; on a cluster set it to the executors' cores), never a piece
        under 16 entries, nor under 512 in a streaming micro-batch (a usual
        trigger's worth stays one task per segment; a backlog is split).
    maxRecordsPerTrigger : —
        At most N messages per micro-batch (over all topics, aborted entries included).
    maxBytesPerTrigger : —
        At most N payload bytes per micro-batch (at least one message; combines with
        ``maxRecordsPerTrigger``).
    minRecordsPerTrigger : —
        Wait for N messages, but at most ``maxTriggerDelay``.
    maxTriggerDelay : ``15m``
        ``500ms``, ``5s``, ``1m`` …
    startingTimestamp : —
        Epoch ms: start at the first message published at or after it (a scan;
        exclusive with ``startingOffsets``).
    valueSchema : ``auto``
        ``auto``: a topic with a schema in the broker's registry gives a typed ``value``
        (Avro and JSON: a struct; primitives: their Spark type), fixed when the query is
        defined; each message is decoded with the version it was written with, resolved
        into that one. A topic without a schema keeps ``value binary``. ``bytes``:
        always ``value binary``.
    schemaLookupTimeoutMs : ``2000``
        With ``valueSchema=auto``: how long the registry lookup may take; a broker
        silent that long keeps no registry (pulsar-lite): ``value binary``, warned.
    read.foreignDeployments : ``fail``
        Transactional entries of another deployment (another ``metastore.namespace``
        or ``metastore.url``, or this one before a metastore reset) are never
        returned. ``fail`` stops the query at the first one, before its offsets pass
        it, naming the deployment ids seen; ``skip`` passes them over (e.g. after a
        deliberate reset), counted in the progress (``foreignEntriesSkipped``) and the
        metric ``ptxn_foreign_entries_skipped_total``. A namespace that does not exist
        always fails the query: a source never creates one.
    failOnDataLoss : ``true``
        A planned range whose entries are gone (deleted topic or ledgers) fails the
        query; ``false`` skips it with a warning. A broker that is down is never loss.
    dataTimeoutMs : ``30000``
        How long a planned entry may take to arrive before it counts as lost.
    transaction.retention.ms : ``3600000``
        As for the sink: the query's driver sweeps, once a second at most.
    pulsar.client.<name> : —
        Any ``pulsar.Client`` keyword.
    pulsar.client.authPluginClassName : —
        As for the sink.
    pulsar.client.authParams : —
        As for the sink (a secret, never shown).
    pulsar.reader.<name> : ``receiver_queue_size`` 2000
        ``receiver_queue_size``, ``reader_name``, ``subscription_role_prefix`` of the
        data readers (compacted reads are refused: they would break stable replay).
    checkpointLocation, path, queryName : —
        Spark's own; ``path`` is an alias of ``topic`` for ``load(path)``.

    ``Trigger.AvailableNow`` is supported (the target is the gate when the query
    starts). Output schema: ``key string, value binary, topic string, segment string,
    messageId string, publishTime timestamp, eventTime timestamp,
    properties map<string,string>, txnId string``. Offsets in the checkpoint look like
    ``{"persistent://public/default/orders": "12:345:2147483647"}`` (batch 2147483647 =
    the whole entry); a scalable topic has one position per segment, and a segment made
    by a split or merge joins after its parents were read to their end, so for every
    key the parents' rows come in earlier micro-batches. Each trigger's progress
    (``latestOffset`` of the source in ``query.lastProgress``) reports ``latest``,
    ``entriesBehindLatest``, ``openTxnsHoldingGate`` and ``segmentsRead``.
    """

    @classmethod
    def name(cls) -> str:
        return "pulsar-txn"

    def schema(self) -> str:
        # Spark asks for the schema when a read is defined (load()), before any reader
        # exists: a bad option fails there as the error's last line, naming it. From a
        # streamReader constructor it would end under pyspark's own runner error.
        # Whether this is a batch or a streaming read is not known yet: an option only
        # one of them refuses (endingOffsets, subscription) fails when the reader is made.
        try:
            opts = SourceOptions.from_options(self.options)
        except ConfigError:
            opts = SourceOptions.from_options(self.options, batch=True)
        # the value's type is fixed here, once: the topic's registered schema (issue 29)
        planned = plan_value_schema(opts)
        return SCHEMA if planned.is_bytes else spark_schema(planned, opts.topics[0])

    def streamReader(self, schema):
        configure_logging()
        return PulsarTxnStreamReader(self.options, schema)

    def reader(self, schema):
        configure_logging()
        return PulsarTxnBatchReader(self.options, schema)

    def streamWriter(self, schema, overwrite: bool):
        configure_logging()
        return PulsarTxnStreamWriter(self.options, schema)

    def writer(self, schema, overwrite: bool):
        configure_logging()
        return PulsarTxnBatchWriter(self.options, schema)
