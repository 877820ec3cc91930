"""Errors a user can act on: each connection failure names the option and the address
(and never a password); bad topics are refused before anything is written."""

from __future__ import annotations

import pytest

from pulsar_txn.errors import BrokerUnavailable, ConfigError, MetastoreUnavailable
from pulsar_txn.harness.ports import free_port


def _nowhere() -> str:
    return f"pulsar://127.0.0.1:{free_port()}"  # nothing listens there


def test_unreachable_broker_names_service_url_and_the_address(redis_server, namespace):
    from pulsar_txn.client import PulsarTxnClient

    url = _nowhere()
    client = PulsarTxnClient(url, redis_server.url, namespace=namespace, sweeper=False,
                             operation_timeout_seconds=2)
    try:
        for attempt in (lambda: client.create_producer("t"),
                        lambda: client.create_reader("t"),
                        lambda: client.subscribe("t", "sub")):
            with pytest.raises(BrokerUnavailable) as err:
                attempt()
            assert "'service.url'" in str(err.value) and url in str(err.value)
    finally:
        client.close()


def test_unreachable_metastore_names_metastore_url_and_the_address_not_the_password(broker):
    from pulsar_txn.client import PulsarTxnClient

    port = free_port()
    with pytest.raises(MetastoreUnavailable) as err:
        PulsarTxnClient(broker.service_url, f"redis://:hunter2-secret@127.0.0.1:{port}",
                        sweeper=False)
    msg = str(err.value)
    assert "'metastore.url'" in msg and f"127.0.0.1:{port}" in msg
    assert "hunter2-secret" not in msg


def test_invalid_topic_is_refused_before_anything_is_written(client):
    with pytest.raises(ConfigError, match="without spaces"):
        client.create_producer("has space")


@pytest.mark.spark
def test_spark_source_and_sink_name_an_unreachable_broker(spark, redis_server, namespace,
                                                          tmp_path):
    url = _nowhere()
    common = {"service.url": url, "metastore.url": redis_server.url,
              "metastore.namespace": namespace, "topic": "t",
              "pulsar.client.operation_timeout_seconds": "2"}
    with pytest.raises(Exception) as err:
        spark.read.format("pulsar-txn").options(**common).load().collect()
    assert "'service.url'" in str(err.value) and url in str(err.value)
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception) as err:
        df.write.format("pulsar-txn").options(**common).mode("append").save()
    assert "'service.url'" in str(err.value) and url in str(err.value)


@pytest.mark.spark
def test_spark_options_are_named_as_documented(spark, broker, redis_server, namespace):
    with pytest.raises(Exception) as err:
        (spark.read.format("pulsar-txn").option("service.url", broker.service_url)
         .option("metastore.url", redis_server.url).option("topic", "t")
         .option("startingOffsets", "yesterday").load().collect())
    assert "'startingOffsets'" in str(err.value)


def test_metastore_url_namespace_parameter_is_honoured(broker, redis_server, topic_name):
    """`?namespace=` in metastore.url selects the deployment (it once crashed with a
    TypeError); it wins over the namespace argument."""
    from pulsar_txn.client import PulsarTxnClient, read_all

    url = f"{redis_server.url}?namespace=nsparam"
    client = PulsarTxnClient(broker.service_url, url, namespace="ignored", sweeper=False)
    try:
        assert client.store.keys.ns == "nsparam"
        t = topic_name()
        with client.transaction() as txn:
            client.create_producer(t).send(b"x", txn=txn)
        assert [m.value for m in read_all(client.create_reader(t), 500)] == [b"x"]
    finally:
        client.close()
