"""Invariant 3 and H2: replay is stable across header GC and restarts."""

from __future__ import annotations

from helpers import values


def _mixed_history(client, t):
    p1, p2 = client.create_producer(t), client.create_producer(t)
    p1.send(b"plain-0")
    committed = client.new_transaction()
    p1.send(b"c-1", txn=committed)
    p2.send(b"c-2", txn=committed)
    committed.commit()
    aborted = client.new_transaction()
    p1.send(b"a-1", txn=aborted)
    aborted.abort()
    losing = client.new_transaction()
    p1.send(b"win", txn=losing)
    p2.send(b"lose", txn=losing)
    client.coordinator.commit(losing.id, winners=[p1.writer_id])
    p2.send(b"plain-1")


def test_replay_after_header_gc_is_identical(client, make_client, topic_name):
    t = topic_name()
    _mixed_history(client, t)
    before = values(client.create_reader(t))
    assert before == [b"plain-0", b"c-1", b"c-2", b"win", b"plain-1"]
    removed = client.coordinator.sweep_gc(retention_ms=0)
    assert removed == 3
    assert client.store.finalized_txns() == []
    # same client (warm cache), and a new client (cold: headers are gone)
    assert values(client.create_reader(t)) == before
    fresh = make_client()
    assert values(fresh.create_reader(t)) == before


def test_replay_from_a_position_is_identical(client, make_client, topic_name):
    t = topic_name()
    _mixed_history(client, t)
    msgs = list(__import__("pulsar_txn.client", fromlist=["read_all"]).read_all(
        client.create_reader(t), 400))
    start = msgs[1].position  # replay strictly after the second delivered message
    first = values(client.create_reader(t, start=start))
    client.coordinator.sweep_gc(retention_ms=0)
    again = values(make_client().create_reader(t, start=start))
    assert first == again == [m.value for m in msgs[2:]]
