"""A committed transaction shows every message it appended: an append whose outcome is
unknown, or that was owed and never made, fails the transaction's commit, however the
caller handled the error of the send itself.

The broker's side is played by stand-in producers (no broker): what matters is the
answer pulsar-client hands back. A broker with deduplication answers a send it takes
for a re-send with no position, ``(-1,-1)``, and pulsar-client 3.x connection resets
made it give that answer for a send it never stored (integration_tests/
test_end_of_topic_churn.py shows it on the reference broker). Roles on the in-memory
metastore.
"""

from __future__ import annotations

import pulsar
import pytest

from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.errors import AppendFailed
from pulsar_txn.metastore import MemoryMetadataStore
from pulsar_txn.scalable.admin import ScalableTopics
from pulsar_txn.scalable.producer import ScalableProducer
from pulsar_txn.state import TxnState
from pulsar_txn.transaction import Transaction


class _Id:
    def __init__(self, entry: int) -> None:
        self._entry = entry

    def ledger_id(self) -> int:
        return 1 if self._entry >= 0 else -1

    def entry_id(self) -> int:
        return self._entry

    def batch_index(self) -> int:
        return -1


NO_POSITION = _Id(-1)


class _Producer:
    """Stores what it is sent, except the sends ``answers`` scripts otherwise:
    'dup' (acknowledged without a position, not stored), 'timeout' (raises),
    'refused' (async: TopicTerminated), 'held' (async: answered later)."""

    def __init__(self, answers: list[str] | None = None) -> None:
        self.answers, self.stored, self.held = list(answers or []), [], []
        self._producer = self  # send_many builds messages natively and sends them here

    def _answer(self) -> str:
        return self.answers.pop(0) if self.answers else "ok"

    def _store(self, value) -> _Id:
        self.stored.append(value if isinstance(value, bytes) else value.data())  # native
        return _Id(len(self.stored))

    def send(self, value, properties=None, **kw):
        a = self._answer()
        if a == "timeout":
            raise pulsar.Timeout("Timeout")
        return NO_POSITION if a == "dup" else self._store(value)

    def send_async(self, value, callback, properties=None, **kw) -> None:
        a = self._answer()
        if a == "held":
            self.held.append((value, callback))
        elif a == "refused":
            callback(pulsar.Result.TopicTerminated, None)
        else:
            callback(pulsar.Result.Ok, NO_POSITION if a == "dup" else self._store(value))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def store():
    return MemoryMetadataStore(partitions=4)


@pytest.fixture
def coord(store):
    return TransactionCoordinator(store, materialize_inline=True)


def _txn(store, coord) -> Transaction:
    return Transaction(store, coord.new_transaction(), coord)


def _commit_refused(txn: Transaction) -> None:
    with pytest.raises(AppendFailed):
        txn.commit()
    assert txn.state is not TxnState.COMMITTED


@pytest.mark.parametrize("how", ["send", "send_async", "send_many"])
def test_an_append_acknowledged_without_a_position_never_commits(store, coord, how):
    txn, producer = _txn(store, coord), _Producer(["ok", "dup"])
    run = txn.run_for("seg", "w1", producer)
    values = [b"m0", b"m1", b"m2"]
    if how == "send":
        run.send(values[0])
        with pytest.raises(AppendFailed, match="without a position"):
            run.send(values[1])  # caught by the caller, who sends on
        run.send(values[2])
    elif how == "send_async":
        for v in values:
            run.send_async(v)
    else:
        run.send_many(values)
    assert producer.stored == [b"m0", b"m2"]
    _commit_refused(txn)


def test_a_send_of_unknown_outcome_fails_the_commit_even_when_caught(store, coord):
    txn, producer = _txn(store, coord), _Producer(["ok", "timeout"])
    run = txn.run_for("seg", "w1", producer)
    run.send(b"m0")
    with pytest.raises(pulsar.Timeout):
        run.send(b"m1")
    run.send(b"m2")
    _commit_refused(txn)


class _Client:
    def __init__(self) -> None:
        self.producers: dict[str, list[_Producer]] = {}
        self.answers: dict[str, list[str]] = {}

    def create_producer(self, topic: str, **kw) -> _Producer:
        p = _Producer(self.answers.get(topic))
        self.producers.setdefault(topic, []).append(p)
        return p

    def stored(self) -> list[bytes]:
        return [v for ps in self.producers.values() for p in ps for v in p.stored]


def test_a_failed_reroute_leaves_no_transaction_with_a_refused_send_committable(store, coord):
    """Two transactions share a scalable producer; a split refuses a send of each. The
    re-route's first re-send (A's) is not stored: C's refused send is never re-sent,
    so C must not commit either (it did, without c1)."""
    client = _Client()
    topics = ScalableTopics(store, client)
    topics.create("t", 1)
    producer = ScalableProducer(client, topics, "t")
    a, c = _txn(store, coord), _txn(store, coord)
    producer.send_async(b"a0", key="k", txn=a)  # the first append of a run: synchronous
    producer.send_async(b"c0", key="k", txn=c)
    parent = producer.layout.active()[0].backing
    for p in client.producers[parent]:
        p.answers = ["held", "held"]
    producer.send_async(b"a1", key="k", txn=a)
    producer.send_async(b"c1", key="k", txn=c)
    topics.split("t", 0)
    for p in client.producers[parent]:  # the seal refuses both
        for _, callback in p.held:
            callback(pulsar.Result.TopicTerminated, None)
    for s in topics.layout("t", refresh=True).active():
        client.answers[s.backing] = ["dup"]  # a1's re-send: acknowledged, not stored
    with pytest.raises(AppendFailed):
        with a:
            producer.send_async(b"a2", key="k", txn=a)  # the re-route runs here
    assert b"c1" not in client.stored()
    _commit_refused(c)


@pytest.mark.parametrize("how", ["send_async", "send_many"])
def test_the_plain_sink_fails_a_task_whose_row_was_acknowledged_without_a_position(how):
    """transactional=false is at-least-once: a row the broker may not have stored fails
    the task (Spark writes it again), it is never counted as written."""
    from pulsar_txn.spark.sink_task import _PlainRun

    run = _PlainRun(_Producer(["ok", "dup"]))
    if how == "send_async":
        for v in (b"r0", b"r1", b"r2"):
            run.send_async(v)
    else:
        run.send_many([b"r0", b"r1", b"r2"])
    with pytest.raises(AppendFailed):
        run.flush()
