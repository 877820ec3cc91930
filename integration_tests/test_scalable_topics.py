"""Scalable topics on real Redis + Pulsar: per-key order, transactions across a split, fencing.

Every test checks the full message set key by key (no loss, no duplicate, order
kept) and that the layout change actually happened while messages flowed.
"""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict

import pytest
from helpers import raw_entries

from pulsar_txn.client import read_all
from pulsar_txn.metastore.base import LayoutVerdict
from pulsar_txn.records import PROP_TXN
from pulsar_txn.state import SegmentState


@pytest.fixture
def sclient(make_client, broker):
    """A client that can fence sealed segments on the broker (admin URL where it has one)."""
    return make_client(admin_url=getattr(broker, "admin_url", "") or None, seal_grace_ms=200)


@pytest.fixture
def scalable_name():
    return f"topic://public/default/st-{uuid.uuid4().hex[:10]}"


def _decode(msg) -> tuple[str, int]:
    key, seq = msg.value.decode().split(":")
    return key, int(seq)


def _by_key(messages) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for m in messages:
        key, seq = _decode(m)
        assert m.key == key
        out[key].append(seq)
    return out


def _copies(messages, key: str, seqs: list[int]) -> list[str]:
    """Where each copy of a repeated sequence number was read: one position twice is a
    reader's fault, two positions a stored re-send (CI once read one twice, on 5.0)."""
    twice = {q for q in seqs if seqs.count(q) > 1}
    return [f"{q}@{m.topic}:{m.position}" for m in messages
            for k, q in [_decode(m)] if k == key and q in twice]


def _segments_of(messages, layout) -> dict[str, set[int]]:
    out: dict[str, set[int]] = defaultdict(set)
    for m in messages:
        out[m.key].add(layout.by_backing(m.topic).id)
    return out


def test_per_key_order_holds_across_split_and_merge_with_concurrent_producers(
        sclient, scalable_name):
    topics = sclient.scalable
    topics.create(scalable_name, segments=2)
    n_producers, keys_each, rounds = 3, 8, 60
    started = threading.Barrier(n_producers + 1)
    progress = [0] * n_producers
    errors: list[BaseException] = []

    def produce(i: int) -> None:
        try:
            p = sclient.create_producer(scalable_name)
            started.wait()
            for seq in range(rounds):
                for k in range(keys_each):
                    key = f"p{i}-k{k}"
                    if i == 0:  # one producer pipelines: order must hold for async too
                        p.send_async(f"{key}:{seq}".encode(), key=key)
                    else:
                        p.send(f"{key}:{seq}".encode(), key=key)
                progress[i] = seq
            p.flush()
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(n_producers)]
    for t in threads:
        t.start()
    started.wait()

    def wait_progress(at: int) -> None:
        while min(progress) < at and all(t.is_alive() for t in threads):
            threading.Event().wait(0.01)

    wait_progress(15)
    lay = topics.split(scalable_name, 0)           # 0 -> 2, 3
    assert lay.segments[0].state is SegmentState.SEALED and lay.segments[0].end is not None
    wait_progress(35)
    lay = topics.merge(scalable_name, 3, 1)        # 3 + 1 -> 4
    for t in threads:
        t.join(120)
    assert not errors, errors

    lay = topics.layout(scalable_name, refresh=True)
    assert lay.epoch == 3
    got = list(read_all(sclient.create_reader(scalable_name), idle_ms=1500))
    seqs = _by_key(got)
    assert len(seqs) == n_producers * keys_each
    for key, s in seqs.items():
        assert s == list(range(rounds)), (f"{key}: lost, duplicated or reordered: {s}; "
                                          f"copies: {_copies(got, key, s)}")
    # the changes happened mid-stream: keys were written to parents and to children
    homes = _segments_of(got, lay)
    assert any(len(h) >= 2 for h in homes.values()), homes
    assert any(4 in h for h in homes.values()) and any(0 in h for h in homes.values())


def _txn_across_split(sclient, name, keys=10):
    topics = sclient.scalable
    topics.create(name, segments=1)
    producer = sclient.create_producer(name)
    reader = sclient.create_reader(name)
    txn = sclient.new_transaction(timeout_ms=60_000)
    for seq in range(5):
        for k in range(keys):
            producer.send(f"k{k}:{seq}".encode(), key=f"k{k}", txn=txn)
    lay = topics.split(name, 0)                    # the txn's segment is sealed mid-txn
    assert lay.segments[0].state is SegmentState.SEALED
    for seq in range(5, 10):
        for k in range(keys):
            producer.send(f"k{k}:{seq}".encode(), key=f"k{k}", txn=txn)
    assert list(read_all(reader, idle_ms=300)) == []  # nothing of an OPEN txn
    return topics, producer, reader, txn


def test_txn_spanning_a_split_commits_atomically_and_reads_once_in_key_order(
        sclient, scalable_name, plain_pulsar):
    topics, producer, reader, txn = _txn_across_split(sclient, scalable_name)
    lay = topics.layout(scalable_name, refresh=True)
    parent = lay.segments[0].backing
    before = len(raw_entries(plain_pulsar, parent))
    txn.commit()
    # commit wrote nothing to the sealed segment (no marker, no append: one CAS)
    assert len(raw_entries(plain_pulsar, parent)) == before == 50
    got = list(read_all(reader, idle_ms=1000))
    seqs = _by_key(got)
    assert len(got) == 100 and len(seqs) == 10
    for key, s in seqs.items():
        assert s == list(range(10)), f"{key}: {s}"
    homes = _segments_of(got, lay)
    assert all(0 in h and len(h) == 2 for h in homes.values()), homes  # parent, then a child
    assert {m.txn_id for m in got} == {str(txn.id)}
    # and a second reader from the beginning gets exactly the same
    again = [m.value for m in read_all(sclient.create_reader(scalable_name), idle_ms=1000)]
    assert again == [m.value for m in got] or sorted(again) == sorted(m.value for m in got)


def test_txn_spanning_a_split_aborted_shows_nothing(sclient, scalable_name):
    topics, producer, reader, txn = _txn_across_split(sclient, scalable_name)
    txn.abort()
    producer.send(b"k0:plain", key="k0")
    got = [m.value for m in read_all(reader, idle_ms=1000)]
    assert got == [b"k0:plain"]
    assert [m.value for m in read_all(sclient.create_reader(scalable_name), 1000)] == got


def test_stale_transactional_producer_is_fenced_by_registration_and_reroutes(
        sclient, make_client, broker, scalable_name, plain_pulsar):
    """A producer that missed the layout event: its write registration on the sealed
    segment fails the ACTIVE check, so it re-routes; nothing lost or duplicated."""
    sclient.scalable.create(scalable_name, segments=1)
    stale_client = make_client(admin_url=getattr(broker, "admin_url", "") or None)
    stale = stale_client.create_producer(scalable_name)
    stale_client.scalable._watch.close()           # it will miss every layout event
    for seq in range(3):
        stale.send(f"k:{seq}".encode(), key="k")
    lay = sclient.scalable.split(scalable_name, 0)
    assert stale._layout.epoch == 1               # still holds the old layout
    txn = stale_client.new_transaction()
    for seq in range(3, 8):
        stale.send(f"k:{seq}".encode(), key="k", txn=txn)
    txn.commit()
    assert stale.reroutes == 0 and stale._layout.epoch == 2  # fenced at registration
    stale.close()
    parent = [m for m in raw_entries(plain_pulsar, lay.segments[0].backing)]
    assert len(parent) == 3 and not any(PROP_TXN in m.properties() for m in parent)
    got = list(read_all(sclient.create_reader(scalable_name), idle_ms=1000))
    assert _by_key(got) == {"k": list(range(8))}


def test_stale_plain_producer_is_fenced_by_termination_and_reroutes(
        sclient, make_client, broker, scalable_name, plain_pulsar):
    """Pipelined plain sends in flight across the seal: the terminated segment refuses
    them, and the producer re-sends them to the child in order before anything newer."""
    if not getattr(broker, "admin_url", ""):
        pytest.skip(f"the {broker.kind} broker cannot terminate topics (documented fallback)")
    sclient.scalable.create(scalable_name, segments=1)
    stale_client = make_client(admin_url=broker.admin_url)
    stale = stale_client.create_producer(scalable_name)
    stale_client.scalable._watch.close()
    for seq in range(5):
        stale.send(f"k:{seq}".encode(), key="k")
    lay = sclient.scalable.split(scalable_name, 0)
    for seq in range(5, 200):
        stale.send_async(f"k:{seq}".encode(), key="k")
    stale.flush()
    assert stale.reroutes >= 1 and stale._layout.epoch == 2
    assert len(raw_entries(plain_pulsar, lay.segments[0].backing)) == 5
    stale.close()  # closing after a fence is clean
    got = list(read_all(sclient.create_reader(scalable_name), idle_ms=1000))
    assert _by_key(got) == {"k": list(range(200))}


def test_without_termination_the_end_waits_for_open_txns_that_wrote_there(
        make_client, scalable_name, plain_pulsar):
    """No topic termination (pulsar-lite's case, forced here on every broker): a txn run
    registered before the seal keeps appending to the sealed segment; the end is fixed
    only after that txn ended, so every one of its entries is inside the end."""
    admin = make_client(seal_grace_ms=100)             # no admin URL: no termination
    admin.scalable.create(scalable_name, segments=1)
    stale_client = make_client(seal_grace_ms=100)
    stale = stale_client.create_producer(scalable_name)
    stale_client.scalable._watch.close()               # misses the split
    txn = stale_client.new_transaction()
    stale.send(b"k:0", key="k", txn=txn)               # run registered on segment 0
    lay = admin.scalable.split(scalable_name, 0)
    assert lay.segments[0].end is None                 # held: a txn still writes there
    for seq in range(1, 4):
        stale.send(f"k:{seq}".encode(), key="k", txn=txn)  # appended after the seal
    txn.commit()
    got = list(read_all(admin.create_reader(scalable_name), idle_ms=1500))
    assert _by_key(got) == {"k": [0, 1, 2, 3]}
    end = admin.scalable.layout(scalable_name, refresh=True).segments[0].end
    assert end is not None
    entries = raw_entries(plain_pulsar, lay.segments[0].backing)
    last = entries[-1].message_id()
    assert (last.ledger_id(), last.entry_id()) == (end.ledger, end.entry)


def test_reader_finishes_a_seal_whose_admin_stopped_half_way(sclient, scalable_name):
    """The admin crashed after the split's CAS, before fixing the end: a reader finishes
    the seal (it never guesses the end) and reads parent, then children."""
    topics = sclient.scalable
    lay = topics.create(scalable_name, segments=1)
    p = sclient.create_producer(scalable_name)
    for seq in range(3):
        p.send(f"k:{seq}".encode(), key="k")
    from pulsar_txn.scalable.dag import plan_split

    parents, kids = plan_split(lay, 0, 1)
    for k in kids:
        topics._touch(k.backing)
    change = sclient.store.change_layout(lay.topic, lay.epoch, parents, kids, 3)
    assert change.verdict is LayoutVerdict.APPLIED     # ... and the admin died here
    assert topics.layout(scalable_name, refresh=True).segments[0].end is None
    for seq in range(3, 6):
        p.send(f"k:{seq}".encode(), key="k")           # re-routed to a child
    got = list(read_all(sclient.create_reader(scalable_name), idle_ms=2500))
    assert _by_key(got) == {"k": list(range(6))}
    assert topics.layout(scalable_name, refresh=True).segments[0].end is not None


def _landed(client, name: str, keys: list[str]) -> dict[str, int]:
    """Send one message per key; the segment each one was stored in."""
    producer = client.create_producer(name)
    for k in keys:
        producer.send(k.encode(), key=k)
    producer.flush()
    layout = client.scalable.layout(name, refresh=True)
    got = list(read_all(client.create_reader(name), 800))
    return {m.key: layout.by_backing(m.topic).id for m in got}


def test_keys_route_by_upstreams_rule_and_old_layouts_keep_theirs(sclient, make_client,
                                                                 scalable_name):
    """New layouts record Murmur3_32(key) >>> 16 (upstream's v5 client rule) and route by
    it; a layout created before the function was recorded keeps CRC-32, so its keys
    stay in the segments they were written to (migration is explicit: a new topic)."""
    from pulsar_txn.hashing import murmur3_32
    from pulsar_txn.scalable.dag import key_hash

    keys = [f"key-{i}" for i in range(40)]
    lay = sclient.scalable.create(scalable_name, segments=4)
    assert lay.hash_fn == "murmur3"
    assert sclient.scalable.describe(scalable_name, count_entries=False)["hash"] == "murmur3"
    landed = _landed(sclient, scalable_name, keys)
    assert landed == {k: lay.route(murmur3_32(k.encode()) >> 16).id for k in keys}
    legacy = scalable_name + "-old"
    sclient.scalable.create(legacy, segments=4)
    topic = legacy[len("topic://"):]
    sclient.store.r.hdel(sclient.store.keys.topic_dag(topic), "hash")  # an earlier release's
    later = make_client(admin_url=sclient.admin_url)
    old = later.scalable.layout(legacy, refresh=True)
    assert old.hash_fn == "crc32"
    landed = _landed(later, legacy, keys)
    assert landed == {k: old.route(key_hash(k, "crc32")).id for k in keys}
    assert landed != {k: old.route(key_hash(k, "murmur3")).id for k in keys}


def test_a_native_scalable_topic_of_pulsar_5_is_refused_saying_what_it_is(broker, make_client):
    """Apache Pulsar 5.0 serves its own topic:// topics (Java v5 client). pulsar-txn
    must not read, write or shadow one: it says what the name is and what works."""
    from pulsar_txn.admin import admin_request
    from pulsar_txn.errors import PulsarTxnError

    if not getattr(broker, "version", "").startswith("5."):
        pytest.skip("native scalable topics need Apache Pulsar 5.0 "
                    "(PULSAR_TXN_PULSAR_VERSION=5.0)")
    name = f"public/default/native-{uuid.uuid4().hex[:8]}"
    admin_request(broker.admin_url, "PUT", f"/admin/v2/scalable/{name}?numInitialSegments=2",
                  body={})
    client = make_client(admin_url=broker.admin_url)
    for open_topic in (client.create_producer, client.create_reader,
                       lambda t: client.scalable.create(t, segments=2)):
        with pytest.raises(PulsarTxnError) as err:
            open_topic(f"topic://{name}")
        msg = str(err.value)
        assert f"topic://{name} is a native scalable topic of Apache Pulsar 5" in msg, msg
        assert "Java v5 client" in msg and "persistent://" in msg, msg
    assert client.store.get_layout(name) is None  # nothing shadows it
