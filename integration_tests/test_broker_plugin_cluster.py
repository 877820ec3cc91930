"""The broker plugin on a Redis Cluster metastore (issue 28: "single server and Redis
Cluster"): the plugin reads pulsar-txn's keys through a ``redis+cluster://`` URL, its
transactions' partitions spread over three primaries, and follows the decision events
of every partition, each stream on the node that owns its slot (no command spans
slots). A real Apache Pulsar standalone with the plugin, a real 3-primary Redis Cluster
started by the harness, pulsar-txn's writers and plain pulsar-client consumers.

Fails with the plugin removed (``PULSAR_TXN_BROKER_PLUGIN=off``): a plain consumer then
sees the OPEN and the aborted transactions' entries."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pulsar
import pytest
import redis

from pulsar_txn.client import PulsarTxnClient, quiet_logger
from pulsar_txn.harness import broker_plugin
from pulsar_txn.harness.redis_cluster import RedisClusterHarness
from pulsar_txn.harness.services import start_broker
from pulsar_txn.metastore import RedisMetadataStore

REPO = Path(__file__).resolve().parents[1]
PLUGIN_OFF = os.environ.get("PULSAR_TXN_BROKER_PLUGIN", "on") == "off"
NS = f"pluginc{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = RedisClusterHarness(Path(tmp_path_factory.mktemp("plugin-cluster"))).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def cluster_broker(cluster, tmp_path_factory):
    if "standalone" not in os.environ.get("PULSAR_TXN_BROKERS", "standalone,lite"):
        pytest.skip("the plugin runs in an Apache Pulsar broker (pulsar-lite cannot host it)")
    RedisMetadataStore(f"{cluster.url}?namespace={NS}").close()  # the operator's init
    plugin = None if PLUGIN_OFF else broker_plugin.Governing(cluster.url, NS,
                                                             REPO / "broker-plugin")
    b = start_broker("standalone", Path(tmp_path_factory.mktemp("plugin-cluster-broker")),
                     plugin=plugin)
    yield b
    b.stop()


@pytest.fixture
def writer(cluster_broker, cluster):
    c = PulsarTxnClient(cluster_broker.service_url, cluster.url, namespace=NS,
                        sweeper=True, sweep_interval_s=0.2)
    yield c
    c.close()


@pytest.fixture
def plain(cluster_broker):
    c = pulsar.Client(cluster_broker.service_url, logger=quiet_logger())
    yield c
    c.close()


def _drain(consumer, want: int | None = None, quiet_ms: int = 1000) -> list[bytes]:
    got = []
    while want is None or len(got) < want:
        try:
            m = consumer.receive(quiet_ms if want is None else 30_000)
        except pulsar.Timeout:
            break
        consumer.acknowledge(m)
        got.append(m.data())
    return got


def test_transactions_on_every_shard_reach_a_plain_consumer_committed_only(
        writer, plain, cluster):
    """Transactions whose partitions live on all three primaries: an OPEN one holds the
    plain consumer at its first entry, an aborted one is never delivered, and each
    committed one is delivered once, in order, as its decision event arrives from
    whichever node holds it."""
    topic = f"persistent://public/default/plugin-cluster-{uuid.uuid4().hex[:10]}"
    p = writer.create_producer(topic)
    txns = [writer.new_transaction(timeout_ms=120_000) for _ in range(12)]
    keys = writer.coordinator.store.keys
    r = redis.RedisCluster(host="127.0.0.1", port=int(cluster.url.split(":")[2].split(",")[0]))
    owners = {r.get_node_from_key(keys.events(t.id.partition)).name for t in txns}
    r.close()
    assert len(owners) == 3, owners  # the decision events come from every primary
    for i, t in enumerate(txns):
        p.send(f"t{i}".encode(), txn=t)
    p.send(b"plain-after")
    consumer = plain.subscribe(topic, "plain", initial_position=pulsar.InitialPosition.Earliest)
    try:
        assert _drain(consumer) == [], "an OPEN transaction's entry, or what follows it, leaked"
        want = []
        for i, t in enumerate(txns):
            if i % 3 == 1:
                t.abort()
            else:
                t.commit()
                want.append(f"t{i}".encode())
        want.append(b"plain-after")
        got = _drain(consumer, want=len(want)) + _drain(consumer)
    finally:
        consumer.close()
    assert got == want, got


def test_a_primary_restart_while_a_plain_consumer_waits_leaks_nothing_and_delivery_resumes(
        writer, plain, cluster):
    """A primary of the cluster killed and started again while a plain consumer waits at
    an OPEN transaction (the cluster is down meanwhile: every gate holds); after the
    commit, the entries come once, in order, pushed by the events of the restarted
    node's partitions too."""
    topic = f"persistent://public/default/plugin-cluster-{uuid.uuid4().hex[:10]}"
    p = writer.create_producer(topic)
    held = [writer.new_transaction(timeout_ms=120_000) for _ in range(6)]
    for i, t in enumerate(held):
        p.send(f"h{i}".encode(), txn=t)
    p.send(b"after")
    consumer = plain.subscribe(topic, "plain", initial_position=pulsar.InitialPosition.Earliest)
    try:
        assert _drain(consumer) == []
        node = cluster.nodes[0]
        node.kill()
        try:
            assert _drain(consumer, quiet_ms=2000) == [], "leaked while a primary was down"
        finally:
            node.start()
            cluster.wait_ok()
        for t in held:
            t.commit()
        want = [f"h{i}".encode() for i in range(6)] + [b"after"]
        got = _drain(consumer, want=len(want)) + _drain(consumer)
    finally:
        consumer.close()
    assert got == want, got
