"""KEY_VALUE schemas on the reference broker (issue 29), without Java: the schema is
uploaded through the REST admin API as ``pulsar-admin schemas upload`` does, the
payloads written INLINE under pulsar-txn transactions by the client API, and read back
by the registry lookup (its REST half) and the Spark source as typed key and value
columns, READ_COMMITTED. The Java producer's and consumer's side is
test_schema_java.py (slow). pulsar-lite keeps no registry: skipped there."""

from __future__ import annotations

import json
import urllib.parse

import pulsar
import pyarrow as pa
import pytest
from spark_helpers import source_df

from pulsar_txn.admin import admin_request
from pulsar_txn.schema_key_value import decode_key_values, encode_key_values
from pulsar_txn.schemas import Kind, SchemaError, TopicSchema, admin_get, lookup

ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "int"}, {"name": "name", "type": ["null", "string"],
                                    "default": None}]}


def _upload_key_value(broker, topic: str, encoding: str = "INLINE") -> None:
    parts = topic.split("://", 1)[1].split("/")
    path = "/admin/v2/schemas/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)
    admin_request(broker.admin_url, "POST", path + "/schema", body={
        "type": "KEY_VALUE", "schema": json.dumps({"key": "", "value": ORDER}),
        "properties": {"key.schema.type": "STRING", "key.schema.name": "",
                       "key.schema.properties": "{}", "value.schema.type": "AVRO",
                       "value.schema.name": "", "value.schema.properties": "{}",
                       "kv.encoding.type": encoding}})


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
    _upload_key_value(broker, topic)
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
def test_spark_reads_a_key_value_topic_as_typed_key_and_value_read_committed(
        spark, client, broker, redis_server, namespace, topic_name):
    if broker.kind == "lite":
        pytest.skip("pulsar-lite keeps no schema registry")
    topic = topic_name("kv-spark")
    _upload_key_value(broker, topic)
    native = pulsar.Client(broker.service_url)
    try:
        schema = lookup(native._client, topic, admin=admin_get(broker.admin_url))
    finally:
        native.close()
    _write_committed_and_aborted(client, topic, schema)
    df = source_df(spark, broker, redis_server, namespace, stream=False, topic=topic,
                   **{"admin.url": broker.admin_url})
    assert df.schema["key"].dataType.simpleString() == "string"
    assert sorted(tuple(r) for r in df.select("key", "value.id", "value.name").collect()) == [
        (f"k{i}", i, f"n{i}") for i in range(3)]
