"""Invariant 6 and H4: abandoned txns time out; waiting readers are pushed, not polling."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import CommandCounter, values

from pulsar_txn.records import Position
from pulsar_txn.state import TxnState


def test_abandoned_txn_aborted_within_deadline_plus_sweep(make_client, topic_name):
    client = make_client(sweep_interval_s=0.2)
    t = topic_name()
    p = client.create_producer(t)
    txn = client.new_transaction(timeout_ms=600)
    p.send(b"abandoned", txn=txn)
    p.send(b"after")
    started = time.monotonic()
    while client.coordinator.get(txn.id).state is TxnState.OPEN:
        assert time.monotonic() - started < 0.6 + 0.2 + 1.0, "sweeper did not abort in time"
        time.sleep(0.05)
    assert client.coordinator.get(txn.id).state is TxnState.ABORTED
    # the gate moved on: the reader is unblocked and never sees the abandoned entry
    assert values(client.create_reader(t)) == [b"after"]


def test_commit_after_deadline_is_refused_atomically(make_client, topic_name):
    client = make_client(sweeper=False)
    p = client.create_producer(topic_name())
    txn = client.new_transaction(timeout_ms=200)
    p.send(b"x", txn=txn)
    time.sleep(0.35)
    import pytest

    from pulsar_txn.errors import TxnTimedOut

    with pytest.raises(TxnTimedOut):
        client.coordinator.commit(txn.id)
    assert client.coordinator.get(txn.id).state is TxnState.ABORTED


def test_waiting_reader_woken_by_commit_without_polling(make_client, redis_server, topic_name):
    client = make_client(sweeper=False)  # only the reader (and the watch) may talk to Redis
    t = topic_name()
    p = client.create_producer(t)
    reader = client.create_reader(t)
    txn = client.new_transaction()
    p.send(b"pending", txn=txn)
    got: list = []
    woke_at: list[float] = []

    def wait():
        m = reader.read_next(20_000)
        woke_at.append(time.perf_counter())
        got.append(m.value)

    th = threading.Thread(target=wait)
    th.start()
    time.sleep(0.3)  # let the reader reach its gate and block
    counter = CommandCounter(redis_server.url)
    before = counter.snapshot()
    time.sleep(2.0)
    _, _, idle = counter.delta(before)
    gate_queries = idle.get("zrange", 0)
    # the watch's blocking XREAD returns every 500 ms when idle: that is push, not a spin
    busy = sum(v for k, v in idle.items() if k != "xread")
    t0 = time.perf_counter()
    txn.commit()
    th.join(10)
    assert got == [b"pending"]
    latency_ms = (woke_at[0] - t0) * 1000
    print(f"\ncommit->reader wake-up latency: {latency_ms:.2f} ms; gate queries while "
          f"blocked 2 s: {gate_queries}")
    # a polling reader would issue hundreds of gate queries in 2 s; a pushed one none
    assert gate_queries == 0 and busy <= 2, idle
    assert latency_ms < 1000


def test_owner_retry_after_an_unswept_timeout_gets_a_fresh_txn(make_client, topic_name):
    """A Spark batch whose attempt died, retried after its txn expired with no sweeper
    running anywhere: the retry ends the expired txn (same CAS) instead of failing on it
    forever, and the expired txn's entries never show."""
    from pulsar_txn.client import Transaction

    client = make_client(sweeper=False)
    t = topic_name()
    p = client.create_producer(t)
    first = Transaction(client.store, client.coordinator.new_transaction(300, owner="sink-x:3"),
                        client.coordinator)
    p.send(b"dead attempt", txn=first)
    time.sleep(0.45)  # past the deadline; nothing sweeps
    assert client.coordinator.get(first.id).state is TxnState.OPEN
    retry = Transaction(client.store, client.coordinator.new_transaction(60_000, owner="sink-x:3"),
                        client.coordinator)
    assert retry.id != first.id and retry.header.state is TxnState.OPEN
    assert client.coordinator.get(first.id).state is TxnState.ABORTED
    p.send(b"retry", txn=retry)
    retry.commit()
    assert values(client.create_reader(t)) == [b"retry"]
    assert client.store.open_txns() == []


@pytest.mark.parametrize("skew_s", [-10.0, 10.0])
def test_expiry_follows_the_server_clock_whatever_the_local_clock(make_client, skew_s,
                                                                  monkeypatch):
    """A local clock off by 10 s either way changes nothing: a retry finds the expired
    txn expired (behind: a local-clock shortcut would call it fresh and hand back a
    dead txn) and a live txn live (ahead: it would be aborted under its owner)."""
    client = make_client(sweeper=False)
    expired = client.coordinator.new_transaction(300, owner="sink-x:1")
    live = client.coordinator.new_transaction(60_000, owner="sink-x:2")
    while client.store.server_time_ms() <= expired.deadline_ms:  # the server's clock
        time.sleep(0.05)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew_s)
    retry = client.coordinator.new_transaction(60_000, owner="sink-x:1")
    same = client.coordinator.new_transaction(60_000, owner="sink-x:2")
    monkeypatch.undo()
    assert retry.txn_id != expired.txn_id and retry.state is TxnState.OPEN
    assert client.coordinator.get(expired.txn_id).state is TxnState.ABORTED
    assert same.txn_id == live.txn_id and same.state is TxnState.OPEN


def test_ended_txn_whose_cleanup_never_ran_holds_no_reader(
        make_client, broker, redis_server, namespace, topic_name):
    """The decision, not its cleanup, releases the gate: a committer that dies right
    after the CAS leaves its index entries behind, and until some sweep removes them
    no reader or Spark plan may stall behind a txn that has ended."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pulsar_txn.spark.source_reader import PulsarTxnStreamReader

    t = topic_name()
    committer = make_client(sweeper=False)
    p = committer.create_producer(t)
    txn = committer.new_transaction()
    p.send(b"committed", txn=txn)
    p.send(b"plain")
    committer._watch.close()  # it dies right after the CAS: its cleanup never runs
    committer.coordinator.close()
    committer.coordinator.commit(txn.id)
    assert committer.store.open_writes(p.segment), "the cleanup ran after all"
    reader = make_client(sweeper=False).create_reader(t)
    assert values(reader) == [b"committed", b"plain"]
    src = PulsarTxnStreamReader({"service.url": broker.service_url,
                                 "metastore.url": redis_server.url,
                                 "metastore.namespace": namespace, "topic": t,
                                 "startingOffsets": "earliest"})
    try:
        src.planner.coordinator.sweep_if_due = lambda *a, **k: None  # no sweep to help
        start = src.initialOffset()
        end = src.latestOffset(start, ReadAllAvailable())
        assert end != start and src.planner.gate_and_lac(p.segment, (-1, -1, -1))[2] == 0
    finally:
        src.stop()


def test_an_open_write_behind_an_ended_one_in_the_same_partition_still_holds_the_gate(
        make_client, topic_name):
    """The index keeps open writes per id partition, lowest first. When the lowest
    belongs to an ended txn awaiting cleanup, the next one of that partition (an OPEN
    txn's) must still hold the gate, not be skipped with it."""
    t = topic_name()
    committer = make_client(sweeper=False)
    p = committer.create_producer(t)
    ended = committer.new_transaction()
    held = committer.new_transaction()
    while held.id.partition != ended.id.partition:
        held = committer.new_transaction()
    p.send(b"ended", txn=ended)
    committer.create_producer(t).send(b"ended", txn=ended)  # a member per writer
    p.send(b"held", txn=held)
    p.send(b"plain")
    committer._watch.close()  # its cleanup never runs
    committer.coordinator.close()
    committer.coordinator.commit(ended.id)
    reader_client = make_client(sweeper=False)
    raw = reader_client.pulsar.create_reader(p.segment, __import__("pulsar").MessageId.earliest)
    ids = [Position.of(raw.read_next(5000).message_id()) for _ in range(4)]
    raw.close()
    gate = reader_client.buffer.gate(p.segment, Position(ids[3].ledger, ids[3].entry))
    assert gate == Position(ids[1].ledger, ids[1].entry), (gate, ids)
