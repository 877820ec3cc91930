"""``Consumer.acknowledge_async`` on a real broker and Redis: the transaction's acks are
claimed in one go at its commit (as the Java client's ``acknowledgeAsync(id, txn)``
sends them ahead of ``commit()``), with invariant 7 intact: a committed txn consumes
exactly the messages it acked (inside a batched entry too), a conflict found at the
commit aborts it and hands every message out again, and a consumer that hands
messages out of its buffer re-reads the claim table only when it changed.
"""

from __future__ import annotations

import pulsar
import pytest

from pulsar_txn.client import quiet_logger, read_all
from pulsar_txn.errors import AckConflict, TxnNotOpen
from pulsar_txn.pending_ack import PendingAckStore
from pulsar_txn.records import Position
from pulsar_txn.state import TxnState

N = 5


@pytest.fixture
def fill(broker, make_client):
    """m0..m4 in one batched entry (the case pulsar-client's whole-entry acks make
    hard; test_acks_batched.py runs the synchronous acks on unbatched input too)."""
    batched = True
    make_client().new_transaction().abort()  # the namespace exists

    def write(topic: str) -> None:
        c = pulsar.Client(broker.service_url, logger=quiet_logger())
        try:
            p = c.create_producer(topic, batching_enabled=batched, batching_max_messages=N,
                                  batching_max_publish_delay_ms=60_000)
            for i in range(N):
                p.send_async(b"m%d" % i, None)
            p.flush()
            p.close()
        finally:
            c.close()
    return write


def _fresh_values(make_client, t: str, sub: str = "sub") -> list[bytes]:
    c = make_client().subscribe(t, sub)
    got = []
    for m in read_all(c, 2500):
        got.append(m.value)
        c.acknowledge(m)
    c.close()
    return sorted(got)


def test_async_acks_commit_exactly_the_acked_messages(make_client, fill, topic_name):
    t = topic_name()
    fill(t)
    client = make_client()
    c = client.subscribe(t, "sub")
    msgs = [c.receive(5000) for _ in range(N)]
    with client.transaction() as txn:
        c.acknowledge_async(msgs[0], txn=txn)
        c.acknowledge_async(msgs[3], txn=txn)
        assert client.store.list_claims(c.segment, "sub").live == {}  # not asked yet
    c.close()
    assert _fresh_values(make_client, t) == [b"m1", b"m2", b"m4"]


def test_a_conflict_found_at_the_commit_aborts_and_hands_every_message_out_again(
        make_client, fill, topic_name):
    """Another consumer's open txn holds m1 (a Shared subscription): T acks m0, m1 and
    m2 asynchronously; its commit finds the conflict, raises it, aborts, and m0..m2 are
    delivered again (none consumed); once the holder aborts, a commit takes them."""
    t = topic_name()
    fill(t)
    client = make_client()
    shared = dict(consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=1)
    a = client.subscribe(t, "sub", **shared)
    got = {}
    for m in read_all(a, 2500):
        got[m.value] = m
    holder = client.new_transaction()
    a.acknowledge(got[b"m1"], txn=holder)
    txn = client.new_transaction()
    for v in (b"m0", b"m1", b"m2"):
        a.acknowledge_async(got[v], txn=txn)
    with pytest.raises(AckConflict) as e:
        txn.commit()
    assert e.value.holder == str(holder.id)
    assert txn.state is TxnState.ABORTED
    again = sorted(m.value for m in read_all(a, 2500))
    assert set(again) >= {b"m0", b"m2"}
    holder.abort()
    a.close()
    assert _fresh_values(make_client, t) == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_an_async_ack_after_the_commit_or_twice_in_a_txn_is_refused(
        make_client, fill, topic_name):
    t = topic_name()
    fill(t)
    client = make_client()
    c = client.subscribe(t, "sub")
    msgs = [c.receive(5000) for _ in range(N)]
    txn = client.new_transaction()
    c.acknowledge_async(msgs[0], txn=txn)
    with pytest.raises(AckConflict):
        c.acknowledge_async(msgs[0], txn=txn)
    txn.commit()
    with pytest.raises(TxnNotOpen):
        c.acknowledge_async(msgs[1], txn=txn)
    c.close()
    assert _fresh_values(make_client, t) == [b"m1", b"m2", b"m3", b"m4"]


def test_a_buffered_message_consumed_elsewhere_meanwhile_is_not_handed_out(
        make_client, fill, topic_name):
    """The claim table is re-read at hand-out only when it changed: consumer B holds
    m0..m4 in its buffer (checked when received); consumer A's txn consumes m3 and
    commits; B then hands out the rest except that one (acked again on the cursor). It
    fails if the server's invalidation does not reach B (B would not ask again)."""
    t = topic_name()
    fill(t)
    client_a, client_b = make_client(), make_client()
    b = client_b.subscribe(t, "sub", consumer_type=pulsar.ConsumerType.Shared)
    first = b.receive(5000)  # B pulled the whole batch; hands out one
    with client_b.transaction() as tb:  # B has transactional claims on the table
        b.acknowledge_async(first, txn=tb)
    b.receive(5000)  # B re-reads the claim table (its own commit wrote it) and hands
    # out the next: from now on only an invalidation from the server makes it ask again
    # A's txn consumes the message B holds last (as if the broker had handed it to A
    # after B's connection dropped), through A's own PendingAckStore
    held = b.held_keys()
    assert held, "B holds the rest of the input in its buffer"
    p = Position(*held[-1])
    acks = PendingAckStore(client_a.store, b.segment, "sub", apply=lambda ps, cum: None)
    ta = client_a.new_transaction()
    ta.enlist(acks)
    acks.acknowledge(ta.id, [p])
    ta.commit()
    handed = [m.position for m in read_all(b, 2500)]
    assert p not in handed and len(handed) == len(held) - 1
    assert b.reacked == 1
