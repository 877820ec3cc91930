"""Writer-run registration under faults (H1/H2), on the real store and a real broker.

The producer handed to a WriterRun is wrapped to inject the outcome a network
blip or a seal gives (stored-then-timeout, refused, held mid-flight); the metadata
store is the real one, so what a reader sees after abort and header GC is real.
"""

from __future__ import annotations

import threading

import pulsar
import pytest
from helpers import values

from pulsar_txn.errors import MetastoreUnavailable
from pulsar_txn.records import Position
from pulsar_txn.writer import WriterRun


class _Scripted:
    """A real producer whose sends follow a script of injected outcomes, one per send:
    ``"ok"`` (stored, confirmed), ``"stored-timeout"`` (stored, then reported as a
    timeout: ambiguous), ``"refused"`` (TopicTerminated: certainly not stored)."""

    def __init__(self, producer, script: list[str]) -> None:
        self._p = producer
        self._script = list(script)

    def send(self, value, **kw):
        step = self._script.pop(0)
        if step == "refused":
            raise pulsar.TopicTerminated("fault injection: the segment refused the append")
        mid = self._p.send(value, **kw)
        if step == "stored-timeout":
            raise pulsar.Timeout("fault injection: stored, but reported as a timeout")
        return mid

    def flush(self) -> None:
        self._p.flush()


def _abort_collect_and_read(client, txn_id, topic) -> list[bytes]:
    client.coordinator.abort(txn_id)
    client.create_producer(topic).send(b"after")
    client.coordinator.sweep_gc(retention_ms=0)
    assert client.store.get_header(txn_id) is None  # collected: only H2's trace classifies
    return values(client.create_reader(topic))


def test_run_with_an_ambiguous_send_never_withdraws_after_a_later_refusal(client, topic_name):
    """Timeout (maybe stored), then a retry on the same run meets a terminated segment:
    the refusal proves nothing about the first send, so the registration must stay and
    the abort hides the stored entry, also after header GC."""
    t = topic_name()
    txn = client.new_transaction()
    run = WriterRun(client.store, txn.id, t, "w-amb",
                    _Scripted(client.pulsar.create_producer(t), ["stored-timeout", "refused"]),
                    fence=lambda: None)
    with pytest.raises(pulsar.Timeout):
        run.send(b"stored-but-unconfirmed")
    with pytest.raises(pulsar.TopicTerminated):
        run.send(b"retry-refused")
    assert [r.writer for r in client.store.list_writes(txn.id)[0]] == ["w-amb"]
    assert _abort_collect_and_read(client, txn.id, t) == [b"after"]


class _FailingRecord:
    """The real store, except that recording a position fails once (a Redis blip)."""

    def __init__(self, store) -> None:
        self._s = store
        self.failures = 1

    def __getattr__(self, name):
        return getattr(self._s, name)

    def record_write(self, *args, **kw):
        if self.failures:
            self.failures -= 1
            raise MetastoreUnavailable("fault injection: record_write lost")
        return self._s.record_write(*args, **kw)


def test_run_whose_append_went_unrecorded_never_withdraws_after_a_later_refusal(
        client, topic_name):
    """The append was stored but recording its position failed: the run has a stored
    entry no position pins, so a later refusal must not withdraw its registration."""
    t = topic_name()
    txn = client.new_transaction()
    run = WriterRun(_FailingRecord(client.store), txn.id, t, "w-unrec",
                    _Scripted(client.pulsar.create_producer(t), ["ok", "refused"]),
                    fence=lambda: None)
    with pytest.raises(MetastoreUnavailable):
        run.send(b"stored-unrecorded")
    with pytest.raises(pulsar.TopicTerminated):
        run.send(b"retry-refused")
    assert [r.writer for r in client.store.list_writes(txn.id)[0]] == ["w-unrec"]
    assert _abort_collect_and_read(client, txn.id, t) == [b"after"]


class _HeldFirst:
    """A real producer whose first send is stored, then held before it returns, until the
    test releases it: a second thread's send can overtake it to the record."""

    def __init__(self, producer, progressed: threading.Event) -> None:
        self._p = producer
        self.first_stored = threading.Event()
        self.release_first = threading.Event()
        self.second_called = threading.Event()
        self._progressed = progressed
        self._calls = 0
        self._lock = threading.Lock()

    def send(self, value, **kw):
        with self._lock:
            self._calls += 1
            n = self._calls
        mid = self._p.send(value, **kw)
        if n == 1:
            self.first_stored.set()
            assert self.release_first.wait(60), "the test never released the first send"
        else:
            self.second_called.set()
            self._progressed.set()
        return mid

    def flush(self) -> None:
        self._p.flush()


class _WatchedLock:
    """A lock that tells when a second thread queues for it (the run serializes first
    sends on ``_first_lock``): the test then knows the second send is held back."""

    def __init__(self, contended: threading.Event) -> None:
        self._lock = threading.Lock()
        self._contended = contended
        self._attempts = 0

    def __enter__(self):
        self._attempts += 1
        if self._attempts >= 2:
            self._contended.set()
        self._lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()


def test_concurrent_first_sends_record_the_lowest_position_of_the_run(client, topic_name):
    """Two threads send on one run before it has a first position: whatever the
    interleaving, the recorded first is the lowest position the run appended (a higher
    one would let a gate pass the run's lower, OPEN entry)."""
    t = topic_name()
    txn = client.new_transaction()
    progressed = threading.Event()  # the second send overtook the first, or queued behind it
    producer = _HeldFirst(client.pulsar.create_producer(t), progressed)
    run = WriterRun(client.store, txn.id, t, "w-conc", producer)
    run._first_lock = _WatchedLock(progressed)
    ids: dict[str, object] = {}

    def send(name: str) -> None:
        ids[name] = run.send(name.encode())

    a = threading.Thread(target=send, args=("a",))
    a.start()
    assert producer.first_stored.wait(30)
    b = threading.Thread(target=send, args=("b",))
    b.start()
    assert progressed.wait(30)
    if producer.second_called.is_set():
        b.join(30)  # it overtook: let it record (if it may) before the first returns
    producer.release_first.set()
    a.join(30)
    b.join(30)
    assert not a.is_alive() and not b.is_alive()
    lowest = min(Position.of(ids["a"]).entry_position, Position.of(ids["b"]).entry_position)
    assert run.first == lowest
    [rec] = client.store.list_writes(txn.id)[0]
    assert rec.first == lowest
