"""Invariant 3 and H2: replay is stable across header GC and restarts."""

from __future__ import annotations

from helpers import mixed_history, values


def test_replay_after_header_gc_is_identical(client, make_client, topic_name):
    t = topic_name()
    mixed_history(client, t)
    before = values(client.create_reader(t))
    assert before == [b"plain-0", b"c-1", b"c-2", b"win", b"plain-1"]
    removed = client.coordinator.sweep_gc(retention_ms=0)
    assert removed == 3
    assert client.store.finalized_txns() == []
    # a new client (cold: the headers are gone; only the collected record and the
    # aborted-writer sets classify the entries)
    fresh = make_client()
    assert values(fresh.create_reader(t)) == before


def test_reader_spanning_a_collection_classifies_later_txns_like_a_fresh_one(
        make_client, topic_name):
    """A long-lived reader (warm cache) meets txns it never saw before their headers
    were collected: they must be classified as a fresh reader would (aborted and
    losing-writer entries hidden), not by anything the warm client remembers."""
    t = topic_name()
    writer = make_client()
    p1, p2 = writer.create_producer(t), writer.create_producer(t)
    p1.send(b"plain-0")
    with writer.transaction() as committed:
        p1.send(b"c-1", txn=committed)
    spanning = make_client().create_reader(t)
    assert values(spanning) == [b"plain-0", b"c-1"]
    aborted = writer.new_transaction()
    p1.send(b"a-1", txn=aborted)
    aborted.abort()
    losing = writer.new_transaction()
    p1.send(b"win", txn=losing)
    p2.send(b"lose", txn=losing)
    writer.coordinator.commit(losing.id, winners=[p1.writer_id])
    p2.send(b"plain-1")
    assert writer.coordinator.sweep_gc(retention_ms=0) == 3
    assert values(spanning) == [b"win", b"plain-1"]


def test_replay_from_a_position_is_identical(client, make_client, topic_name):
    t = topic_name()
    mixed_history(client, t)
    msgs = list(__import__("pulsar_txn.client", fromlist=["read_all"]).read_all(
        client.create_reader(t), 400))
    start = msgs[1].position  # replay strictly after the second delivered message
    first = values(client.create_reader(t, start=start))
    client.coordinator.sweep_gc(retention_ms=0)
    again = values(make_client().create_reader(t, start=start))
    assert first == again == [m.value for m in msgs[2:]]
