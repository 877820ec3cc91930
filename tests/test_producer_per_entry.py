"""The client API's transactional ``send_async`` (no callback) learns its appends per
broker entry, as the Spark sink does (issue 31), and its commit still proves every
message stored: a batch answered without a position, a failed batch, a message
refused without a word and a batch cut where it was not foreseen each fail the
commit. Sends keep their order across the user's producer and the per-entry one,
and transactions sharing a producer never share an entry.

The producers are stand-ins that batch as pulsar-client's C++ producer does
(test_entry_acks.BatchingProducer), all appending to one log, so the order of the
topic is observable. No broker: integration_tests/test_producer_per_entry_broker.py runs the
same path on both real brokers.
"""

from __future__ import annotations

import threading

import pulsar
import pytest
from test_entry_acks import BatchingProducer, _values

from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.errors import AppendFailed, TxnNotOpen
from pulsar_txn.metastore import MemoryMetadataStore
from pulsar_txn.producer import Producer
from pulsar_txn.records import PROP_TXN
from pulsar_txn.state import TxnState
from pulsar_txn.transaction import Transaction

PER_ENTRY_DELAY = 3_600_000


class _Logged(BatchingProducer):
    """A batching producer whose stored entries also go to the topic's shared log."""

    def __init__(self, log: list, kw: dict, pause=None, **faults) -> None:
        super().__init__(max_messages=kw.get("batching_max_messages", 1000),
                         max_bytes=kw.get("batching_max_allowed_size_in_bytes", 128 * 1024),
                         **faults)
        self.log, self.kw, self.closed = log, kw, False
        self.pause = pause  # (message number, reached, go): stop there until go is set

    def send_async(self, value, callback, properties=None, **kw) -> None:
        if self.pause is not None and self.number == self.pause[0]:
            self.pause[1].set()
            self.pause[2].wait(10)
        super().send_async(value, callback, properties, **kw)

    def flush(self) -> None:
        before = len(self.entries)
        super().flush()
        for entry in self.entries[before:]:
            self.log.extend(entry)

    def flush_async(self, callback) -> None:
        self.flush()
        callback(pulsar.Result.Ok, None)

    def send(self, value, properties=None, **kw):
        got: list = []
        self.send_async(value, lambda r, m: got.append(m), properties, **kw)
        self.flush()  # pulsar-client's time trigger, at once
        return got[0]

    def close(self) -> None:
        self.flush()
        self.closed = True


class _Client:
    """create_producer as pulsar-client's; ``faults`` apply to the per-entry producer."""

    def __init__(self, refuse_per_entry: bool = False, **faults) -> None:
        self.faults, self.log, self.made = faults, [], []
        self.refuse_per_entry = refuse_per_entry

    def create_producer(self, topic: str, **kw):
        per_entry = kw.get("batching_max_publish_delay_ms") == PER_ENTRY_DELAY
        if per_entry and self.refuse_per_entry:
            raise pulsar.Timeout("creating the producer timed out")
        p = _Logged(self.log, kw, **(self.faults if per_entry else {}))
        self.made.append(p)
        return p

    @property
    def per_entry(self) -> _Logged | None:
        return next((p for p in self.made
                     if p.kw.get("batching_max_publish_delay_ms") == PER_ENTRY_DELAY), None)


@pytest.fixture
def store():
    return MemoryMetadataStore(partitions=4)


@pytest.fixture
def coord(store):
    return TransactionCoordinator(store, materialize_inline=True)


def _txn(store, coord) -> Transaction:
    return Transaction(store, coord.new_transaction(), coord)


def _producer(client, **kw) -> Producer:
    return Producer(client, "orders", **{"batching_max_messages": 100, **kw})


def test_a_transaction_learns_its_appends_per_entry_and_commits_every_message(store, coord):
    client = _Client()
    p = _producer(client)
    txn = _txn(store, coord)
    values = _values(5000)
    for i, v in enumerate(values):
        p.send_async(v, key=f"k{i % 7}", txn=txn)
    txn.commit()
    assert txn.state is TxnState.COMMITTED
    assert client.log == values
    entries = client.per_entry
    assert entries is not None and entries.callbacks <= 2 * len(entries.entries) + 2
    assert all(list(props) == [PROP_TXN] for props in entries.properties)
    assert client.made[0].number == 0  # nothing went through the user's producer


@pytest.mark.parametrize("fault", [{"answer": {7: "dup"}}, {"answer": {2: pulsar.Result.Timeout}},
                                   {"refuse": {777}}, {"cut_after": {1234}}])
def test_a_transaction_missing_a_message_never_commits(store, coord, fault):
    """A batch answered without a position (a dedup answer), a failed batch, a message
    refused without a callback, a batch cut where it was not foreseen: the commit
    raises and the transaction aborts."""
    client = _Client(**fault)
    p = _producer(client)
    txn = _txn(store, coord)
    for v in _values(3000):
        p.send_async(v, txn=txn)
    with pytest.raises(AppendFailed):
        txn.commit()
    assert txn.state is TxnState.ABORTED
    assert client.per_entry.callbacks < 100  # it was the per-entry path that failed closed


def test_after_an_unforeseen_cut_the_producer_hears_every_message(store, coord):
    """The batching rule did not hold on this client: that transaction failed closed,
    and the producer's later ones hear of every message (and commit)."""
    client = _Client(cut_after={150})
    p = _producer(client)
    first = _txn(store, coord)
    for v in _values(300):
        p.send_async(v, txn=first)
    with pytest.raises(AppendFailed):
        first.commit()
    second = _txn(store, coord)
    values = _values(300, start=1000)
    for v in values:
        p.send_async(v, txn=second)
    second.commit()
    assert second.state is TxnState.COMMITTED
    assert client.made[0].callbacks == len(values)  # the user's producer, per message
    assert client.log[-300:] == values


def test_sends_keep_their_order_across_plain_and_transactional_sends(store, coord):
    client = _Client()
    p = _producer(client)
    txn = _txn(store, coord)
    for v in _values(250):
        p.send_async(v, txn=txn)
    p.send(b"plain-1")  # after the 250 in the topic, as on one producer
    p.send_async(b"plain-2", callback=lambda r, m: None)
    for v in _values(50, start=250):
        p.send_async(v, txn=txn)  # after plain-2
    txn.commit()
    assert client.log == [*_values(250), b"plain-1", b"plain-2", *_values(50, start=250)]


def test_transactions_sharing_a_producer_never_share_an_entry(store, coord):
    client = _Client()
    p = _producer(client)
    a, b = _txn(store, coord), _txn(store, coord)
    for i in range(2000):
        p.send_async(b"a%d" % i if i % 2 == 0 else b"b%d" % i, txn=a if i % 2 == 0 else b)
    a.commit()
    b.commit()
    assert a.state is TxnState.COMMITTED and b.state is TxnState.COMMITTED
    assert sorted(client.log) == sorted(b"a%d" % i if i % 2 == 0 else b"b%d" % i
                                        for i in range(2000))
    for entry in client.per_entry.entries:
        assert len({v[:1] for v in entry}) == 1, entry[:3]


def test_an_aborted_transactions_sends_are_never_appended(store, coord):
    client = _Client()
    p = _producer(client)
    txn = _txn(store, coord)
    for v in _values(50):
        p.send_async(v, txn=txn)
    txn.abort()
    p.send(b"plain")
    p.flush()
    assert client.log == [b"plain"]


class _LateSender:
    """A send of another thread that lands while the commit flushes, after the
    producer's chunk was handed over."""

    def __init__(self, producer: Producer, txn: Transaction) -> None:
        self.producer, self.txn, self.raised = producer, txn, None

    def flush(self) -> None:
        try:
            self.producer.send_async(b"late", txn=self.txn)
        except TxnNotOpen as e:
            self.raised = e
            raise


def test_a_send_racing_its_commit_is_refused_never_left_behind(store, coord):
    """A send that lands while its transaction commits, after the commit's flush took
    the producer's chunk, is refused, never buffered while the transaction commits
    without it."""
    client = _Client()
    p = _producer(client)
    txn = _txn(store, coord)
    p.send_async(b"in", txn=txn)
    late = _LateSender(p, txn)
    txn.flush_before_commit(late)
    with pytest.raises(TxnNotOpen):
        txn.commit()
    assert late.raised is not None and txn.state is TxnState.ABORTED
    p.flush()
    assert b"late" not in client.log
    p.send_async(b"mid", txn=(mid := _txn(store, coord)))
    mid.flush()  # a flush is no commit: the transaction takes more sends
    p.send_async(b"after-flush", txn=mid)
    mid.commit()
    assert client.log[-2:] == [b"mid", b"after-flush"]


@pytest.mark.parametrize("kw", [{"producer_name": "mine"}, {"batching_enabled": False},
                                {"chunking_enabled": True}, {"block_if_queue_full": False},
                                {"batching_type": pulsar.BatchingType.KeyBased}])
def test_settings_the_per_entry_path_cannot_share_keep_a_callback_per_message(store, coord, kw):
    client = _Client()
    p = _producer(client, **kw)
    assert p.entries is None
    txn = _txn(store, coord)
    for v in _values(20):
        p.send_async(v, txn=txn)
    txn.commit()
    assert client.made[0].callbacks == 20 and len(client.made) == 1


def test_a_hand_over_that_fails_before_its_sends_fails_the_commit(store, coord):
    """Review of issue 31: a plain send drains the transactions' chunks to keep order;
    the second producer cannot be made. The chunk is gone, so the transaction must not
    commit (it would miss the message)."""
    client = _Client(refuse_per_entry=True)
    p = _producer(client)
    txn = _txn(store, coord)
    p.send_async(b"t-1", txn=txn)
    p.send(b"plain")  # the drain's hand-over fails; the plain send goes on
    p.send_async(b"t-2", txn=txn)
    with pytest.raises(AppendFailed):
        txn.commit()
    assert txn.state is TxnState.ABORTED and client.log == [b"plain"]


def test_a_send_to_an_ended_transaction_is_refused_even_with_a_chunk(store, coord):
    client = _Client()
    p = _producer(client)
    txn = _txn(store, coord)
    p.send_async(b"a", txn=txn)
    txn.abort()
    with pytest.raises(TxnNotOpen):
        p.send_async(b"b", txn=txn)
    p.flush()
    assert client.log == []


def test_the_per_entry_queue_holds_two_batches_whatever_the_users_setting(store, coord):
    """A full queue blocks a send without sending the open batch, whose time trigger is
    an hour away: the per-entry producer's queue never holds less than two batches."""
    client = _Client()
    p = _producer(client, max_pending_messages=50)
    txn = _txn(store, coord)
    for v in _values(250):
        p.send_async(v, txn=txn)
    txn.commit()
    assert client.per_entry.kw["max_pending_messages"] >= 200
    assert client.made[0].kw["max_pending_messages"] == 50  # the user's own, as given


class _Signal:
    """A flusher that says the commit passed its producers' hand-overs, then waits."""

    def __init__(self, passed: threading.Event, go: threading.Event) -> None:
        self.passed, self.go = passed, go

    def flush(self) -> None:
        self.passed.set()
        self.go.wait(10)


def test_a_commit_on_another_thread_never_cuts_a_hand_over_half_way(store, coord):
    """Review of issue 31: transaction A's commit flushes the per-entry producer while
    B's hand-over is half way; the flush waits for it (else it cuts B's batch where B's
    entries do not foresee, and B, valid, fails to commit)."""
    reached, go = threading.Event(), threading.Event()
    client = _Client(pause=(140, reached, go))  # B's 40th message of its hand-over
    p = _producer(client)
    a, b = _txn(store, coord), _txn(store, coord)
    for v in _values(100):
        p.send_async(v, txn=a)  # handed over at once (a full batch of 100)
    passed, resume = threading.Event(), threading.Event()
    a.flush_before_commit(_Signal(passed, resume))
    committed: list = []
    t_a = threading.Thread(target=lambda: committed.append(a.commit().state))
    t_a.start()
    assert passed.wait(5)  # A's commit is past its hand-over, before its runs' flush
    t_b = threading.Thread(target=lambda: [p.send_async(v, txn=b)
                                           for v in _values(100, start=100)])
    t_b.start()
    assert reached.wait(5)  # B's hand-over is half way, the lock held
    resume.set()  # A goes on to flush its run
    t_a.join(0.5)  # (on the old code A's flush ran now, cutting B's batch)
    go.set()
    t_b.join(10)
    t_a.join(10)
    b.commit()
    assert committed == [TxnState.COMMITTED] and b.state is TxnState.COMMITTED
    assert sorted(client.log) == _values(200)


def test_a_chunk_older_than_the_publish_delay_is_sent_before_the_commit(store, coord):
    """pulsar-client sends a batch once it is ``batching_max_publish_delay_ms`` old; the
    per-entry path keeps that promise with its own clock (its producer's trigger is an
    hour away): a chunk that old at a send is handed over and its batch cut, so a
    transaction's sends reach the broker while it runs, not all at its commit. Each cut
    ends with a hand-over's last message, which has a callback: every message is still
    proven stored, and a missing one still fails the commit. (Delay 0: every send.)"""
    client = _Client()
    p = _producer(client, batching_max_publish_delay_ms=0)
    txn = _txn(store, coord)
    values = _values(30)
    for v in values:
        p.send_async(v, txn=txn)
    assert client.log == values  # stored before the commit
    txn.commit()
    assert txn.state is TxnState.COMMITTED and client.log == values
    faulty = _Client(answer={7: "dup"})
    p = _producer(faulty, batching_max_publish_delay_ms=0)
    txn = _txn(store, coord)
    for v in _values(30):
        p.send_async(v, txn=txn)
    with pytest.raises(AppendFailed):
        txn.commit()
    assert txn.state is TxnState.ABORTED
