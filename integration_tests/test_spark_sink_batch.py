"""Batch ``df.write.format("pulsar-txn")`` and the sink's input checks, in-process Spark."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import values

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
    got = Counter(values(client.create_reader(a)) + values(client.create_reader(b)))
    assert got == Counter(f"v{i}".encode() for i in range(40))
    opened = client.store.open_txns()
    assert opened == []  # the job's transaction ended


def test_sink_rejects_unknown_column_naming_it(spark, broker, redis_server, namespace):
    df = spark.createDataFrame([("x", 1)], "value string, partition int")
    with pytest.raises(Exception, match="column 'partition' is not accepted"):
        _writer(df, broker, redis_server, namespace, topic="t").mode("append").save()


def test_sink_rejects_wrong_type_and_missing_value(spark, broker, redis_server, namespace):
    df = spark.createDataFrame([(1,)], "value int")
    with pytest.raises(Exception, match="column 'value' has type int"):
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
