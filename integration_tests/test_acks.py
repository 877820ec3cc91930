"""Invariant 7: transactional acks apply iff the txn commits; two txns cannot ack one message."""

from __future__ import annotations

import time

import pytest

from pulsar_txn.client import read_all
from pulsar_txn.errors import AckConflict, ReadTimeout
from pulsar_txn.records import Position


@pytest.fixture(autouse=True, params=["unbatched", "batched"])
def _batching(request):
    """Every test here runs on input written one message per entry and on input
    written as one batched entry (what a batching producer or the Spark sink writes):
    an ack must affect exactly its messages either way."""
    global _BATCHED
    _BATCHED = request.param == "batched"
    yield
    _BATCHED = False


_BATCHED = False


def _fill(client, t, n):
    if not _BATCHED:
        p = client.create_producer(t)
        for i in range(n):
            p.send(b"m%d" % i)
        return
    p = client.create_producer(t, batching_enabled=True, batching_max_messages=max(n, 2),
                               batching_max_publish_delay_ms=60_000)
    for i in range(n):
        p.send_async(b"m%d" % i, None)
    p.flush()


def _exclusive_that_redelivers(make_client, broker, topic_name):
    """Two messages and an Exclusive consumer, on a broker that redelivers negative acks."""
    if broker.kind == "lite":
        pytest.skip("pulsar-lite 0.2 does not redeliver negatively acked messages on an "
                    "Exclusive subscription")
    client = make_client()
    t = topic_name()
    _fill(client, t, 2)
    return client, client.subscribe(t, "sub")


def test_an_aborted_ack_hands_the_message_out_again(make_client, broker, topic_name):
    """Abort releases a txn's acks and the same Exclusive consumer gets the messages
    again (the broker rewinds; its copies must pass the consumer's duplicate filter)."""
    client, c = _exclusive_that_redelivers(make_client, broker, topic_name)
    m0 = c.receive(5000)
    txn = client.new_transaction()
    c.acknowledge(m0, txn=txn)
    txn.abort()
    # m0 again, once; m1 (never handed out before) once: no duplicate of either
    assert sorted(m.value for m in read_all(c, 3000)) == [b"m0", b"m1"]


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
    crashed.read_pulsar.close()  # its consumers (and producers) die with the process
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
    assert (claims.live, claims.cumulative, claims.committed, claims.trimmed) == ({}, None,
                                                                                  None, None)
    assert len(claims.tombstones) == 3 and set(claims.tombstones.values()) == {txn.id}


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
    crashed.read_pulsar.close()  # its consumers (and producers) die with the process
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
    key = msgs[0].position
    # the consumer applied it, settled its claim into a tombstone, crashed before the mark
    client.store.release_acks(first.id, c.segment, "sub", [key], committed=True)
    with crashed.transaction() as later:
        c.acknowledge_cumulative(msgs[2], txn=later)
    assert client.store.get_header(first.id).open_ack_records == 1
    crashed.read_pulsar.close()  # its consumers (and producers) die with the process
    crashed.pulsar.close()
    c2 = make_client().subscribe(t, "sub")  # recovery on restart
    assert client.store.get_header(first.id).open_ack_records == 0
    assert c2.recovered is not None


def _consumer_switch(make_client, t, n):
    """Consumer A gets ``n`` messages and acks some under a txn; the returned
    ``switch()`` makes A lose the subscription before any of its acks reached the
    cursor, and B take it over and get all ``n`` again (a Failover switch, or an
    Exclusive consumer replaced after a crash). Returns (client, A, A's messages,
    switch)."""
    client = make_client()
    _fill(client, t, n)
    a = client.subscribe(t, "sub")
    a_msgs = [a.receive(5000) for _ in range(n)]

    current = [a]

    def switch():
        current[0]._c.close()
        current[0] = make_client().subscribe(t, "sub")
        return current[0]
    return client, a, a_msgs, switch


def _settle_elsewhere(client, consumer, txn, positions, cumulative=False):
    """The holder's consumer applied its ack and turned its claim into a tombstone
    (what ``commit`` does), but the broker switched consumers before the ack landed."""
    client.coordinator.commit(txn.id)
    client.store.release_acks(txn.id, consumer.segment, "sub",
                              [] if cumulative else positions, committed=True,
                              cumulative=cumulative)


def _acked_by_a_then_cumulatively_by_b(make_client, topic_name, cumulative: bool) -> None:
    """A acks m1 (individually) or m0..m1 (cumulatively) under a txn that commits; B,
    which got m0..m2 again after the switch, acks cumulatively up to m2 under another
    txn: that must conflict with A's committed ack."""
    client, a, a_msgs, switch = _consumer_switch(make_client, topic_name(), 3)
    first = client.new_transaction()
    if cumulative:
        a.acknowledge_cumulative(a_msgs[1], txn=first)
    else:
        a.acknowledge(a_msgs[1], txn=first)
    b = switch()  # A loses the subscription: its messages go to B
    b_msgs = [b.receive(5000) for _ in range(3)]
    assert [m.value for m in b_msgs] == [b"m0", b"m1", b"m2"]
    _settle_elsewhere(client, a, first, [] if cumulative else [a_msgs[1].position],
                      cumulative=cumulative)
    second = client.new_transaction()
    with pytest.raises(AckConflict) as err:
        b.acknowledge_cumulative(b_msgs[2], txn=second)
    assert err.value.holder == str(first.id) and err.value.committed
    second.abort()


def test_cumulative_ack_conflicts_with_a_redelivered_individually_acked_message(
        make_client, topic_name):
    """Invariant 7 across a Failover switch: A acked m1 under a committed txn; B got
    m0..m2 again and acks cumulatively up to m2 under another txn. m1's output would
    exist twice: the cumulative claim must conflict with m1's tombstone."""
    _acked_by_a_then_cumulatively_by_b(make_client, topic_name, cumulative=False)


def test_cumulative_ack_conflicts_with_a_redelivered_cumulatively_acked_message(
        make_client, topic_name):
    """The same with A's cumulative ack of m0..m1: B's cumulative ack up to m2 must
    conflict, though m2 is above A's ack."""
    _acked_by_a_then_cumulatively_by_b(make_client, topic_name, cumulative=True)


def test_cumulative_ack_passes_tombstones_of_messages_it_was_not_given(
        make_client, topic_name):
    """No false conflicts: a cumulative ack over messages another consumer acked, and
    this one never received, is the normal case of Pulsar's cumulative acks; so is a
    cumulative ack over this consumer's own committed individual ack."""
    client, a, a_msgs, switch = _consumer_switch(make_client, topic_name(), 4)
    with client.transaction() as first:
        a.acknowledge(a_msgs[1], txn=first)
    with client.transaction() as second:
        a.acknowledge_cumulative(a_msgs[0], txn=second)
    b = switch()
    b_msgs = list(read_all(b, 1500))
    assert [m.value for m in b_msgs] == [b"m2", b"m3"]
    with client.transaction() as third:
        b.acknowledge(b_msgs[0], txn=third)
    with client.transaction() as fourth:
        b.acknowledge_cumulative(b_msgs[1], txn=fourth)
    assert list(read_all(switch(), 1500)) == []


def _tombstones(client, consumer):
    return sorted(client.store.list_claims(consumer.segment, "sub").tombstones)


def test_tombstones_below_a_committed_cumulative_ack_are_trimmed(make_client, topic_name):
    """Tombstones do not grow without bound: once a committed cumulative ack covers a
    message (and its holder's ack record is marked), '~tomb' alone is the conflict."""
    t = topic_name()
    client = make_client()
    _fill(client, t, 4)
    c = client.subscribe(t, "sub")
    msgs = [c.receive(5000) for _ in range(4)]
    for m in msgs[:3]:
        with client.transaction() as txn:
            c.acknowledge(m, txn=txn)
    assert len(_tombstones(client, c)) == 3
    with client.transaction() as txn:
        c.acknowledge_cumulative(msgs[3], txn=txn)
    c.acks.trim()
    assert _tombstones(client, c) == []
    with pytest.raises(AckConflict):  # the conflict holds through '~tomb'
        with client.transaction() as later:
            c.acknowledge(msgs[1], txn=later)


def test_tombstones_of_unmarked_holders_survive_trimming(make_client, topic_name):
    """A tombstone is its holder's trace until its ack record is marked applied:
    trimming must keep it (else recovery cannot find the holder, and its header is
    never collected)."""
    t = topic_name()
    client = make_client()
    _fill(client, t, 3)
    crashed = make_client(sweeper=False)
    crashed._watch.close()
    c = crashed.subscribe(t, "sub")
    msgs = [c.receive(5000) for _ in range(3)]
    first = crashed.new_transaction()
    c.acknowledge(msgs[0], txn=first)
    client.coordinator.commit(first.id)
    client.store.release_acks(first.id, c.segment, "sub", [msgs[0].position],
                              committed=True)  # crashed before the mark
    with crashed.transaction() as later:
        c.acknowledge_cumulative(msgs[2], txn=later)
    c.acks.trim()
    assert _tombstones(client, c) == [msgs[0].position]


def test_tombstones_behind_the_subscription_cursor_are_trimmed(
        make_client, broker, topic_name):
    """Shared subscriptions ack one by one: once the broker's cursor (mark-delete
    position, admin API) is past a message, it is never delivered again and its
    tombstone goes."""
    import pulsar

    if not getattr(broker, "admin_url", None):
        pytest.skip(f"the {broker.kind} broker has no admin API (documented: "
                    "tombstones trimmed by cumulative acks only)")
    t = topic_name()
    client = make_client(admin_url=broker.admin_url)
    _fill(client, t, 3)
    c = client.subscribe(t, "sub", consumer_type=pulsar.ConsumerType.Shared)
    msgs = [c.receive(5000) for _ in range(3)]
    with client.transaction() as txn:
        for m in msgs[:2]:
            c.acknowledge(m, txn=txn)
    assert len(_tombstones(client, c)) == 2
    c.acknowledge(msgs[2])  # a batched entry reaches the cursor once all of it is acked
    last = msgs[1].position
    deadline = time.monotonic() + 10  # the client groups acks: the cursor moves soon
    while (c._cursor() or Position(-1, -1)) < Position(last.ledger, last.entry):
        assert time.monotonic() < deadline, "the broker's cursor never moved"
        time.sleep(0.05)
    c.acks.trim()
    assert _tombstones(client, c) == []
    # a copy the broker handed out before its cursor moved (prefetched by another
    # consumer) is still a conflict: what lies behind the trimmed cursor was acked
    for m in msgs[:2]:
        with pytest.raises(AckConflict) as err:
            with client.transaction() as late:
                c.acknowledge(m, txn=late)
        assert err.value.committed
    # a consumer started later recovers over the trimmed table
    later = make_client().subscribe(t, "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert later.recovered["open"] == 0
    later.close()


def test_a_copy_handed_out_again_after_an_aborted_own_ack_is_checked_again(
        make_client, broker, topic_name):
    """The consumer's own individual ack exempts a message from its later cumulative
    ack only while that ack stands: after its txn aborted and the message came back,
    another txn's committed ack of it must conflict again."""
    client, c = _exclusive_that_redelivers(make_client, broker, topic_name)
    m0, m1 = c.receive(5000), c.receive(5000)
    aborted = client.new_transaction()
    c.acknowledge(m0, txn=aborted)
    aborted.abort()  # released and negatively acked: m0 comes back
    again = c.receive(5000)
    assert again.value == b"m0"
    # another consumer's committed ack of m0 (its own pending-ack store, its own apply)
    from pulsar_txn.pending_ack import PendingAckStore

    other = PendingAckStore(client.store, c.segment, "sub", apply=lambda ps, cum: None)
    elsewhere = client.new_transaction()
    elsewhere.enlist(other)
    other.acknowledge(elsewhere.id, [again.position])
    elsewhere.commit()
    later = client.new_transaction()
    with pytest.raises(AckConflict) as err:
        c.acknowledge_cumulative(m1, txn=later)
    assert err.value.holder == str(elsewhere.id)
    later.abort()
