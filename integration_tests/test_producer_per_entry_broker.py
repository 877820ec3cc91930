"""The client API's transactional sends learn their appends per broker entry on real
brokers (issue 31): the C++ producer's batches end where entry_acks foresees them, so a
transaction of thousands of keyed messages of mixed sizes commits with one callback
per entry, and a READ_COMMITTED reader gets each message once, in order. A message the
broker cannot take fails the commit; order holds across plain and transactional sends
on one producer. tests/test_producer_per_entry.py plays every other failure path.
"""

from __future__ import annotations

import pytest

from pulsar_txn.errors import AppendFailed, ReadTimeout
from pulsar_txn.state import TxnState


def _read(client, topic: str, n: int, *, then_nothing: bool = False) -> list[bytes]:
    """The first ``n`` committed messages; with ``then_nothing``, a further read must
    time out (one reader for both: a second pass over a 30 MB backlog once stalled the
    lite broker under CI's load for 15 s, which said nothing about the producer)."""
    reader = client.create_reader(topic)
    try:
        got = [reader.read_next(timeout_millis=15_000).data() for _ in range(n)]
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
    # sizes that cut batches by bytes (128 KiB) as well as by count (1,000)
    values = [(b"%06d:" % i) + b"x" * (i % 7 * 900) for i in range(12_000)]
    with client.transaction() as txn:
        for i, v in enumerate(values):
            p.send_async(v, key=f"k{i % 13}", txn=txn)
    assert txn.state is TxnState.COMMITTED
    runs = p.entries._runs
    assert len(runs) == 1 and runs[0].per_entry is not None
    heard = runs[0].per_entry.heard
    assert 0 < len(heard) <= len(values) // 20  # one callback per entry, not per message
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
