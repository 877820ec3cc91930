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
    # same client (warm cache), and a new client (cold: headers are gone)
    assert values(client.create_reader(t)) == before
    fresh = make_client()
    assert values(fresh.create_reader(t)) == before


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
