"""The client API's transactional sends learn their appends per broker entry on real
brokers (issue 31): the C++ producer's batches end where entry_acks foresees them, so a
transaction of thousands of keyed messages of mixed sizes commits with one callback
per entry, and a READ_COMMITTED reader gets each message once, in order. A message the
broker cannot take fails the commit; order holds across plain and transactional sends
on one producer. tests/test_producer_per_entry.py plays every other failure path.
"""

from __future__ import annotations

import pytest
from helpers import raw_entries

from pulsar_txn.errors import AppendFailed, ReadTimeout
from pulsar_txn.state import TxnState


def _read(client, topic: str, n: int, *, then_nothing: bool = False) -> list[bytes]:
    """The first ``n`` committed messages; with ``then_nothing``, a further read must
    time out (one reader for both: a second pass over a 30 MB backlog once stalled the
    lite broker under CI's load for 15 s, which said nothing about the producer)."""
    reader = client.create_reader(topic)
    try:
        got = [reader.read_next(timeout_millis=30_000).data() for _ in range(n)]
        if then_nothing:
            try:
                extra = reader.read_next(timeout_millis=1500)
            except ReadTimeout:
                return got
            got.append(extra.data())
        return got
    finally:
        reader.close()


def test_a_transaction_sent_per_entry_commits_every_message_once_in_order(client, topic_name):
    topic = topic_name("per-entry")
    p = client.create_producer(topic)
    # a run of small messages cut by count (1,000), then mixed sizes cut by bytes
    # (128 KiB): 4,000 messages, 4 MB (12,000 and 32 MB once stalled pulsar-lite for
    # over 15 s under CI's load, which said nothing about the producer)
    values = ([b"%06d:" % i for i in range(2_500)]
              + [(b"%06d:" % i) + b"x" * (i % 7 * 900) for i in range(2_500, 4_000)])
    with client.transaction() as txn:
        for i, v in enumerate(values):
            p.send_async(v, key=f"k{i % 13}", txn=txn)
    assert txn.state is TxnState.COMMITTED
    runs = p.entries._runs
    assert len(runs) == 1 and runs[0].per_entry is not None
    heard = runs[0].per_entry.heard
    assert 0 < len(heard) <= len(values) // 20  # one callback per entry, not per message
    sizes = [size for *_, size in heard]
    assert sizes.count(1_000) >= 2 and min(sizes) < 100  # cut by count, and by bytes
    assert _read(client, topic, len(values), then_nothing=True) == values


def test_a_message_the_broker_cannot_take_fails_the_per_entry_commit(client, topic_name):
    topic = topic_name("per-entry-big")
    p = client.create_producer(topic)
    txn = client.new_transaction()
    for i in range(10):
        p.send_async(b"small-%d" % i, txn=txn)
    p.send_async(b"x" * (6 * 1024 * 1024), txn=txn)  # over the broker's 5 MB maxMessageSize
    for i in range(10, 20):
        p.send_async(b"small-%d" % i, txn=txn)
    with pytest.raises(AppendFailed):
        txn.commit()
    assert txn.state is TxnState.ABORTED
    with client.transaction() as ok:
        p.send_async(b"next", txn=ok)
    assert _read(client, topic, 1) == [b"next"]


def test_plain_and_transactional_sends_keep_their_order_on_one_producer(client, topic_name):
    topic = topic_name("per-entry-order")
    p = client.create_producer(topic)
    with client.transaction() as txn:
        for i in range(300):
            p.send_async(b"t%d" % i, txn=txn)
        p.send(b"plain")
        for i in range(300, 400):
            p.send_async(b"t%d" % i, txn=txn)
    got = _read(client, topic, 401)
    assert got == [*(b"t%d" % i for i in range(300)), b"plain",
                   *(b"t%d" % i for i in range(300, 400))]


def test_an_entry_never_mixes_senders_on_the_users_producer(client, plain_pulsar, topic_name):
    """A batched entry holds one sender's messages: plain, or one transaction's. The broker
    plugin decides a whole entry (an entry filter cannot split a batch), so a plain
    message or a committed one batched with another sender's would share its fate
    (review of issue 28, finding 4). The sends go through the user's batching producer:
    with callbacks, one transaction after another, a plain send between."""
    topic = topic_name("senders")
    p = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=200)
    t1, t2 = client.new_transaction(), client.new_transaction()
    p.send_async(b"plain-0", lambda r, m: None)
    p.send(b"t1-0", txn=t1)  # T1's first append is synchronous
    p.send_async(b"t1-1", lambda r, m: None, txn=t1)
    p.send(b"t2-0", txn=t2)
    p.send_async(b"t2-1", lambda r, m: None, txn=t2)
    p.send_async(b"plain-1", lambda r, m: None)
    p.flush()
    t1.commit()
    t2.commit()
    senders: dict = {}
    for m in raw_entries(plain_pulsar, topic):
        mid = m.message_id()
        senders.setdefault((mid.ledger_id(), mid.entry_id()), set()).add(
            m.properties().get("__ptxn.txn"))
    assert len(senders) >= 4, senders
    assert all(len(s) == 1 for s in senders.values()), senders
