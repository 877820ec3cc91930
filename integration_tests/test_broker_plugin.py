"""READ_COMMITTED for plain consumers, enforced by the broker (issue 28): a real Apache
Pulsar standalone started with pulsar-txn's broker plugin (built by Maven from
``broker-plugin/``), a real Redis, pulsar-txn's writers, and plain pulsar-client
consumers and readers that know nothing of pulsar-txn.

Each test fails with the plugin removed (``PULSAR_TXN_BROKER_PLUGIN=off`` starts the same
broker without it): a plain consumer then sees every append at once."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pulsar
import pytest

from pulsar_txn.client import PulsarTxnClient, quiet_logger
from pulsar_txn.harness import broker_plugin
from pulsar_txn.harness.standalone import PulsarStandalone

REPO = Path(__file__).resolve().parents[1]
PLUGIN_OFF = os.environ.get("PULSAR_TXN_BROKER_PLUGIN", "on") == "off"
METASTORE_NS = f"plugin{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def plugin_broker(redis_server, tmp_path_factory):
    kinds = os.environ.get("PULSAR_TXN_BROKERS", "standalone,lite")
    if "standalone" not in kinds:
        pytest.skip("the plugin runs in an Apache Pulsar broker (pulsar-lite cannot host it)")
    if os.environ.get("PULSAR_TXN_METASTORE", "server") == "cluster":
        pytest.skip("the plugin reads a single Redis server so far (Redis Cluster: not yet)")
    workdir = Path(tmp_path_factory.mktemp("plugin-broker"))
    jar, nar = broker_plugin.build(REPO / "broker-plugin",
                                   settings=REPO / "benchmarks/peer/maven-settings.xml")
    conf = "" if PLUGIN_OFF else broker_plugin.broker_conf(
        workdir, nar, redis_server.url, METASTORE_NS)
    b = PulsarStandalone(workdir, extra_conf=conf, extra_classpath=() if PLUGIN_OFF else (jar,))
    b.start()
    yield b
    b.stop()


@pytest.fixture
def writer(plugin_broker, redis_server):
    c = PulsarTxnClient(plugin_broker.service_url, redis_server.url, namespace=METASTORE_NS,
                        create_namespace=True, sweeper=True, sweep_interval_s=0.2)
    yield c
    c.close()


@pytest.fixture
def plain(plugin_broker):
    c = pulsar.Client(plugin_broker.service_url, logger=quiet_logger())
    yield c
    c.close()


@pytest.fixture
def topic():
    return f"persistent://public/default/plugin-{uuid.uuid4().hex[:10]}"


def _drain(receive, want: int | None = None, quiet_s: float = 2.0, limit_s: float = 30.0):
    """What a plain consumer receives: until ``want`` messages, or ``quiet_s`` of nothing."""
    got, deadline = [], time.monotonic() + limit_s
    while time.monotonic() < deadline and (want is None or len(got) < want):
        try:
            got.append(receive(int(quiet_s * 1000)))
        except pulsar.Timeout:
            if want is None:
                break
    return got


SUBSCRIPTIONS = {
    "exclusive": pulsar.ConsumerType.Exclusive,
    "failover": pulsar.ConsumerType.Failover,
    "shared": pulsar.ConsumerType.Shared,
    "key_shared": pulsar.ConsumerType.KeyShared,
    "reader": None,
}


def _open(plain, topic: str, kind: str):
    if kind == "reader":
        r = plain.create_reader(topic, pulsar.MessageId.earliest)
        return r, r.read_next
    c = plain.subscribe(topic, f"plain-{kind}", consumer_type=SUBSCRIPTIONS[kind],
                        initial_position=pulsar.InitialPosition.Earliest)

    def receive(timeout_ms: int):
        m = c.receive(timeout_ms)
        c.acknowledge(m)
        return m
    return c, receive


@pytest.mark.parametrize("kind", list(SUBSCRIPTIONS))
def test_plain_consumer_is_held_at_an_open_txn_and_sees_each_committed_entry_once_in_order(
        writer, plain, topic, kind):
    p = writer.create_producer(topic)
    p.send(b"plain-0", key="k")
    held = writer.new_transaction(timeout_ms=120_000)
    p.send(b"held-0", key="k", txn=held)
    p.send(b"held-1", key="k", txn=held)
    p.send(b"plain-1", key="k")  # after the open transaction's first entry: held too
    aborted = writer.new_transaction()
    p.send(b"aborted-0", key="k", txn=aborted)
    aborted.abort()
    with writer.transaction() as t:
        p.send(b"committed-0", key="k", txn=t)
    consumer, receive = _open(plain, topic, kind)
    try:
        before = [m.data() for m in _drain(receive)]
        assert before == [b"plain-0"], "an OPEN transaction's entries, or what follows them, leaked"
        held.commit()
        after = [m.data() for m in _drain(receive, want=4)]
        after += [m.data() for m in _drain(receive, quiet_s=1.0)]  # nothing more may come
    finally:
        consumer.close()
    assert after == [b"held-0", b"held-1", b"plain-1", b"committed-0"], after


def test_a_plain_producers_forged_protocol_properties_are_never_delivered(writer, plain, topic):
    p = writer.create_producer(topic)
    with writer.transaction() as t:
        p.send(b"real", txn=t)
    dep = writer.store.deployment
    forger = plain.create_producer(topic)
    for props in ({"__ptxn.txn": f"{t.id};ghost-writer;{dep}"},  # not a winner of it
                  {"__ptxn.txn": f"v5:0:987654321;w1;{dep}"},     # no such transaction
                  {"__ptxn.txn": f"{t.id};w1"},                   # malformed
                  {"__ptxn.txn": f"{t.id};w1;another-deployment"},
                  {"__ptxn.txn": "garbage"}):
        forger.send(b"forged", properties=props)
    forger.send(b"plain-after")
    forger.close()
    consumer, receive = _open(plain, topic, "exclusive")
    try:
        got = [m.data() for m in _drain(receive)]
    finally:
        consumer.close()
    assert got == [b"real", b"plain-after"], got


def test_a_timed_out_transaction_is_never_delivered_and_releases_what_follows(
        writer, plain, topic):
    p = writer.create_producer(topic)
    doomed = writer.new_transaction(timeout_ms=1500)
    p.send(b"doomed", txn=doomed)
    p.send(b"after")
    consumer, receive = _open(plain, topic, "exclusive")
    try:
        assert _drain(receive, quiet_s=0.5) == []  # held while it may still commit
        got = [m.data() for m in _drain(receive, want=1, limit_s=20)]
        got += [m.data() for m in _drain(receive, quiet_s=1.0)]
    finally:
        consumer.close()
    assert got == [b"after"], got
