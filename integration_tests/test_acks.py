"""Invariant 7: transactional acks apply iff the txn commits; two txns cannot ack one message."""

from __future__ import annotations

import pytest

from pulsar_txn.client import read_all
from pulsar_txn.errors import AckConflict, ReadTimeout


def _fill(client, t, n):
    p = client.create_producer(t)
    for i in range(n):
        p.send(b"m%d" % i)


def test_acks_applied_iff_txn_commits(make_client, topic_name):
    client = make_client()
    t = topic_name()
    _fill(client, t, 3)
    c = client.subscribe(t, "sub")
    msgs = [c.receive(5000) for _ in range(3)]
    aborted = client.new_transaction()
    for m in msgs:
        c.acknowledge(m, txn=aborted)
    aborted.abort()
    c.close()
    # abort released the acks: the subscription still holds the messages
    c = make_client().subscribe(t, "sub")
    msgs = [m for m in read_all(c, 1500)]
    assert sorted(m.value for m in msgs) == [b"m0", b"m1", b"m2"]
    committed = client.new_transaction()
    for m in msgs:
        c.acknowledge(m, txn=committed)
    committed.commit()
    c.close()
    # a new consumer on the same subscription gets nothing: the acks reached the cursor
    again = make_client().subscribe(t, "sub")
    with pytest.raises(ReadTimeout):
        again.receive(1500)


def test_two_txns_cannot_ack_the_same_message(client, topic_name):
    t = topic_name()
    _fill(client, t, 1)
    c = client.subscribe(t, "sub")
    m = c.receive(5000)
    first, second = client.new_transaction(), client.new_transaction()
    c.acknowledge(m, txn=first)
    with pytest.raises(AckConflict) as err:
        c.acknowledge(m, txn=second)
    assert err.value.holder == str(first.id)
    # cumulative acks conflict with the other txn's claims below them too
    with pytest.raises(AckConflict):
        c.acknowledge_cumulative(m, txn=second)
    second.abort()
    first.commit()


def test_claim_of_an_aborted_txn_is_released_for_the_next(client, topic_name):
    t = topic_name()
    _fill(client, t, 1)
    c = client.subscribe(t, "sub")
    m = c.receive(5000)
    first = client.new_transaction()
    c.acknowledge(m, txn=first)
    # end it behind the consumer's back (as another process would): claim left behind
    client.coordinator.abort(first.id)
    second = client.new_transaction()
    c.acknowledge(m, txn=second)  # the aborted holder's claim is void
    second.commit()


def test_consumer_crash_between_commit_and_ack_application_recovers(
        make_client, topic_name):
    t = topic_name()
    producer_client = make_client()
    _fill(producer_client, t, 4)
    crashed = make_client()
    c = crashed.subscribe(t, "sub")
    msgs = [c.receive(5000) for _ in range(4)]
    txn = crashed.new_transaction()
    for m in msgs[:3]:
        c.acknowledge(m, txn=txn)
    # crash: the process dies before it learns the outcome (no watch, no materialization)
    crashed._watch.close()
    crashed.pulsar.close()
    # the decision is taken elsewhere (e.g. a coordinator / the Spark driver)
    producer_client.coordinator.commit(txn.id)
    assert producer_client.store.get_header(txn.id).open_ack_records == 1
    # a restarted consumer on the subscription recovers from the ack index
    restarted = make_client()
    c2 = restarted.subscribe(t, "sub")
    assert c2.recovered["applied"] == 1
    assert [m.value for m in read_all(c2, 1500)] == [b"m3"]
    assert restarted.store.get_header(txn.id).open_ack_records == 0
    assert restarted.store.list_claims(c2.segment, "sub") == {}
