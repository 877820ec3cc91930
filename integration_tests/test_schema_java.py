"""Typed Java clients on both ends of Spark (issue 29): a Java producer with
``Schema.AVRO(Order.class)`` writes records the Spark source returns as typed columns,
and the sink's struct rows are read back by a Java consumer with the same schema.
The Java side is the peer benchmark's v4 module (benchmarks/peer, built by Maven).
Reference broker only: pulsar-lite keeps no schema registry.

The Java producer also writes *in pulsar-txn transactions*: this project has no Java
client, so the test plays the part a Java participant's library would (the protocol of
docs/durability.md): it opens the transaction, registers the Java writer on the segment
before the first append, hands the writer the append properties, records the first
position the producer reports, and ends the transaction with the one CAS."""

from __future__ import annotations

import subprocess

import pytest
from java_peer import java_cmd, peer_classpath
from spark_helpers import source_df

from pulsar_txn.records import Position, txn_properties
from pulsar_txn.topics import normalize_topic

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def java_peer():
    peer_classpath()

    def run(*args: str) -> list[str]:
        done = subprocess.run(java_cmd("SchemaPeer", *args),
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.splitlines()
    return run


def test_java_avro_records_read_typed_and_the_sinks_rows_read_by_a_java_consumer(
        java_peer, spark, client, broker, redis_server, namespace, topic_name):
    if broker.kind == "lite":
        pytest.skip("pulsar-lite keeps no schema registry")
    topic = topic_name("java-avro")
    del client  # it made the test's namespace (a reader never makes one)
    assert java_peer("produce", broker.service_url, topic, "3") == ["produced 3"]
    df = source_df(spark, broker, redis_server, namespace, stream=False, topic=topic)
    assert sorted(tuple(r) for r in df.select("value.id", "value.name").collect()) == [
        (0, "java-0"), (1, "java-1"), (2, "java-2")]
    rows = spark.createDataFrame([(10, "spark-10"), (11, None)], "id int, name string")
    (rows.selectExpr("struct(id, name) AS value").write.format("pulsar-txn")
     .option("service.url", broker.service_url).option("metastore.url", redis_server.url)
     .option("metastore.namespace", namespace).option("topic", topic).mode("append").save())
    got = java_peer("consume", broker.service_url, topic, "5")
    assert sorted(got) == sorted(["0,java-0", "1,java-1", "2,java-2", "10,spark-10",
                                  "11,null"])


def test_java_avro_records_written_in_transactions_read_committed_and_typed(
        java_peer, spark, client, broker, redis_server, namespace, topic_name):
    if broker.kind == "lite":
        pytest.skip("pulsar-lite keeps no schema registry")
    topic = topic_name("java-avro-txn")
    segment, writer = normalize_topic(topic), "java-orders-1"
    store, tc = client.store, client.coordinator

    def java_txn(first: int, n: int, commit: bool) -> None:
        txn = tc.new_transaction().txn_id
        wire = store.register_write(txn, segment, writer)  # before the first append
        props = txn_properties(txn, writer, store.deployment, wire)
        out = java_peer("produce-props", broker.service_url, topic, str(n), str(first),
                        *(f"{k}={v}" for k, v in props.items()))
        ledger, entry = out[-1].removeprefix("first ").split(":")
        store.record_write(txn, segment, writer, Position(int(ledger), int(entry)), None)
        if commit:
            tc.commit(txn, [writer], [segment], made=(1, 0))
        else:
            tc.abort(txn, [segment])

    java_txn(0, 3, commit=True)
    java_txn(100, 2, commit=False)  # aborted: its records are never returned
    java_txn(3, 2, commit=True)
    df = source_df(spark, broker, redis_server, namespace, stream=False, topic=topic)
    assert df.schema["value"].dataType.simpleString() == "struct<id:int,name:string>"
    assert sorted(tuple(r) for r in df.select("value.id", "value.name").collect()) == [
        (i, f"java-{i}") for i in range(5)]


def _kv_source(spark, broker, redis_server, namespace, topic, **opts):
    return source_df(spark, broker, redis_server, namespace, stream=False, topic=topic,
                     **opts)


@pytest.mark.parametrize("encoding", ["INLINE", "SEPARATED"])
def test_java_key_value_records_read_as_typed_key_and_value_columns(
        java_peer, spark, client, broker, redis_server, namespace, topic_name, encoding):
    if broker.kind == "lite":
        pytest.skip("pulsar-lite keeps no schema registry")
    topic = topic_name(f"java-kv-{encoding.lower()}")
    del client  # it made the test's namespace (a reader never makes one)
    assert java_peer("produce-kv", broker.service_url, topic, "3", encoding) == ["produced 3"]
    with pytest.raises(Exception, match=r"KEY_VALUE.*option 'admin.url'"):
        _kv_source(spark, broker, redis_server, namespace, topic).collect()
    df = _kv_source(spark, broker, redis_server, namespace, topic,
                    **{"admin.url": broker.admin_url})
    assert df.schema["key"].dataType.simpleString() == "int"
    assert df.schema["value"].dataType.simpleString() == "struct<id:int,name:string>"
    assert sorted(tuple(r) for r in df.select("key", "value.id", "value.name").collect()) == [
        (i, i, f"java-{i}") for i in range(3)]


def test_key_value_rows_round_trip_source_to_sink_to_java_and_back(
        java_peer, spark, client, broker, redis_server, namespace, topic_name):
    if broker.kind == "lite":
        pytest.skip("pulsar-lite keeps no schema registry")
    src, out, sep = (topic_name(f"kv-{n}") for n in ("src", "out", "sep"))
    del client
    admin = {"admin.url": broker.admin_url}
    java_peer("produce-kv", broker.service_url, src, "3", "INLINE")
    java_peer("produce-kv", broker.service_url, out, "0", "INLINE")  # registers the schema
    java_peer("produce-kv", broker.service_url, sep, "0", "SEPARATED")
    rows = _kv_source(spark, broker, redis_server, namespace, src, **admin).select(
        "key", "value")

    def write(df, topic):
        (df.write.format("pulsar-txn").option("service.url", broker.service_url)
         .option("metastore.url", redis_server.url).option("metastore.namespace", namespace)
         .option("admin.url", broker.admin_url).option("topic", topic).mode("append").save())

    write(rows, out)
    assert sorted(java_peer("consume-kv", broker.service_url, out, "3", "INLINE")) == [
        f"{i},{i},java-{i}" for i in range(3)]
    back = _kv_source(spark, broker, redis_server, namespace, out, **admin)
    assert sorted(tuple(r) for r in back.select("key", "value.id", "value.name").collect()) == [
        (i, i, f"java-{i}") for i in range(3)]
    with pytest.raises(Exception, match=r"SEPARATED KEY_VALUE schema: the sink cannot write"):
        write(rows, sep)
    with pytest.raises(Exception, match=r"KEY_VALUE schema .*needs a 'key' column"):
        write(rows.select("value"), out)
