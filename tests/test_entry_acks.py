"""One callback per broker entry tells every append's outcome, and a run whose entries
do not account for every message it sent never passes for stored.

The producer is a stand-in that batches as pulsar-client's C++ producer does (a batch is
sent when it holds ``max_messages``, or before a message that would take its payload
past ``max_bytes``; each callback gets its entry, its batch index and the entry's size),
with faults scripted on top: a batch cut early (a time trigger), a message refused
without a word, a batch answered without a position, a failed batch, a message of
someone else's in the batch. No broker: what matters is what the callbacks say.
"""

from __future__ import annotations

import pulsar
import pytest

from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.entry_acks import EntryAcks
from pulsar_txn.errors import AppendFailed
from pulsar_txn.metastore import MemoryMetadataStore
from pulsar_txn.records import PROP_TXN
from pulsar_txn.spark.sink_task import _PlainRun
from pulsar_txn.state import TxnState
from pulsar_txn.transaction import Transaction


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def message_id(ledger: int, entry: int, index: int = -1, size: int | None = None):
    """A real pulsar MessageId, as a producer's callback gets it (with the batch size)."""
    data = b"\x08" + _varint(ledger) + b"\x10" + _varint(entry)
    if index >= 0:
        data += b"\x20" + _varint(index)
    if size is not None:
        data += b"\x30" + _varint(size)
    return pulsar.MessageId.deserialize(data)


class BatchingProducer:
    """Batches as pulsar-client's C++ producer does; ``cut_after``: message numbers after
    which the batch is sent early (its time trigger); ``refuse``: message numbers refused
    at once (silently when they have no callback); ``answer``: entry number -> 'dup' (no
    position) or a failed Result; ``foreign``: messages of someone else's already in
    the open batch."""

    def __init__(self, max_messages=1000, max_bytes=128 * 1024, cut_after=(), refuse=(),
                 answer=None, foreign=0) -> None:
        self.max_n, self.max_b = max_messages, max_bytes
        self.cut_after, self.refuse, self.answer = set(cut_after), set(refuse), answer or {}
        self.batch: list = [(b"theirs", None)] * foreign
        self.entries: list[list[bytes]] = []  # stored entries
        self.number = 0  # messages handed over
        self.properties: list[dict] = []  # of every message handed over natively
        self.callbacks = 0  # messages handed over with a callback
        self._producer = self  # send_many hands native messages over here

    def stored(self) -> list[bytes]:
        return [v for e in self.entries for v in e]

    def send_async(self, value, callback, properties=None, **kw) -> None:
        if not isinstance(value, bytes):
            self.properties.append(dict(value.properties()))
            value = value.data()  # a message built natively
        n = self.number
        self.number += 1
        self.callbacks += callback is not None
        if n in self.refuse:  # refused at once: only a callback would hear of it
            if callback is not None:
                callback(pulsar.Result.AlreadyClosed, message_id(-1, -1))
            return
        if self.batch and (len(self.batch) >= self.max_n or
                           sum(len(v) for v, _ in self.batch) + len(value) > self.max_b):
            self.flush()
        self.batch.append((value, callback))
        if (len(self.batch) >= self.max_n or sum(len(v) for v, _ in self.batch) >= self.max_b
                or n in self.cut_after):
            self.flush()

    def flush(self) -> None:
        batch, self.batch = self.batch, []
        if not batch:
            return
        entry = len(self.entries)
        a = self.answer.get(entry, "ok")
        if a == "ok":
            self.entries.append([v for v, _ in batch])
        for i, (_, cb) in enumerate(batch):
            if cb is None:
                continue
            if a == "ok":
                cb(pulsar.Result.Ok, message_id(7, entry, i, len(batch)))
            elif a == "dup":
                cb(pulsar.Result.Ok, message_id(-1, -1, i, len(batch)))
            else:
                cb(a, message_id(-1, -1, i, len(batch)))


def send_run(producer, acks: EntryAcks, chunks: list[list[bytes]]) -> None:
    """What the sink's send loop does: a callback only where ``ends`` says."""
    for values in chunks:
        ends = set(acks.ends([len(v) for v in values]))
        base = acks.sent
        acks.sent += len(values)
        for j, v in enumerate(values):
            producer.send_async(v, acks.callback(base + j) if j in ends else None)
    producer.flush()
    assert acks.wait(1)


def _values(n: int, size: int = 100, start: int = 0) -> list[bytes]:
    return [f"{i:0{size}d}".encode() for i in range(start, start + n)]


def test_one_callback_per_entry_confirms_every_message_stored():
    p, acks = BatchingProducer(max_messages=100), EntryAcks(100, 128 * 1024)
    chunks = [_values(4096), _values(4096, start=4096), _values(1000, start=8192)]
    send_run(p, acks, chunks)
    assert acks.verify() == []
    assert sum(map(len, p.entries)) == 9192
    # a callback per entry, and one more per hand-over whose end was not an entry's
    assert len(acks.heard) <= len(p.entries) + len(chunks)


def test_batches_cut_by_bytes_are_foreseen():
    # sizes that cross the byte limit at irregular places, also across hand-overs
    p, acks = BatchingProducer(max_messages=1000, max_bytes=10_000), EntryAcks(1000, 10_000)
    sizes = [37, 990, 5, 4000, 4001, 10_000, 12_000, 1, 1, 9_999, 2, 300] * 40
    vals = [b"x" * s for s in sizes]
    send_run(p, acks, [vals[:101], vals[101:333], vals[333:]])
    assert acks.verify() == []
    assert [v for e in p.entries for v in e] == vals


def test_a_batch_cut_where_it_was_not_foreseen_fails_the_run():
    """A time trigger sends a batch early: the messages before the cut have no callback,
    so nothing is known of them, and the run must not pass for stored."""
    p, acks = BatchingProducer(max_messages=100, cut_after={150}), EntryAcks(100, 128 * 1024)
    send_run(p, acks, [_values(1000)])
    problems = acks.verify()
    assert problems and "unknown" in problems[0], problems
    assert acks.unforeseen


def test_a_message_refused_without_a_callback_fails_the_run():
    """The refused message is in no entry; the batch's indexes shift past it."""
    p, acks = BatchingProducer(max_messages=100, refuse={250}), EntryAcks(100, 128 * 1024)
    send_run(p, acks, [_values(1000)])
    assert acks.verify(), "a run with a message that was never stored passed for stored"
    assert sum(map(len, p.entries)) == 999


@pytest.mark.parametrize("refused", [0, 1, 150, 199, 299, 300, 999])
def test_a_refused_message_is_found_wherever_it_is_even_inside_a_watched_entry(refused):
    """Hand-overs ending inside an entry give it two callbacks: the refusal between them
    must still show (their starts disagree), not be covered by the other's span."""
    p, acks = BatchingProducer(max_messages=100, refuse={refused}), EntryAcks(100, 128 * 1024)
    chunks = [_values(130), _values(40, start=130), _values(830, start=170)]
    send_run(p, acks, chunks)
    assert acks.verify(), f"message {refused} was never stored, yet the run passed"


def test_an_entry_answered_without_a_position_fails_the_run():
    p, acks = BatchingProducer(max_messages=100, answer={3: "dup"}), EntryAcks(100, 128 * 1024)
    send_run(p, acks, [_values(1000)])
    problems = acks.verify()
    assert problems and "without a position" in problems[0]


def test_a_failed_entry_fails_the_run():
    p, acks = BatchingProducer(max_messages=100, answer={9: pulsar.Result.Timeout}), \
        EntryAcks(100, 128 * 1024)
    send_run(p, acks, [_values(1000)])
    problems = acks.verify()
    assert problems and "Timeout" in problems[0]


def test_someone_elses_message_in_the_first_batch_fails_the_run():
    """The run's indexes are only meaningful from an empty batch, on a producer no one
    else sends on: a message already waiting in the batch is found."""
    p, acks = BatchingProducer(max_messages=100, foreign=1), EntryAcks(100, 128 * 1024)
    send_run(p, acks, [_values(1000)])
    assert acks.verify()


def test_a_callback_that_never_comes_is_waited_for_then_fails_the_flush():
    acks = EntryAcks(100, 128 * 1024)
    acks.callback(0)  # given out, never called
    acks.sent = 1
    assert not acks.wait(0.05)
    assert acks.outstanding == 1


def test_a_run_that_flushes_with_an_entry_unanswered_never_commits(store):
    """WriterRun.flush waits for every callback it gave out, and a run whose entry was
    never answered does not commit (its messages' outcome is unknown)."""

    class Unanswered(BatchingProducer):
        def flush(self) -> None:
            if self.number > 1:  # the run's first append is answered; later ones never
                self.batch = []
                return
            super().flush()

    producer = Unanswered(max_messages=100)
    txn, run, _ = _txn_run(store, producer)
    run.send_many(_values(300))
    with pytest.raises(AppendFailed, match="unacknowledged"):
        run.flush(timeout_s=0.1)


def test_an_entry_of_unknown_size_is_no_proof():
    acks = EntryAcks(100, 128 * 1024)
    acks.sent = 3
    acks.callback(2)(pulsar.Result.Ok, message_id(7, 0, 2))  # batch index, no size
    assert acks.wait(0.05)
    problems = acks.verify()
    assert problems and "size is unknown" in problems[0]
    assert acks.unforeseen  # the worker falls back to a callback per message


def test_two_entries_claiming_the_same_messages_fail_the_run_cleanly():
    acks = EntryAcks(100, 128 * 1024)
    acks.sent = 2
    acks.callback(1)(pulsar.Result.Ok, message_id(7, 0, 1, 2))
    acks.callback(1)(pulsar.Result.Ok, message_id(7, 1, 1))  # same start, no size
    assert acks.verify()


# ---- the writer-runs that use it: a transaction commits only what is stored ----

@pytest.fixture
def store():
    return MemoryMetadataStore(partitions=4)


def _txn_run(store, producer):
    coord = TransactionCoordinator(store, materialize_inline=True)
    txn = Transaction(store, coord.new_transaction(), coord)
    run = txn.run_for("seg", "w1", producer)
    acks = run.acknowledge_per_entry(producer.max_n, producer.max_b)
    return txn, run, acks


def test_a_transaction_heard_of_per_entry_commits_every_message_it_sent(store):
    producer = BatchingProducer(max_messages=100)
    txn, run, acks = _txn_run(store, producer)
    values = _values(5000)
    run.send_many(values[:4096])
    run.send_many(values[4096:])
    txn.commit()
    assert txn.state is TxnState.COMMITTED
    assert producer.stored() == values
    assert len(acks.heard) <= len(producer.entries) + 1  # not one per message
    # every append carries the transaction's one protocol property (readers classify by it)
    assert len(producer.properties) == len(values) - 1
    assert all(list(p) == [PROP_TXN] and p[PROP_TXN].startswith(f"{txn.id};w1;")
               for p in producer.properties)
    # H1: the run's first position is its lowest entry, the first message's own
    assert (run.first.ledger, run.first.entry) == (7, 0)
    assert producer.entries[0] == values[:1]


@pytest.mark.parametrize("fault", [{"answer": {7: "dup"}}, {"answer": {2: pulsar.Result.Timeout}},
                                   {"refuse": {777}}, {"cut_after": {1234}}, {"foreign": 0}])
def test_a_transaction_never_commits_unless_every_entry_it_sent_is_stored(store, fault):
    """A batch answered without a position, a failed batch, a message refused without
    a callback, a batch cut where it was not foreseen: none commits. ``foreign``: a
    message waiting in the producer's batch before the run is flushed out with its
    first append, so it costs nothing (the control case: the commit succeeds)."""
    if "foreign" in fault:
        fault = {"foreign": 1}
    producer = BatchingProducer(max_messages=100, **fault)
    txn, run, _ = _txn_run(store, producer)
    values = _values(3000)
    run.send_many(values[:1500])
    run.send_many(values[1500:])
    if "foreign" in fault:
        txn.commit()
        assert producer.stored() == [b"theirs"] + values
        return
    with pytest.raises(AppendFailed):
        txn.commit()
    assert txn.state is not TxnState.COMMITTED


@pytest.mark.parametrize("fault", [{}, {"answer": {3: "dup"}}, {"refuse": {10}}])
def test_the_plain_sink_heard_of_per_entry_fails_a_task_that_lost_a_row(fault):
    producer = BatchingProducer(max_messages=100, foreign=1, **fault)
    run = _PlainRun(producer)
    run.acknowledge_per_entry(100, 128 * 1024)
    values = _values(1000)
    run.send_many(values[:300])
    run.send_many(values[300:])
    if not fault:
        run.flush()
        assert producer.stored() == [b"theirs"] + values
        return
    with pytest.raises(AppendFailed):
        run.flush()


# ---- the Spark sink's choice: which tasks hear per entry, and the fallback ----

class _SinkClient:
    """A worker's pulsar client: producers that batch as the C++ one does."""

    def __init__(self, **faults) -> None:
        self.faults, self.producers = faults, []

    def get_topic_partitions(self, topic: str) -> list[str]:
        return [topic]

    def create_producer(self, topic: str, **kw):
        p = BatchingProducer(max_messages=kw["batching_max_messages"],
                             max_bytes=kw.get("batching_max_allowed_size_in_bytes",
                                              128 * 1024), **self.faults)
        p.kw = kw
        self.producers.append(p)
        return p

    def close(self) -> None:
        pass


def _resources(client):
    from pulsar_txn.spark.resources import WorkerResources

    return WorkerResources(make_client=lambda opts: client)


def _write(monkeypatch, client, resources, options: dict | None = None):
    """One sink task writing 2,500 rows to one plain topic: the error it failed with."""
    import pyarrow as pa

    from pulsar_txn.spark import sink_task
    from pulsar_txn.spark.options import SinkOptions

    monkeypatch.setattr(sink_task, "RESOURCES", resources)
    opts = SinkOptions.from_options({"service.url": "pulsar://127.0.0.1:9",
                                     "metastore.url": "redis://127.0.0.1:9",
                                     "topic": "persistent://public/default/t",
                                     **(options or {})})
    batch = pa.RecordBatch.from_arrays([pa.array(_values(2500))], names=["value"])
    try:
        sink_task.write_rows(opts, {"value": "value"}, [batch], None, "w", None)
    except AppendFailed as e:
        return e
    return None


def test_a_task_writing_whole_columns_to_one_topic_hears_per_entry(monkeypatch):
    client = _SinkClient()
    assert _write(monkeypatch, client, _resources(client)) is None
    (producer,) = client.producers
    assert producer.kw["batching_max_publish_delay_ms"] >= 3_600_000  # no time trigger
    assert producer.stored() == _values(2500)
    assert producer.callbacks <= 5  # three entries of 1,000 and the hand-over's end


def test_a_users_batching_option_keeps_a_callback_per_message(monkeypatch):
    """Batches cut by the user's settings (here, by time) cannot be foreseen."""
    client = _SinkClient(cut_after={300})
    failed = _write(monkeypatch, client, _resources(client),
                    {"pulsar.producer.batching_max_publish_delay_ms": "10"})
    assert failed is None, failed
    (producer,) = client.producers
    assert producer.kw["batching_max_publish_delay_ms"] == 10
    assert producer.stored() == _values(2500)
    assert producer.callbacks == 2500


def test_a_worker_whose_batches_were_cut_unforeseen_falls_back_to_per_message(monkeypatch):
    client = _SinkClient(cut_after={300})
    resources = _resources(client)
    failed = _write(monkeypatch, client, resources)
    assert failed is not None and "unknown" in str(failed)  # fail closed: Spark retries
    assert resources.per_entry_acks is False
    assert _write(monkeypatch, client, resources) is None  # the retry, per message
    assert client.producers[-1].stored() == _values(2500)
    assert client.producers[-1].kw["batching_max_publish_delay_ms"] == 5
    assert client.producers[-1].callbacks == 2500


def test_a_task_that_failed_otherwise_keeps_the_worker_per_entry(monkeypatch):
    """Only batches cut where they were not foreseen turn per-entry off; a refused entry
    (here, answered without a position) fails the task and nothing else."""
    client = _SinkClient(answer={1: "dup"})
    resources = _resources(client)
    failed = _write(monkeypatch, client, resources)
    assert failed is not None and "without a position" in str(failed)
    assert resources.per_entry_acks is True


def test_a_transactional_task_hears_per_entry_and_its_transaction_commits(monkeypatch, store):
    import pyarrow as pa

    from pulsar_txn.spark import sink_task
    from pulsar_txn.spark.options import SinkOptions

    client = _SinkClient()
    monkeypatch.setattr(sink_task, "RESOURCES", _resources(client))
    coord = TransactionCoordinator(store, materialize_inline=True)
    txn = coord.new_transaction()
    opts = SinkOptions.from_options({"service.url": "pulsar://127.0.0.1:9",
                                     "metastore.url": "redis://127.0.0.1:9",
                                     "topic": "persistent://public/default/t"})
    batch = pa.RecordBatch.from_arrays([pa.array(_values(2500))], names=["value"])
    segments, rows = sink_task.write_rows(opts, {"value": "value"}, [batch], txn.txn_id,
                                          "w1", store)
    assert (segments, rows) == (["persistent://public/default/t"], 2500)
    (producer,) = client.producers
    assert producer.stored() == _values(2500)
    assert producer.callbacks <= 5
    assert all(p == {PROP_TXN: f"{txn.txn_id};w1;{store.deployment}"}
               for p in producer.properties)
