"""Batch ``df.write.format("pulsar-txn")`` and the sink's input checks, in-process Spark."""

from __future__ import annotations

from collections import Counter

import pytest

pytestmark = pytest.mark.spark


def _writer(df, broker, redis_server, namespace, **opts):
    w = (df.write.format("pulsar-txn").option("service.url", broker.service_url)
         .option("metastore.url", redis_server.url).option("metastore.namespace", namespace))
    for k, v in opts.items():
        w = w.option(k, v)
    return w


def test_batch_write_is_one_transaction_across_topics(spark, client, broker, redis_server,
                                                      namespace, topic_name):
    a, b = topic_name("ba"), topic_name("bb")
    rows = [(f"k{i}", f"v{i}".encode(), a if i % 2 else b, {"n": str(i)}) for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value binary, topic string, "
                                     "properties map<string,string>")
    _writer(df, broker, redis_server, namespace).mode("append").save()
    from pulsar_txn.client import read_all
    from pulsar_txn.records import TxnId
    from pulsar_txn.state import TxnState

    msgs = [m for t in (a, b) for m in read_all(client.create_reader(t), 400)]
    assert Counter(m.value for m in msgs) == Counter(f"v{i}".encode() for i in range(40))
    # one transaction across both topics (one CAS made all of it visible at once)
    txns = {m.txn_id for m in msgs}
    assert len(txns) == 1 and None not in txns, txns
    assert client.coordinator.get(TxnId.parse(txns.pop())).state is TxnState.COMMITTED
    opened = client.store.open_txns()
    assert opened == []  # the job's transaction ended


def test_the_sources_output_is_written_back_without_a_select(
        spark, client, broker, redis_server, namespace, topic_name):
    """Columns the sink does not use are ignored, as Kafka's sink does: a read's rows
    (segment, messageId, publishTime, txnId …) go straight to another topic; the
    ``topic`` option wins over the rows' ``topic`` column."""
    src, dst = topic_name("wb-src"), topic_name("wb-dst")
    rows = [(f"k{i}", f"v{i}".encode(), {"n": str(i)}) for i in range(20)]
    _writer(spark.createDataFrame(rows, "key string, value binary, properties "
                                        "map<string,string>"),
            broker, redis_server, namespace, topic=src).mode("append").save()
    read = (spark.read.format("pulsar-txn").option("service.url", broker.service_url)
            .option("metastore.url", redis_server.url).option("metastore.namespace", namespace)
            .option("topic", src).load())
    assert {"segment", "messageId", "txnId", "publishTime"} <= set(read.columns)
    _writer(read, broker, redis_server, namespace, topic=dst).mode("append").save()
    from pulsar_txn.client import read_all

    got = list(read_all(client.create_reader(dst), 1500))
    assert sorted((m.key, m.value, m.properties.get("n")) for m in got) == sorted(
        (k, v, p["n"]) for k, v, p in rows)
    assert len(list(read_all(client.create_reader(src), 1500))) == 20  # none routed back


def test_sink_rejects_wrong_type_and_missing_value(spark, broker, redis_server, namespace):
    df = spark.createDataFrame([([1],)], "value array<int>")
    with pytest.raises(Exception, match="column 'value' has type array<int>"):
        _writer(df, broker, redis_server, namespace, topic="t").mode("append").save()
    # a primitive is written under the topic's schema (issue 29): a topic without one
    # is refused, named, with what to do (pulsar-client cannot register an INT32 schema)
    df = spark.createDataFrame([(1,)], "value int")
    with pytest.raises(Exception, match=r"column 'value' is int32 and topic .* has no schema"):
        _writer(df, broker, redis_server, namespace, topic="t").mode("append").save()
    df = spark.createDataFrame([("k",)], "key string")
    with pytest.raises(Exception, match="needs a 'value' column"):
        _writer(df, broker, redis_server, namespace, topic="t").mode("append").save()


def test_sink_rejects_bad_options_naming_them(spark, broker, redis_server, namespace):
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match="unknown option.*colour"):
        _writer(df, broker, redis_server, namespace, topic="t", colour="red").mode(
            "append").save()
    with pytest.raises(Exception, match="'transaction.timeout.ms' must be an integer"):
        _writer(df, broker, redis_server, namespace, topic="t").option(
            "transaction.timeout.ms", "soon").mode("append").save()
    with pytest.raises(Exception, match="pulsar.producer.nonsense"):
        _writer(df, broker, redis_server, namespace, topic="t").option(
            "pulsar.producer.nonsense", "1").mode("append").save()
    with pytest.raises(Exception, match="set option 'topic'"):
        _writer(df, broker, redis_server, namespace).mode("append").save()


def test_a_named_streaming_query_writes_through_the_sink(spark, client, broker, redis_server,
                                                         namespace, topic_name, tmp_path):
    """``writeStream.queryName(…)`` hands ``queryName`` to the sink's options (Spark
    keeps it there): Spark's own, accepted like ``checkpointLocation`` (it was refused
    as an unknown option)."""
    from spark_helpers import write_inputs

    from pulsar_txn.client import read_all

    topic, expected = topic_name("named"), write_inputs(tmp_path / "in", 1, 5)
    q = (spark.readStream.schema("id long, payload string").json(str(tmp_path / "in"))
         .selectExpr("payload AS value").writeStream.format("pulsar-txn")
         .queryName(f"named_{tmp_path.name}")
         .option("service.url", broker.service_url).option("metastore.url", redis_server.url)
         .option("metastore.namespace", namespace).option("topic", topic)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    assert Counter(m.value for m in read_all(client.create_reader(topic), 1500)) == expected
