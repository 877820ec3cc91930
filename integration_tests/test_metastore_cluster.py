"""The metastore on a real Redis Cluster with replicas: a primary killed while
transactions commit (docs/durability.md, "Redis Cluster").

What is promised, and checked here:

* every transaction ends: none stays OPEN once the sweeper ran past its deadline;
* nothing partial is ever shown: a reader that reads after the failover delivers a
  transaction's messages on every segment it wrote, or on none;
* what is shown agrees with the decision the cluster holds now: COMMITTED → shown,
  anything else (ABORTED, or a header the failover lost) → never shown;
* an acknowledged commit can be lost: replication is asynchronous, so a decision the
  killed primary had not yet sent to its replica is gone. Its transaction then ends
  ABORTED (or unknown), never shown. The test counts such losses; it does not
  require zero.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis
from helpers import raw_redis

from pulsar_txn.errors import PulsarTxnError
from pulsar_txn.harness.redis_cluster import RedisClusterHarness
from pulsar_txn.records import FOREIGN, PROP_DEPLOYMENT, PROP_TXN, TxnId, entry_txn, txn_properties
from pulsar_txn.state import TxnState


@pytest.fixture
def cluster(tmp_path):
    c = RedisClusterHarness(tmp_path / "cluster", primaries=3, replicas=1).start()
    yield c
    c.stop()


def _partition_owner(cluster: RedisClusterHarness, store, p: int):
    return cluster.primary_of_slot(redis.crc.key_slot(store.keys.header(p, 0).encode()))


def _replica_of(cluster: RedisClusterHarness, primary):
    for s in cluster.nodes:
        if s is primary or s.proc is None:
            continue
        info = redis.Redis(port=s.port, decode_responses=True).info("replication")
        if info.get("role") == "slave" and int(info.get("master_port", 0)) == primary.port:
            return s
    raise AssertionError(f"no replica of 127.0.0.1:{primary.port}")


def test_primary_killed_while_transactions_commit_shows_nothing_partial(
        cluster, broker, topic_name, namespace):
    from pulsar_txn.client import PulsarTxnClient, read_all

    client = PulsarTxnClient(broker.service_url, cluster.url, namespace=namespace,
                             partitions=6, sweep_interval_s=0.2)
    a, b = topic_name("fa"), topic_name("fb")
    pa, pb = client.create_producer(a), client.create_producer(b)
    acknowledged: set[TxnId] = set()
    failed: list[str] = []
    stop = threading.Event()

    def commit_loop() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                txn = client.new_transaction(timeout_ms=3_000)
                pa.send(b"%d" % i, txn=txn)
                pb.send(b"%d" % i, txn=txn)
                txn.commit()
                acknowledged.add(txn.id)
            except PulsarTxnError as e:  # the failover window: unknown outcome
                failed.append(type(e).__name__)
                time.sleep(0.05)

    victim = _partition_owner(cluster, client.store, 0)
    replica = _replica_of(cluster, victim)
    worker = threading.Thread(target=commit_loop)
    worker.start()
    try:
        time.sleep(2.0)
        # Make the loss deterministic: the replica stops reading, a 64 MiB write fills
        # the kernel's socket buffers, and the decisions after it wait in the primary's
        # own output buffer, which dies with it.
        os.kill(replica.proc.pid, signal.SIGSTOP)
        raw = redis.Redis(port=victim.port)
        raw.set(client.store.keys.tag(0) + ":filler", b"x" * (64 << 20))
        raw.close()
        at_kill = len(acknowledged)
        deadline = time.monotonic() + 3  # well inside the replica's validity (10 s)
        while len(acknowledged) < at_kill + 30 and time.monotonic() < deadline:
            time.sleep(0.05)                            # decisions the replica never got
        before = len(acknowledged)
        victim.kill()                                   # SIGKILL the primary
        os.kill(replica.proc.pid, signal.SIGCONT)       # ... which its replica replaces
        slot = redis.crc.key_slot(client.store.keys.tag(0).encode())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if cluster.primary_of_slot(slot) is replica:
                    break
            except RuntimeError:
                pass
            time.sleep(0.2)
        else:
            log = (replica.workdir / "server.log").read_text()[-2000:]
            pytest.fail(f"the replica did not take over within 30 s:\n{log}")
        deadline = time.monotonic() + 30
        while len(acknowledged) < before + 20 and time.monotonic() < deadline:
            time.sleep(0.2)                             # commits resume after the failover
        assert len(acknowledged) >= before + 20, (
            f"no commits after the failover ({len(failed)} failed: {set(failed)})")
    finally:
        stop.set()
        worker.join(30)
        if replica.proc.poll() is None:
            os.kill(replica.proc.pid, signal.SIGCONT)  # never leave it stopped

    store = client.store
    # every transaction ends: the sweeper aborts what the failover left OPEN
    deadline = time.monotonic() + 30
    while store.open_txns() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert store.open_txns() == []

    def read(topic: str) -> dict[str, bytes]:
        out = {}
        for m in read_all(client.create_reader(topic), idle_ms=3000):
            assert m.txn_id is not None
            out[m.txn_id] = m.value
        return out

    seen_a, seen_b = read(a), read(b)
    assert seen_a == seen_b                             # all or nothing, per transaction
    headers = store.get_headers([TxnId.parse(t) for t in seen_a])
    assert all(h is not None and h.state is TxnState.COMMITTED for h in headers.values())
    shown = {TxnId.parse(t) for t in seen_a}
    lost = {t for t in acknowledged if t not in shown}
    for t, h in store.get_headers(sorted(lost, key=str)).items():
        assert h is None or h.state is not TxnState.COMMITTED, t  # lost ⇒ never shown
    assert lost, "the failover lost no acknowledged decision: the test did not exercise it"
    print(f"\nfailover: {len(acknowledged)} commits acknowledged, {len(shown)} shown, "
          f"{len(lost)} acknowledged commits lost to asynchronous replication, "
          f"{len(failed)} attempts failed during the failover")
    client.close()


def test_partitions_spread_over_every_primary_and_are_fixed_at_first_use(cluster, namespace):
    from pulsar_txn.errors import ConfigError
    from pulsar_txn.metastore import open_store

    store = open_store(cluster.url, namespace=namespace, partitions=12)
    try:
        per_shard: dict[int, int] = {}
        for p in range(12):
            port = _partition_owner(cluster, store, p).port
            per_shard[port] = per_shard.get(port, 0) + 1
        owners = set(per_shard)
        assert sorted(per_shard.values()) == [4, 4, 4]  # spread tags: even over the shards
        with pytest.raises(ConfigError, match="partitions=4"):
            open_store(cluster.url, namespace=namespace, partitions=4)
        r = raw_redis(cluster.url)
        per_node = {}
        for p in range(12):
            t = store.next_txn_id(partition=p)
            store.create_txn(t, 60_000)
            node = r.get_node_from_key(store.keys.header(p, t.seq))
            per_node[node.port] = per_node.get(node.port, 0) + 1
        assert sorted(per_node) == sorted(owners) and sum(per_node.values()) == 12
        r.close()
    finally:
        store.close()


def test_a_namespace_created_before_spread_tags_keeps_its_keys(redis_server, namespace):
    """An existing deployment's keys carry the plain tags ``{ns:p}``: opening it with
    this version must find them there, never move to the spread tags."""
    from pulsar_txn.metastore import open_store

    r = raw_redis(redis_server.url)
    r.hset(f"{namespace}:config", mapping={"partitions": 4, "deployment": "old0dep0"})
    r.close()
    store = open_store(redis_server.url, namespace=namespace)
    try:
        assert store.keys.tag(2) == f"{{{namespace}:2}}"
        fresh = open_store(redis_server.url, namespace=namespace + "n", partitions=4)
        assert fresh.keys.tag(2) != f"{{{namespace}n:2}}"   # new deployments spread
        # a process of an older version reads 'deployment' and the plain tags: what it
        # stamps is never taken for this deployment's (and the reverse), fail closed
        r = raw_redis(redis_server.url)
        old_dep = r.hget(f"{namespace}n:config", "deployment")
        r.close()
        assert old_dep != fresh.deployment
        theirs = entry_txn({PROP_TXN: "v5:0:1", PROP_DEPLOYMENT: old_dep}, fresh.deployment)
        assert theirs[0] == FOREIGN + "v5:0:1"             # never a txn of this deployment
        assert entry_txn({PROP_TXN: "v5:0:1", PROP_DEPLOYMENT: fresh.deployment},
                         fresh.deployment)[0] == "v5:0:1"
        theirs = entry_txn(txn_properties(TxnId(0, 1), "w", old_dep), fresh.deployment)
        assert theirs[0] == FOREIGN + "v5:0:1"
        assert entry_txn(txn_properties(TxnId(0, 1), "w", fresh.deployment),
                         fresh.deployment) == ("v5:0:1", "w")
        fresh.close()
    finally:
        store.close()
