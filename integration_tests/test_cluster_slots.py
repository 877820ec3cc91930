"""Redis Cluster readiness: no command the project sends spans hash slots (DESIGN §2).

A standalone server accepts cross-slot keys in scripts and in plain multi-key
commands alike, so the other tests cannot see such a bug; a Redis Cluster refuses
the command (CROSSSLOT). The check is on the keys actually sent (see
``slot_checker``), over a workload that drives every metastore path through the
public APIs: transactions on several topics (commit, abort, losing writer,
timeout), a reader woken by the watch, transactional acks, materialize/timeout/GC
sweeps, a Spark-sink style owned batch, and scalable topics created, split and
merged while a producer and readers use them.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis
import redis.connection
from helpers import values
from slot_checker import SlotChecker, report

from pulsar_txn.client import Transaction, read_all
from pulsar_txn.metastore import RedisMetadataStore
from pulsar_txn.records import SinkBatch, sink_owner

_ORIGINAL_SEND = redis.connection.AbstractConnection.__dict__["send_packed_command"]


def test_slot_checker_sees_cross_slot_commands(single_redis):
    """The checker itself: it flags scripts, multi-stream XREAD, MGET, DEL and
    MULTI/EXEC blocks spanning slots, and passes the same commands within one slot.
    On one server, where nothing else would see them (a real cluster refuses such
    commands by itself: the suite runs on one with PULSAR_TXN_METASTORE=cluster)."""
    redis_server = single_redis
    r = redis.Redis.from_url(redis_server.url, decode_responses=True)
    tag = uuid.uuid4().hex[:8]
    a, b, a2 = f"{{{tag}:a}}:x", f"{{{tag}:b}}:y", f"{{{tag}:a}}:z"
    with SlotChecker() as checker:
        r.xadd(a, {"f": 1})
        r.xadd(b, {"f": 1})
        r.xadd(a2, {"f": 1})
        r.xread({a: "0-0", b: "0-0"}, count=1)          # cross
        r.xread({a: "0-0", a2: "0-0"}, count=1)         # same slot
        r.mget(a, b)                                    # cross (type error is fine)
        script = r.register_script("return #KEYS")
        script(keys=[a, b])                             # cross
        script(keys=[a, a2])                            # same slot
        pipe = r.pipeline(transaction=True)
        pipe.xlen(a)
        pipe.xlen(b)
        pipe.execute()                                  # cross (one MULTI/EXEC block)
        pipe = r.pipeline(transaction=False)
        pipe.xlen(a)
        pipe.xlen(b)
        pipe.execute()                                  # single-key commands: fine
        r.delete(a, b, a2)                              # cross
    bad = checker.cross_slot(redis_server.url)
    flagged = sorted({" ".join(c[0].decode().upper() for c in s.commands) for s in bad})
    assert flagged == ["DEL", "EVALSHA", "MGET", "MULTI XLEN XLEN EXEC", "XREAD"], report(bad)
    r.close()


def _workload(make_client, broker, topic_name, redis_server, namespace) -> None:
    client = make_client(sweep_interval_s=0.1, retention_ms=200)
    other = make_client(sweeper=False)  # a second participant: its own watches
    t1, t2, t3 = topic_name("a"), topic_name("b"), topic_name("c")
    p1, p2, p3 = (client.create_producer(t) for t in (t1, t2, t3))
    q1 = other.create_producer(t1)

    # a reader waits at its gate and is woken by the commit (the watch's push)
    reader = other.create_reader(t1)
    txn = client.new_transaction()
    for p in (p1, p2, p3):
        p.send(b"c-1", txn=txn)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(reader.read_next(20_000).value))
    waiter.start()
    time.sleep(0.3)
    txn.commit()
    waiter.join(20)
    assert got == [b"c-1"]

    aborted = client.new_transaction()
    p1.send(b"a-1", txn=aborted)
    p2.send(b"a-2", txn=aborted)
    aborted.abort()
    losing = client.new_transaction()
    p1.send(b"win", txn=losing)
    q1.send(b"lose", txn=losing)
    client.coordinator.commit(losing.id, winners=[p1.writer_id])
    abandoned = client.new_transaction(timeout_ms=300)
    p2.send(b"abandoned", txn=abandoned)
    for p in (p1, p2, p3):
        p.send(b"plain")

    # transactional acks: committed, aborted (released), conflicting
    consumer = other.subscribe(t3, "sub")
    msgs = [consumer.receive(10_000) for _ in range(2)]
    ack_abort = other.new_transaction()
    consumer.acknowledge(msgs[0], txn=ack_abort)
    ack_abort.abort()
    ack_commit = other.new_transaction()
    consumer.acknowledge(msgs[0], txn=ack_commit)
    consumer.acknowledge_cumulative(msgs[1], txn=ack_commit)
    ack_commit.commit()

    # a Spark-sink style batch: owned txn, sink progress advanced by the commit CAS
    sink_id, query = f"sink-{uuid.uuid4().hex[:6]}", f"q-{uuid.uuid4().hex[:6]}"
    client.store.bind_sink(sink_id, query)
    owner = sink_owner(sink_id, query, 0)
    owned = Transaction(client.store, client.coordinator.new_transaction(60_000, owner=owner),
                        client.coordinator)
    p3.send(b"sink-0", txn=owned)
    client.coordinator.commit(owned.id, sink=SinkBatch(sink_id, query, 0))
    assert client.store.sink_progress(sink_id) == (0, query)

    # sweeps: the abandoned txn times out, everything is materialized and collected
    deadline = time.monotonic() + 15
    while client.store.get_header(abandoned.id) is not None:
        assert time.monotonic() < deadline, "timeout sweep + GC did not collect the txn"
        time.sleep(0.1)
    client.coordinator.sweep_timeouts()
    client.coordinator.sweep_materialize()
    client.coordinator.sweep_gc(0)
    assert values(other.create_reader(t1)) == [b"c-1", b"win", b"plain"]
    assert values(other.create_reader(t2)) == [b"c-1", b"plain"]

    # scalable topics: two followed by one client (one layout watch over both)
    sclient = make_client(admin_url=getattr(broker, "admin_url", "") or None,
                          seal_grace_ms=200)
    names = [f"topic://public/default/st-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for n in names:
        sclient.scalable.create(n, segments=2)
    producers = [sclient.create_producer(n) for n in names]
    readers = [other.create_reader(n) for n in names]
    stxn = sclient.new_transaction()
    for i in range(20):
        producers[0].send(f"k{i}:0".encode(), key=f"k{i}", txn=stxn)
        producers[1].send(f"k{i}:0".encode(), key=f"k{i}")
    sclient.scalable.split(names[0], 0)
    for i in range(20):
        producers[0].send(f"k{i}:1".encode(), key=f"k{i}", txn=stxn)
    stxn.commit()
    lay = sclient.scalable.merge(names[1], 0, 1)
    for i in range(20):
        producers[1].send(f"k{i}:1".encode(), key=f"k{i}")
    assert lay.epoch == 2
    for r in readers:
        assert len(list(read_all(r, idle_ms=1500))) == 40
    sclient.scalable.describe(names[0])
    assert len(client.store.list_topics()) >= 2
    for c in (sclient, other, client):
        c.close()


def test_no_command_spans_hash_slots(make_client, broker, topic_name, single_redis, namespace):
    redis_server = single_redis
    with SlotChecker() as checker:
        _workload(make_client, broker, topic_name, redis_server, namespace)
        # a store opened directly, as the Spark driver and executors do
        store = RedisMetadataStore(redis_server.url, namespace=namespace)
        w = store.watch(lambda ev: None)
        w.close()
        store.close()
    bad = checker.cross_slot(redis_server.url)
    seen = checker.names()
    # the check is not vacuous: scripts, the watches' reads and pipelines were all seen
    assert {"EVALSHA", "XREAD", "HGETALL", "ZRANGE"} <= seen, seen
    streams = {k for s in checker.sent if s.commands[0][0].upper() == b"XREAD" for k in s.keys}
    assert any(k.endswith(b":ev") and b":st:" not in k for k in streams), streams
    assert any(b":st:" in k for k in streams), streams
    assert not bad, report(bad)


@pytest.fixture(autouse=True)
def _checker_uninstalled():
    yield
    assert redis.connection.AbstractConnection.__dict__["send_packed_command"] is _ORIGINAL_SEND
