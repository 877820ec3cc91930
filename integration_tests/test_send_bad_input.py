"""A send with a key, value or event time of the wrong type is refused in our words
(issue 30, Errors): a ConfigError naming the argument, before anything is sent or
registered, so a transaction it was meant for still commits (errors change nothing).
pulsar-client's own answers named ``partition_key``, or said ``Invalid record obj``."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from pulsar_txn.client import read_all
from pulsar_txn.errors import ConfigError

BAD = [({"key": 123}, "key"), ({"key": b"k"}, "key"), ({"event_time_ms": "now"}, "event_time_ms"),
       ({"event_time_ms": 1.5}, "event_time_ms")]


def _topics(client, topic_name, broker) -> list[str]:
    scalable = f"topic://public/default/bad-{uuid.uuid4().hex[:8]}"
    client.scalable.create(scalable, segments=1)
    return [topic_name("bad"), scalable]


@pytest.fixture
def sclient(make_client, broker):
    return make_client(admin_url=getattr(broker, "admin_url", "") or None)


@pytest.mark.parametrize("bad,named", BAD)
def test_a_send_with_a_bad_argument_names_it_and_its_transaction_still_commits(
        sclient, topic_name, broker, bad, named):
    for topic in _topics(sclient, topic_name, broker):
        producer = sclient.create_producer(topic)
        for send in (producer.send, producer.send_async):
            with pytest.raises(ConfigError, match=f"'{named}'") as err:
                send(b"x", **bad)
            assert "partition_key" not in str(err.value)
            txn = sclient.new_transaction()
            with pytest.raises(ConfigError, match=f"'{named}'"):
                send(b"x", txn=txn, **bad)
            producer.send(b"ok", key="k", txn=txn)
            txn.commit()  # the refused send changed nothing
        assert [m.value for m in read_all(sclient.create_reader(topic), 1000)] == [b"ok", b"ok"]


@pytest.mark.parametrize("value", ["text", 42, bytearray(b"x")])
def test_a_value_that_is_not_bytes_names_value(sclient, topic_name, broker, value):
    for topic in _topics(sclient, topic_name, broker):
        producer = sclient.create_producer(topic)
        for send in (producer.send, producer.send_async):
            with pytest.raises(ConfigError, match="'value'") as err:
                send(value)
            assert "Invalid record obj" not in str(err.value)


def test_a_str_value_is_sent_by_a_producer_with_a_string_schema(sclient, topic_name):
    topic = topic_name("str")
    sclient.create_producer(topic, schema=pulsar.schema.StringSchema()).send("text", key="k")
    assert [m.value for m in read_all(sclient.create_reader(topic), 1000)] == [b"text"]


def test_a_message_over_the_size_limit_names_the_topic_and_the_limit(sclient, topic_name, broker):
    for topic in _topics(sclient, topic_name, broker):
        _too_big_is_named(sclient, topic)


def _too_big_is_named(sclient, topic: str) -> None:
    producer = sclient.create_producer(topic)
    for txn in (None, sclient.new_transaction()):
        with pytest.raises(ConfigError) as err:
            producer.send(b"x" * (6 * 1024 * 1024), txn=txn)
        msg = str(err.value)
        assert topic in msg and "maxMessageSize" in msg and "6291456 bytes" in msg, msg
        assert "chunking_enabled" in msg, msg


def test_a_send_with_the_broker_gone_names_the_topic_and_service_url(tmp_path, redis_server,
                                                                     namespace):
    """Its own pulsar-lite, stopped under a producer: the send's timeout names what
    to check (pulsar-client said a bare ``_pulsar.Timeout``)."""
    from pulsar_txn.client import PulsarTxnClient
    from pulsar_txn.errors import BrokerUnavailable
    from pulsar_txn.harness.lite import PulsarLite

    lite = PulsarLite(tmp_path / "lite")
    lite.start()
    client = PulsarTxnClient(lite.service_url, redis_server.url, namespace=namespace,
                             sweeper=False, operation_timeout_seconds=2)
    try:
        topic = f"persistent://public/default/gone-{uuid.uuid4().hex[:8]}"
        producer = client.create_producer(topic, send_timeout_millis=1500)
        producer.send(b"before")
        lite.stop()
        for txn in (None, client.new_transaction()):
            with pytest.raises(BrokerUnavailable) as err:
                producer.send(b"after", txn=txn)
            msg = str(err.value)
            assert topic in msg and lite.service_url in msg and "'service.url'" in msg, msg
            assert "send_timeout_millis" in msg, msg
    finally:
        client.close()
        lite.stop()
