"""Invariant 4 (one decision, nothing appended at end) and H5 (v4/v5 separation)."""

from __future__ import annotations

import threading

import pytest
from helpers import raw_entries, values

from pulsar_txn.errors import InvalidTxnId, InvalidTxnTransition, TxnNotFound
from pulsar_txn.records import PROP_TXN, TxnId, entry_txn
from pulsar_txn.state import TxnState


def test_end_is_idempotent_and_opposite_end_conflicts(client):
    txn = client.new_transaction()
    h1 = client.coordinator.commit(txn.id)
    h2 = client.coordinator.commit(txn.id)  # a repeat is a success, nothing changes
    assert h1 == h2 and h1.state is TxnState.COMMITTED
    with pytest.raises(InvalidTxnTransition):
        client.coordinator.abort(txn.id)
    assert client.coordinator.get(txn.id).state is TxnState.COMMITTED


def test_concurrent_commit_and_abort_decide_once(client):
    for _ in range(20):
        txn = client.new_transaction()
        results: dict[str, object] = {}
        barrier = threading.Barrier(2)

        def end(name, fn, txn=txn, results=results, barrier=barrier):
            barrier.wait()
            try:
                results[name] = fn(txn.id).state
            except InvalidTxnTransition as e:
                results[name] = e

        ts = [threading.Thread(target=end, args=("c", client.coordinator.commit)),
              threading.Thread(target=end, args=("a", client.coordinator.abort))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        final = client.coordinator.get(txn.id).state
        winners = [v for v in results.values() if isinstance(v, TxnState)]
        losers = [v for v in results.values() if isinstance(v, InvalidTxnTransition)]
        assert winners == [final] and len(losers) == 1


def test_unknown_txn_end_is_not_found(client):
    with pytest.raises(TxnNotFound):
        client.coordinator.commit(TxnId(0, 999_999_999))


def test_one_append_per_send_and_no_marker_entries(client, plain_pulsar, topic_name):
    """Read the backing topics with a plain pulsar-client reader: exactly the sends."""
    a, b = topic_name("a"), topic_name("b")
    pa, pb = client.create_producer(a), client.create_producer(b)
    t1 = client.new_transaction()
    for i in range(7):
        pa.send(b"a%d" % i, txn=t1)
    pb.send(b"b", txn=t1)
    t1.commit()
    t2 = client.new_transaction()
    pa.send(b"aborted", txn=t2)
    t2.abort()
    pa.send(b"plain")
    raw_a, raw_b = raw_entries(plain_pulsar, a), raw_entries(plain_pulsar, b)
    assert [m.data() for m in raw_a] == [b"a%d" % i for i in range(7)] + [b"aborted", b"plain"]
    assert [m.data() for m in raw_b] == [b"b"]
    dep = client.store.deployment
    for m in raw_a[:8] + raw_b:
        t, writer = entry_txn(m.properties(), dep)
        assert TxnId.parse(t) and writer
    assert PROP_TXN not in raw_a[-1].properties()


def test_v4_txn_ids_are_refused(client):
    for v4 in ("(1,5)", "1:5", "TxnID(mostSigBits=1, leastSigBits=5)", "v4:1:5", ""):
        with pytest.raises(InvalidTxnId):
            TxnId.parse(v4)


def test_plain_topics_unchanged_for_plain_clients(client, plain_pulsar, topic_name):
    """A persistent:// topic used without this layer behaves as before (H5)."""
    t = topic_name()
    p = plain_pulsar.create_producer(t)
    for i in range(5):
        p.send(b"p%d" % i, properties={"k": str(i)})
    assert [m.data() for m in raw_entries(plain_pulsar, t)] == [b"p%d" % i for i in range(5)]
    msgs = [m for m in __import__("pulsar_txn.client", fromlist=["x"]).read_all(
        client.create_reader(t), 300)]
    assert [m.value for m in msgs] == [b"p%d" % i for i in range(5)]
    assert [m.properties for m in msgs] == [{"k": str(i)} for i in range(5)]
    assert all(m.txn_id is None for m in msgs)
    assert values(client.create_reader(t)) == [b"p%d" % i for i in range(5)]
