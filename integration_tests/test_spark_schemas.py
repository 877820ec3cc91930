"""Typed rows from Pulsar schemas in the Spark source (issue 29), on a real broker's
registry and a real Spark: a topic with an Avro, JSON or primitive schema reads as a
typed ``value``, READ_COMMITTED; each message is decoded with the version it was
written with and resolved into the one the query planned (a field added with a
default reads from old messages); a payload that does not decode fails the query,
named; ``valueSchema=bytes`` keeps the payloads. pulsar-lite keeps no registry: there
the source reads bytes after its bounded lookup (the last test)."""

from __future__ import annotations

import json

import pulsar
import pyarrow as pa
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Long, Record, String
from spark_helpers import source_df

from pulsar_txn.admin import admin_request
from pulsar_txn.schema_codec import encode_column
from pulsar_txn.schemas import Kind, TopicSchema

pytestmark = pytest.mark.spark


class Order(Record):
    id = Integer()
    name = String()


# the same record ("Order"), evolved: a field added with a default
OrderV2 = type("Order", (Record,), {"id": Integer(), "name": String(),
                                    "qty": Long(required=True, default=7, required_default=True)})


def _registry(broker):
    if broker.kind == "lite":
        pytest.skip("pulsar-lite keeps no schema registry (the lite test below covers it)")


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def test_an_avro_topic_reads_as_typed_columns_of_committed_records_only(
        spark, client, broker, redis_server, namespace, topic_name):
    _registry(broker)
    topic = topic_name("avro")
    p = client.create_producer(topic, schema=AvroSchema(Order))
    with client.transaction() as txn:
        p.send(Order(id=1, name="a"), txn=txn)
        p.send(Order(id=2, name="b"), txn=txn)
    aborted = client.new_transaction()
    p.send(Order(id=3, name="never"), txn=aborted)
    aborted.abort()
    p.send(Order(id=4, name=None))
    df = source_df(spark, broker, redis_server, namespace, stream=False, topic=topic)
    assert df.schema["value"].dataType.simpleString() == "struct<id:int,name:string>"
    assert _rows(df.select("value.id", "value.name")) == [(1, "a"), (2, "b"), (4, None)]
    raw = source_df(spark, broker, redis_server, namespace, stream=False, topic=topic,
                    valueSchema="bytes")
    assert raw.schema["value"].dataType.simpleString() == "binary"
    assert sorted(AvroSchema(Order).decode(bytes(r.value)).id for r in raw.collect()) == [
        1, 2, 4]


def test_old_and_new_messages_read_in_one_query_after_a_field_is_added(
        spark, client, broker, redis_server, namespace, topic_name, tmp_path):
    _registry(broker)
    topic = topic_name("evolve")
    with client.transaction() as txn:
        client.create_producer(topic, schema=AvroSchema(Order)).send(Order(id=1, name="old"),
                                                                     txn=txn)
    with client.transaction() as txn:
        client.create_producer(topic, schema=AvroSchema(OrderV2)).send(
            OrderV2(id=2, name="new", qty=3), txn=txn)
    df = source_df(spark, broker, redis_server, namespace, topic=topic,
                   startingOffsets="earliest")
    q = (df.select("value.id", "value.name", "value.qty").writeStream.format("memory")
         .queryName("evolved").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    assert _rows(spark.table("evolved")) == [(1, "old", 7), (2, "new", 3)]


def test_json_and_primitive_topics_read_typed(spark, client, broker, redis_server,
                                              namespace, topic_name):
    _registry(broker)
    js = topic_name("json")
    with client.transaction() as txn:
        client.create_producer(js, schema=JsonSchema(Order)).send(Order(id=5, name="j"),
                                                                  txn=txn)
    df = source_df(spark, broker, redis_server, namespace, stream=False, topic=js)
    assert _rows(df.select("value.id", "value.name")) == [(5, "j")]
    longs = topic_name("int64")
    schema = TopicSchema(Kind.INT64)
    # pulsar-client's core registers no INT64 schema through a producer: an operator's
    # `pulsar-admin schemas upload` does, as here (a Java Schema.INT64 producer would)
    admin_request(broker.admin_url, "POST",
                  f"/admin/v2/schemas/public/default/{longs.rsplit('/', 1)[1]}/schema",
                  body={"type": "INT64", "schema": "", "properties": {}})
    p = client.create_producer(longs)
    with client.transaction() as txn:
        for payload in encode_column(pa.array([1, -2, 2**40]), schema):
            p.send(payload, txn=txn)
    df = source_df(spark, broker, redis_server, namespace, stream=False, topic=longs)
    assert df.schema["value"].dataType.simpleString() == "bigint"
    assert _rows(df.select("value")) == [(-2,), (1,), (2**40,)]
    # the sink writes a bigint column under the topic's INT64 schema, as Java's does
    _write(spark, spark.createDataFrame([(7,)], "value bigint"), broker, redis_server,
           namespace, longs)
    df = source_df(spark, broker, redis_server, namespace, stream=False, topic=longs)
    assert _rows(df.select("value")) == [(-2,), (1,), (7,), (2**40,)]


def test_a_payload_that_does_not_decode_fails_the_query_naming_the_message(
        spark, client, broker, redis_server, namespace, topic_name, plain_pulsar):
    _registry(broker)
    topic = topic_name("corrupt")
    client.create_producer(topic, schema=AvroSchema(Order)).send(Order(id=1, name="a"))
    plain_pulsar.create_producer(topic, schema=pulsar.schema.BytesSchema()).send(
        b"\xff\xff\xff not avro")
    df = source_df(spark, broker, redis_server, namespace, stream=False, topic=topic)
    with pytest.raises(Exception, match=r"does not decode with its schema version") as err:
        df.collect()
    assert topic in str(err.value) and "valueSchema=bytes" in str(err.value)


def test_a_broker_without_a_registry_reads_bytes_after_a_bounded_lookup(
        spark, client, broker, redis_server, namespace, topic_name):
    if broker.kind != "lite":
        pytest.skip("the lite broker's missing registry; the reference broker's is above")
    topic = topic_name("no-registry")
    with client.transaction() as txn:
        client.create_producer(topic, schema=AvroSchema(Order)).send(Order(id=1, name="a"),
                                                                     txn=txn)
    df = source_df(spark, broker, redis_server, namespace, stream=False, topic=topic,
                   schemaLookupTimeoutMs="300")
    assert df.schema["value"].dataType.simpleString() == "binary"
    assert [AvroSchema(Order).decode(bytes(r.value)).name for r in df.collect()] == ["a"]


def _typed_consumer(plain_pulsar, topic: str, schema):
    return plain_pulsar.subscribe(topic, "check", schema=schema,
                                  initial_position=pulsar.InitialPosition.Earliest)


def _write(spark, df, broker, redis_server, namespace, topic):
    (df.write.format("pulsar-txn").option("service.url", broker.service_url)
     .option("metastore.url", redis_server.url).option("metastore.namespace", namespace)
     .option("topic", topic).mode("append").save())


def test_a_struct_dataframe_written_by_the_sink_reads_with_pulsar_clients_avro_schema(
        spark, client, broker, redis_server, namespace, topic_name, plain_pulsar):
    _registry(broker)
    topic = topic_name("sink-avro")
    client.create_producer(topic, schema=AvroSchema(Order)).send(Order(id=0, name="first"))
    df = spark.createDataFrame([(i, f"n{i}") for i in range(1, 6)], "id int, name string")
    _write(spark, df.selectExpr("struct(id, name) AS value"), broker, redis_server,
           namespace, topic)
    c = _typed_consumer(plain_pulsar, topic, AvroSchema(Order))
    got = [c.receive(10_000).value() for _ in range(6)]
    assert sorted((o.id, o.name) for o in got) == [(0, "first")] + [
        (i, f"n{i}") for i in range(1, 6)]
    # and the source reads them back typed, the sink's rows among them
    back = source_df(spark, broker, redis_server, namespace, stream=False, topic=topic)
    assert len(back.select("value.id").collect()) == 6


def test_a_struct_written_to_a_topic_without_a_schema_registers_one_derived(
        spark, broker, redis_server, namespace, topic_name, plain_pulsar):
    _registry(broker)
    topic = topic_name("sink-derived")
    df = spark.createDataFrame([(1, "a", 2.5), (2, None, None)], "id int, name string, p double")
    _write(spark, df.selectExpr("struct(id, name, p, TIMESTAMP'2026-11-27 01:02:03.456789Z' AS at) "
                                "AS value"), broker, redis_server, namespace, topic)
    info = plain_pulsar._client.get_schema_info(topic, -1)
    assert str(info.schema_type()) == "SchemaType.AVRO"
    c = _typed_consumer(plain_pulsar, topic, AvroSchema(None, schema_definition=json.loads(
        info.schema())))
    got = [c.receive(10_000).value() for _ in range(2)]
    assert sorted((d["id"], d["name"], d["p"]) for d in got) == [(1, "a", 2.5), (2, None, None)]
    assert {d["at"].isoformat() for d in got} == {"2026-11-27T01:02:03.456789+00:00"}


def test_an_incompatible_dataframe_fails_the_write_naming_the_field_and_writes_nothing(
        spark, client, broker, redis_server, namespace, topic_name):
    _registry(broker)
    topic = topic_name("sink-bad")
    client.create_producer(topic, schema=AvroSchema(Order)).send(Order(id=0, name="only"))
    df = spark.createDataFrame([("x", "y")], "id string, name string")
    with pytest.raises(Exception, match=r"field 'id' is string"):
        _write(spark, df.selectExpr("struct(id, name) AS value"), broker, redis_server,
               namespace, topic)
    df = spark.createDataFrame([("y",)], "nick string")
    with pytest.raises(Exception, match=r"field\(s\) \['nick'\] are not in topic"):
        _write(spark, df.selectExpr("struct(nick) AS value"), broker, redis_server,
               namespace, topic)
    back = source_df(spark, broker, redis_server, namespace, stream=False, topic=topic)
    assert [r.name for r in back.select("value.name").collect()] == ["only"]
