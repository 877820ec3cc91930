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
    # no live claim is left; the applied acks stay as tombstones of the committed txn
    claims = restarted.store.list_claims(c2.segment, "sub")
    assert len(claims) == 3 and set(claims.values()) == {f"={txn.id}"}


def test_committed_ack_stays_a_conflict_for_later_claims(client, topic_name):
    """Invariant 7 after the first commit: a Shared subscription may redeliver m to
    another consumer after A committed its ack; B's claim of m must conflict."""
    t = topic_name()
    _fill(client, t, 1)
    c = client.subscribe(t, "sub")
    m = c.receive(5000)
    first = client.new_transaction()
    c.acknowledge(m, txn=first)
    first.commit()
    second = client.new_transaction()
    with pytest.raises(AckConflict) as err:
        c.acknowledge(m, txn=second)  # the redelivered copy, acked under another txn
    assert err.value.holder == str(first.id)
    second.abort()


def test_committed_ack_conflicts_after_crash_recovery_and_gc(make_client, topic_name):
    """The same after a crash before the acks were applied, recovery, and header GC:
    a collected holder's claim must not be taken for an aborted one."""
    t = topic_name()
    producer_client = make_client()
    _fill(producer_client, t, 1)
    crashed = make_client()
    c = crashed.subscribe(t, "sub")
    m = c.receive(5000)
    txn = crashed.new_transaction()
    c.acknowledge(m, txn=txn)
    crashed._watch.close()
    crashed.pulsar.close()
    producer_client.coordinator.commit(txn.id)
    restarted = make_client()
    c2 = restarted.subscribe(t, "sub")
    assert c2.recovered["applied"] == 1
    assert restarted.coordinator.sweep_gc(retention_ms=0) >= 1
    assert restarted.store.get_header(txn.id) is None
    later = restarted.new_transaction()
    with pytest.raises(AckConflict):
        c2.acknowledge(m, txn=later)
    later.abort()


def test_later_cumulative_acks_pass_an_earlier_committed_cumulative_ack(client, topic_name):
    """Tombstones must not block progress: cumulative acks of successive txns move on."""
    t = topic_name()
    _fill(client, t, 3)
    c = client.subscribe(t, "sub")
    msgs = [c.receive(5000) for _ in range(3)]
    for m in msgs[1:]:
        with client.transaction() as txn:
            c.acknowledge_cumulative(m, txn=txn)
    with pytest.raises(AckConflict):  # below the committed cumulative ack
        with client.transaction() as txn:
            c.acknowledge(msgs[0], txn=txn)


def test_commit_reports_success_once_decided_even_if_applying_acks_fails(
        make_client, topic_name):
    """Hole 8: after the CAS the txn IS committed; a caller that saw an exception
    would retry and duplicate. Post-decision work is finished by recovery."""
    t = topic_name()
    client = make_client()
    _fill(client, t, 2)
    c = client.subscribe(t, "sub")
    msgs = [c.receive(5000) for _ in range(2)]
    txn = client.new_transaction()
    c.acknowledge(msgs[0], txn=txn)
    c._c.close()  # applying the ack to the cursor now fails (AlreadyClosed)
    header = txn.commit()
    assert header.state.value == "COMMITTED"
    assert client.store.get_header(txn.id).state.value == "COMMITTED"
    # a restarted consumer finishes the application: m0 is not redelivered
    c2 = make_client().subscribe(t, "sub")
    assert [m.value for m in read_all(c2, 1500)] == [b"m1"]


def test_settled_but_unmarked_holder_is_recovered_after_a_later_cumulative_commit(
        make_client, topic_name):
    """A holder whose claims became tombstones but which crashed before marking its ack
    record applied is found by recovery through its tombstones, also after another txn
    committed a cumulative ack above them (else its header could never be collected)."""
    from pulsar_txn.pending_ack import ack_key

    t = topic_name()
    client = make_client()
    _fill(client, t, 3)
    crashed = make_client(sweeper=False)
    crashed._watch.close()  # it never learns the outcome of ``first`` by itself
    c = crashed.subscribe(t, "sub")
    msgs = [c.receive(5000) for _ in range(3)]
    first = crashed.new_transaction()
    c.acknowledge(msgs[0], txn=first)
    client.coordinator.commit(first.id)  # decided elsewhere
    key = ack_key(msgs[0].position)
    # the consumer applied it, settled its claim into a tombstone, crashed before the mark
    client.store.release_acks(first.id, c.segment, "sub", [key], committed=True)
    with crashed.transaction() as later:
        c.acknowledge_cumulative(msgs[2], txn=later)
    assert client.store.get_header(first.id).open_ack_records == 1
    crashed.pulsar.close()
    c2 = make_client().subscribe(t, "sub")  # recovery on restart
    assert client.store.get_header(first.id).open_ack_records == 0
    assert c2.recovered is not None
