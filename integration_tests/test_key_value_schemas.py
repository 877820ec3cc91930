"""KEY_VALUE schemas on the reference broker (issue 29), without Java: the schema is
uploaded through the REST admin API as ``pulsar-admin schemas upload`` does, the
payloads written INLINE under pulsar-txn transactions by the client API, and read back
by the registry lookup (its REST half) and the Spark source as typed key and value
columns, READ_COMMITTED. The Java producer's and consumer's side is
test_schema_java.py (slow). pulsar-lite keeps no registry: skipped there."""

from __future__ import annotations

import json
import uuid

import pulsar
import pyarrow as pa
import pytest
from registry_helpers import ORDER, upload_key_value
from spark_helpers import source_df

from pulsar_txn.schema_key_value import decode_key_values, encode_key_values
from pulsar_txn.schemas import Kind, SchemaError, TopicSchema, admin_get, lookup


def _write_committed_and_aborted(client, topic: str, schema: TopicSchema) -> None:
    def payloads(ids):
        keys = pa.array([f"k{i}" for i in ids])
        values = pa.array([{"id": i, "name": f"n{i}"} for i in ids],
                          schema.arrow_type(topic))
        return encode_key_values(keys, values, schema, topic)

    producer = client.create_producer(topic)
    with client.transaction() as txn:
        for p in payloads([0, 1]):
            producer.send(p, txn=txn)
    aborted = client.new_transaction()
    for p in payloads([100]):
        producer.send(p, txn=aborted)
    aborted.abort()
    with client.transaction() as txn:
        for p in payloads([2]):
            producer.send(p, txn=txn)
    producer.flush()


def test_a_key_value_schema_is_looked_up_whole_and_its_payloads_read_committed(
        client, broker, topic_name):
    if broker.kind == "lite":
        pytest.skip("pulsar-lite keeps no schema registry")
    topic = topic_name("kv")
    upload_key_value(broker, topic)
    native = pulsar.Client(broker.service_url)
    try:
        with pytest.raises(SchemaError, match=r"KEY_VALUE.*option 'admin.url'"):
            lookup(native._client, topic)
        schema = lookup(native._client, topic, admin=admin_get(broker.admin_url))
        assert schema.kind is Kind.KEY_VALUE and not schema.separated
        assert schema.key == TopicSchema(Kind.STRING)
        assert json.loads(schema.value.definition) == ORDER
        assert lookup(native._client, topic, 0, admin=admin_get(broker.admin_url)) == schema
        with pytest.raises(SchemaError, match=r"no schema version 7"):
            lookup(native._client, topic, 7, admin=admin_get(broker.admin_url))
    finally:
        native.close()
    _write_committed_and_aborted(client, topic, schema)
    reader = client.create_reader(topic)
    got = [reader.read_next(timeout_millis=10_000) for _ in range(3)]
    keys, values = decode_key_values([m.data() for m in got], [None] * 3, [-1] * 3, schema,
                                     {}.__getitem__, topic, ["-"] * 3)
    assert keys.to_pylist() == ["k0", "k1", "k2"]
    assert [v["id"] for v in values.to_pylist()] == [0, 1, 2]
    reader.close()


@pytest.mark.spark
@pytest.mark.slow  # the default stage's 25 minutes are spent (CI of eda45be: 25:01)
def test_spark_reads_a_key_value_topic_as_typed_key_and_value_read_committed(
        spark, client, broker, redis_server, namespace, topic_name):
    if broker.kind == "lite":
        pytest.skip("pulsar-lite keeps no schema registry")
    topic = topic_name("kv-spark")
    upload_key_value(broker, topic)
    schema = TopicSchema(Kind.KEY_VALUE, "", TopicSchema(Kind.STRING),
                         TopicSchema(Kind.AVRO, json.dumps(ORDER)))  # as uploaded
    _write_committed_and_aborted(client, topic, schema)
    df = source_df(spark, broker, redis_server, namespace, stream=False, topic=topic,
                   **{"admin.url": broker.admin_url})
    assert df.schema["key"].dataType.simpleString() == "string"
    assert sorted(tuple(r) for r in df.select("key", "value.id", "value.name").collect()) == [
        (f"k{i}", i, f"n{i}") for i in range(3)]


@pytest.mark.spark
@pytest.mark.slow
def test_a_key_value_topic_of_string_and_bytes_is_never_read_as_a_schemaless_one(
        spark, client, broker, redis_server, namespace, topic_name):
    """KEY_VALUE<STRING, BYTES> has the columns of a topic without a schema (key string,
    value binary): the reader must still split each payload, not hand it out whole."""
    if broker.kind == "lite":
        pytest.skip("pulsar-lite keeps no schema registry")
    topic = topic_name("kv-bytes")
    upload_key_value(broker, topic, value="BYTES")
    producer = client.create_producer(topic)
    with client.transaction() as txn:
        for i in range(2):
            producer.send(b"\x00\x00\x00\x02k%d\x00\x00\x00\x03v-%d" % (i, i), txn=txn)
    df = source_df(spark, broker, redis_server, namespace, stream=False, topic=topic,
                   **{"admin.url": broker.admin_url})
    assert [f.dataType.simpleString() for f in df.schema.fields[:2]] == ["string", "binary"]
    assert sorted((r.key, bytes(r.value)) for r in df.collect()) == [
        ("k0", b"v-0"), ("k1", b"v-1")]
    name = f"kv_bytes_{uuid.uuid4().hex[:8]}"  # the streaming reader is planned the same way
    q = (source_df(spark, broker, redis_server, namespace, topic=topic,
                   startingOffsets="earliest", **{"admin.url": broker.admin_url})
         .writeStream.format("memory").queryName(name).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert sorted((r.key, bytes(r.value)) for r in spark.sql(f"SELECT * FROM {name}").collect()
                  ) == [("k0", b"v-0"), ("k1", b"v-1")]


@pytest.mark.spark
@pytest.mark.slow
def test_string_key_and_value_columns_are_written_inline_to_a_key_value_topic(
        spark, client, broker, redis_server, namespace, topic_name, plain_pulsar):
    """String columns keep the binary path's speed (no lookup) unless 'admin.url' is
    set; with it a KEY_VALUE<STRING, STRING> topic gets Java's INLINE layout."""
    if broker.kind == "lite":
        pytest.skip("pulsar-lite keeps no schema registry")
    topic = topic_name("kv-strings")
    upload_key_value(broker, topic, key="STRING", value="STRING")
    rows = spark.createDataFrame([("k1", "v1"), ("k2", "")], "key string, value string")
    (rows.write.format("pulsar-txn").option("service.url", broker.service_url)
     .option("metastore.url", redis_server.url).option("metastore.namespace", namespace)
     .option("admin.url", broker.admin_url).option("topic", topic).mode("append").save())
    reader = plain_pulsar.create_reader(topic, pulsar.MessageId.earliest)
    wire = sorted(reader.read_next(10_000).data() for _ in range(2))
    reader.close()
    assert wire == [b"\x00\x00\x00\x02k1\x00\x00\x00\x02v1", b"\x00\x00\x00\x02k2\x00\x00\x00\x00"]
    back = source_df(spark, broker, redis_server, namespace, stream=False, topic=topic,
                     **{"admin.url": broker.admin_url})
    assert sorted((r.key, r.value) for r in back.collect()) == [("k1", "v1"), ("k2", "")]
