"""Invariants 1 and 2: READ_COMMITTED and atomic visibility, on real Redis + Pulsar."""

from __future__ import annotations

import random
import threading

from helpers import values

from pulsar_txn.client import read_all


def test_reader_never_sees_open_txn(client, topic_name):
    a, b = topic_name("a"), topic_name("b")
    pa, pb = client.create_producer(a), client.create_producer(b)
    ra, rb = client.create_reader(a), client.create_reader(b)
    txn = client.new_transaction()
    for i in range(10):
        pa.send(b"a%d" % i, txn=txn)
        pb.send(b"b%d" % i, txn=txn)
    pa.send(b"plain-after-open")  # behind the open txn: held back by the gate too
    assert values(ra) == []
    assert values(rb) == []
    txn.commit()
    assert values(ra) == [b"a%d" % i for i in range(10)] + [b"plain-after-open"]
    assert values(rb) == [b"b%d" % i for i in range(10)]


def test_reader_never_sees_aborted_txn(client, topic_name):
    t = topic_name()
    p = client.create_producer(t)
    txn = client.new_transaction()
    for i in range(5):
        p.send(b"x%d" % i, txn=txn)
    p.send(b"plain")
    txn.abort()
    assert values(client.create_reader(t)) == [b"plain"]
    # and never later, for a reader started afterwards from the beginning
    assert values(client.create_reader(t)) == [b"plain"]


def test_reader_never_sees_losing_writer(client, topic_name):
    """Two writers in one txn; the commit names one winner: the other stays invisible."""
    t = topic_name()
    winner, loser = client.create_producer(t), client.create_producer(t)
    txn = client.new_transaction()
    winner.send(b"win", txn=txn)
    loser.send(b"lose", txn=txn)
    client.coordinator.commit(txn.id, winners=[winner.writer_id])
    assert values(client.create_reader(t)) == [b"win"]


def test_commit_makes_every_segment_visible_atomically(client, topic_name):
    topics = [topic_name(f"s{i}") for i in range(4)]
    producers = [client.create_producer(t) for t in topics]
    readers = [client.create_reader(t) for t in topics]
    txn = client.new_transaction()
    for p in producers:
        p.send(b"v", txn=txn)
    assert all(values(r, 200) == [] for r in readers)
    txn.commit()
    assert all(values(r) == [b"v"] for r in readers)


def test_concurrent_commits_and_aborts_reader_sees_exactly_committed(client, topic_name):
    """Writers commit and abort at random while a reader follows the topic live."""
    t = topic_name()
    reader = client.create_reader(t)
    seen: list[bytes] = []
    stop = threading.Event()

    def follow():
        while not stop.is_set():
            seen.extend(m.value for m in read_all(reader, 200))

    follower = threading.Thread(target=follow)
    follower.start()
    committed: list[bytes] = []
    lock = threading.Lock()

    def writer(w: int):
        rnd = random.Random(w)
        p = client.create_producer(t)
        for n in range(15):
            txn = client.new_transaction()
            batch = [f"w{w}-t{n}-m{i}".encode() for i in range(rnd.randint(1, 4))]
            for v in batch:
                p.send(v, txn=txn)
            if rnd.random() < 0.5:
                txn.commit()
                with lock:
                    committed.extend(batch)
            else:
                txn.abort()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    follower.join()
    seen.extend(m.value for m in read_all(reader, 500))
    assert sorted(seen) == sorted(committed)
    assert len(seen) == len(set(seen))
    # per writer, commit order is preserved
    for w in range(3):
        mine = [v for v in seen if v.startswith(f"w{w}-".encode())]
        assert mine == [v for v in committed if v.startswith(f"w{w}-".encode())]


def test_malformed_txn_property_is_never_delivered_and_does_not_stop_the_reader(
        client, plain_pulsar, topic_name):
    """Item 10: a message whose txn property is not a pulsar-txn id (another tool, a
    corrupt writer) is not ours to classify: fail closed, and keep reading."""
    from pulsar_txn.records import PROP_TXN, PROP_WRITER

    t = topic_name()
    raw = plain_pulsar.create_producer(t)
    raw.send(b"before")
    raw.send(b"forged", properties={PROP_TXN: "v4:123:456", PROP_WRITER: "w"})
    raw.send(b"forged", properties={PROP_TXN: "v4:123:456;w;" + client.store.deployment})
    # a committed txn's id and winning writer, but both forms at once: which to believe
    # is unknown, so neither is; the same id and writer in one form is delivered
    txn = client.new_transaction()
    client.create_producer(t).send(b"committed", txn=txn)
    (run,), _ = client.store.list_writes(txn.id)
    tag = f"{txn.id};{run.writer};{client.store.deployment}"
    raw.send(b"forged", properties={PROP_TXN: tag, PROP_WRITER: run.writer})
    raw.send(b"control", properties={PROP_TXN: tag})
    txn.commit()
    raw.send(b"after")
    assert values(client.create_reader(t)) == [b"before", b"committed", b"control", b"after"]


def test_entries_of_another_deployment_are_never_delivered(make_client, topic_name):
    """Fail closed across deployments (DESIGN §3): two namespaces write one topic; a txn
    id of one means nothing in the other, even where the other's watermark covers it."""
    # b passes a's entries over instead of failing at them (hole 13's default)
    a, b = make_client(namespace=f"a{topic_name()[-8:]}"), make_client(
        namespace=f"b{topic_name()[-8:]}", skip_foreign_deployments=True)
    t = topic_name()
    # b's first use of each partition comes first: ids below a first use may be lost
    # ones (a gap, never taken for collected), and a's id must lie above b's gaps
    for q in range(b.store.partitions):
        b.store.next_txn_id(partition=q)
    foreign = a.new_transaction()
    a.create_producer(t).send(b"a-aborted", txn=foreign)
    a.coordinator.abort(foreign.id)
    pb = b.create_producer(t)
    pb.send(b"b-plain")
    # b's ids of that partition pass a's id and get collected: its watermark covers it
    # (ids follow the server's clock in microseconds: b hands out ids until past a's)
    p = foreign.id.partition
    nxt = b.store.next_txn_id(partition=p)
    while nxt.seq <= foreign.id.seq:
        nxt = b.store.next_txn_id(partition=p)
    for _ in range(3):
        own = b.store.create_txn(nxt, 60_000)
        b.coordinator.commit(own.txn_id)
        nxt = b.store.next_txn_id(partition=p)
    b.coordinator.sweep_gc(retention_ms=0)
    assert foreign.id in b.store.collected([foreign.id])  # b alone would take it as its own
    assert values(b.create_reader(t)) == [b"b-plain"]


def test_a_read_message_reads_like_pulsar_clients(client, topic_name):
    """pulsar-client's Message methods on a real message, next to today's attributes;
    ``message_id()`` is the native id, so a plain pulsar-client call takes it."""
    import _pulsar

    t = topic_name("api")
    with client.transaction() as txn:
        client.create_producer(t).send(b"v", key="k", properties={"p": "1"}, txn=txn)
    m = next(iter(read_all(client.create_reader(t), 1500)))
    assert (m.value(), m.data(), m.partition_key(), m.properties()) == (b"v", b"v", "k",
                                                                       {"p": "1"})
    assert (m.value, m.key, m.properties) == (b"v", "k", {"p": "1"})
    assert isinstance(m.message_id(), _pulsar.MessageId) and m.message_id == m.message_id()
    assert m.topic_name() == m.topic and m.publish_timestamp() == m.publish_time_ms > 0
