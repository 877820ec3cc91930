"""The client API takes pulsar-client's schema objects (issue 29): a producer with
``schema=`` encodes, a reader or consumer with ``schema=`` hands out decoded values
(``message.value()``, as pulsar-client), under transactions, READ_COMMITTED. The
schemas are applied by the client, so both brokers run these (pulsar-lite keeps no
registry but carries the payloads)."""

from __future__ import annotations

from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema


class Order(Record):
    id = Integer()
    name = String()


def _orders(msgs) -> list[tuple[int, str]]:
    return [(m.value().id, m.value().name) for m in msgs]


def test_a_reader_with_a_schema_returns_decoded_committed_records_only(client, topic_name):
    topic = topic_name("avro")
    p = client.create_producer(topic, schema=AvroSchema(Order))
    with client.transaction() as txn:
        p.send(Order(id=1, name="a"), txn=txn)
        p.send_async(Order(id=2, name="b"), txn=txn)
    aborted = client.new_transaction()
    p.send(Order(id=3, name="never"), txn=aborted)
    aborted.abort()
    p.send(Order(id=4, name="d"))
    reader = client.create_reader(topic, schema=AvroSchema(Order))
    got = [reader.read_next(timeout_millis=10_000) for _ in range(3)]
    assert _orders(got) == [(1, "a"), (2, "b"), (4, "d")]
    assert got[0].data() != b"" and isinstance(got[0].data(), bytes)  # the payload stays
    reader.close()


def test_a_consumer_with_a_schema_acks_decoded_records_in_a_transaction(client, topic_name):
    topic = topic_name("json")
    consumer = client.subscribe(topic, "s", schema=JsonSchema(Order))
    p = client.create_producer(topic, schema=JsonSchema(Order))
    with client.transaction() as txn:
        for i in range(5):
            p.send_async(Order(id=i, name=f"n{i}"), txn=txn)
    with client.transaction() as txn:
        msgs = [consumer.receive(timeout_millis=10_000) for _ in range(5)]
        for m in msgs:
            consumer.acknowledge(m, txn=txn)
    assert _orders(msgs) == [(i, f"n{i}") for i in range(5)]
    consumer.close()
    again = client.subscribe(topic, "s", schema=JsonSchema(Order))
    p.send(Order(id=9, name="last"))
    assert _orders([again.receive(timeout_millis=10_000)]) == [(9, "last")]


def test_a_string_schema_reads_back_str_and_bytes_readers_keep_bytes(client, topic_name):
    topic = topic_name("str")
    p = client.create_producer(topic, schema=StringSchema())
    with client.transaction() as txn:
        p.send("héllo", txn=txn)
    typed = client.create_reader(topic, schema=StringSchema()).read_next(timeout_millis=10_000)
    assert typed.value() == "héllo"
    plain = client.create_reader(topic).read_next(timeout_millis=10_000)
    assert plain.value == "héllo".encode() and plain.value() == "héllo".encode()
