"""The roles' logic, unit-tested on the in-memory metadata store.

The coordinator, the transaction buffer, the pending-ack store and writer runs
depend only on the MetadataStore contract (tests/test_store_contract.py holds the
memory store to it, against Redis), so their rules are tested here in
milliseconds: a fake clock stands for server time, and a small fake stands for the
Pulsar producer. The store is never faked.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid

import pulsar
import pytest

from pulsar_txn.buffer import TransactionBuffer, Verdict
from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.errors import (
    AckConflict,
    ConfigError,
    InvalidTxnTransition,
    MetastoreUnavailable,
    PulsarTxnError,
    SegmentSealed,
    TxnNotOpen,
    TxnTimedOut,
)
from pulsar_txn.metastore import MemoryMetadataStore, open_store
from pulsar_txn.metastore.base import Collected
from pulsar_txn.metastore.claims import ClaimKind, Claims, Holding
from pulsar_txn.pending_ack import PendingAckStore, settle_committed_acks
from pulsar_txn.records import (
    PROP_DEPLOYMENT,
    PROP_TXN,
    PROP_WRITER,
    WIRE_THREE,
    OpenWrite,
    Position,
    TxnId,
)
from pulsar_txn.state import TxnState
from pulsar_txn.writer import WriterRun

COMMITTED, ABORTED, OPEN = TxnState.COMMITTED, TxnState.ABORTED, TxnState.OPEN


class FakeClock:
    def __init__(self) -> None:
        self.ms = 1_000_000_000_000

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock):
    s = MemoryMetadataStore(partitions=4, clock=clock)
    yield s
    s.close()


@pytest.fixture
def coord(store):
    c = TransactionCoordinator(store, materialize_inline=True)
    yield c
    c.close()


def wait_until(cond, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def write(store, t: TxnId, segment: str, writer: str, entry: int | None) -> None:
    store.register_write(t, segment, writer)
    if entry is not None:
        store.record_write(t, segment, writer, Position(1, entry), None)


# ---------------------------------------------------------------- coordinator
def test_commit_is_the_cas_and_its_cleanup_runs_inline(coord, store):
    t = coord.new_transaction().txn_id
    write(store, t, "s", "win", 3)
    write(store, t, "s", "lose", 4)
    h = coord.commit(t, winners=["win"], segments=["s"])
    assert h.state is COMMITTED and h.winners == {"win"}
    assert store.unmaterialized_txns() == [] and store.open_writes("s") == []
    assert store.aborted_writers("s", [(t, "win"), (t, "lose")]) == {(t, "lose")}
    assert coord.commit(t, winners=["win"]) == h  # repeated: same decision
    with pytest.raises(InvalidTxnTransition):
        coord.abort(t)


def test_a_late_commit_raises_timed_out_and_leaves_the_txn_aborted(coord, store, clock):
    t = coord.new_transaction(timeout_ms=1_000).txn_id
    write(store, t, "s", "w", 1)
    clock.advance(1_001)
    with pytest.raises(TxnTimedOut):
        coord.commit(t)
    assert coord.get(t).state is ABORTED
    assert store.aborted_writers("s", [(t, "w")]) == {(t, "w")}  # cleaned up all the same


def test_an_owner_keeps_its_transaction_across_retries(coord, store, clock):
    owner = "sink|query|0"
    first = coord.new_transaction(owner=owner)
    assert coord.new_transaction(owner=owner) == first
    coord.commit(first.txn_id)
    replay = coord.new_transaction(owner=owner)  # a replayed batch commits nothing new
    assert (replay.txn_id, replay.state) == (first.txn_id, COMMITTED)

    other = "sink|query|1"
    failed = coord.new_transaction(owner=other)
    coord.abort(failed.txn_id)
    retry = coord.new_transaction(owner=other)
    assert retry.txn_id != failed.txn_id and retry.state is OPEN

    clock.advance(61_000)  # the retry died; nothing swept its txn
    again = coord.new_transaction(timeout_ms=5_000, owner=other)
    assert again.txn_id != retry.txn_id and again.state is OPEN
    assert coord.get(retry.txn_id).state is ABORTED
    with pytest.raises(ConfigError):
        coord.new_transaction(timeout_ms=0)


def test_the_timeout_sweep_aborts_only_expired_txns(coord, store, clock):
    short = coord.new_transaction(timeout_ms=1_000).txn_id
    long_ = coord.new_transaction(timeout_ms=60_000).txn_id
    write(store, short, "s", "w", 1)
    assert coord.sweep_timeouts() == []
    clock.advance(1_001)
    assert coord.sweep_timeouts() == [short]
    assert coord.sweep_timeouts() == []
    assert coord.get(short).state is ABORTED and coord.get(long_).state is OPEN
    assert store.open_writes("s") == []  # materialized by the sweep


def test_the_materialize_sweep_finishes_a_dead_committers_cleanup(coord, store):
    t = coord.new_transaction().txn_id
    write(store, t, "s", "w", 1)
    store.end_txn(t, COMMITTED, None)  # the committer died right after the CAS
    assert store.open_writes("s") != []
    assert coord.sweep_materialize() == 1
    assert coord.sweep_materialize() == 0
    assert store.open_writes("s") == []


def test_the_gc_sweep_respects_retention_and_keeps_the_losers(coord, store, clock):
    t = coord.new_transaction().txn_id
    write(store, t, "s", "win", 1)
    write(store, t, "s", "lose", 2)
    store.end_txn(t, COMMITTED, ["win"])  # not materialized: the sweep must do it first
    pending = coord.new_transaction().txn_id
    key = Position(1, 1)
    store.claim_acks(pending, "s", "sub", [key], False)
    store.record_acks(pending, "s", "sub", [key], False)
    coord.commit(pending)  # its consumer died before applying: ACKS_PENDING
    assert store.gc_txn(pending, clock.ms) is Collected.ACKS_PENDING
    assert coord.sweep_gc(retention_ms=10_000) == 0
    clock.advance(10_001)
    # past the retention an ACKS_PENDING txn is settled (tombstones, no broker needed)
    # and collected: it never pins the watermark (issue 26 hole 4)
    assert coord.sweep_gc(retention_ms=10_000) == 2
    assert store.get_header(t) is None and store.collected([t]) == {t}
    assert store.aborted_writers("s", [(t, "win"), (t, "lose")]) == {(t, "lose")}
    assert store.get_header(pending) is None
    assert store.claims_of("s", "sub", [key]).of(key) == (ClaimKind.COMMITTED, pending)


def test_the_background_materializer_cleans_after_commit_returns(store):
    c = TransactionCoordinator(store)  # not inline: a worker thread does it
    try:
        t = c.new_transaction().txn_id
        write(store, t, "s", "w", 1)
        c.commit(t, segments=["s"])
        assert wait_until(lambda: store.unmaterialized_txns() == [])
        assert store.open_writes("s") == []
    finally:
        c.close()


def test_the_background_sweeper_aborts_an_abandoned_txn(coord, clock):
    t = coord.new_transaction(timeout_ms=1_000).txn_id
    coord.start_sweeper(interval_s=0.01)
    clock.advance(1_001)
    assert wait_until(lambda: coord.get(t).state is ABORTED)


def test_sweep_if_due_runs_at_most_once_per_interval_per_store(store, clock):
    c = TransactionCoordinator(store, materialize_inline=True)
    a = c.new_transaction(timeout_ms=1_000).txn_id
    b = c.new_transaction(timeout_ms=2_000).txn_id
    clock.advance(1_001)
    c.sweep_if_due(every_s=60)
    assert c.get(a).state is ABORTED
    clock.advance(1_000)
    c.sweep_if_due(every_s=60)
    assert c.get(b).state is OPEN  # throttled
    other = MemoryMetadataStore(partitions=4, clock=clock)  # another store: its own turn
    t = TransactionCoordinator(other, materialize_inline=True)
    x = t.new_transaction(timeout_ms=1_000).txn_id
    clock.advance(1_001)
    t.sweep_if_due(every_s=60)
    assert t.get(x).state is ABORTED


# ---------------------------------------------------------------- transaction buffer
def test_classification_follows_the_decision_and_the_winners(coord, store):
    tb = TransactionBuffer(store)
    ok, lost, open_ = (coord.new_transaction().txn_id for _ in range(3))
    for t in (ok, lost, open_):
        write(store, t, "s", "w1", 1)
        write(store, t, "s", "w2", 2)
    coord.commit(ok, winners=["w1"])
    coord.abort(lost)
    got = tb.classify("s", [(ok, "w1"), (ok, "w2"), (lost, "w1"), (open_, "w1")])
    assert got == [Verdict.DELIVER, Verdict.SKIP, Verdict.SKIP, Verdict.WAIT]


def test_classification_is_stable_across_header_gc(coord, store, clock):
    t = coord.new_transaction().txn_id
    write(store, t, "s", "win", 1)
    write(store, t, "s", "lose", 2)
    coord.commit(t, winners=["win"])
    entries = [(t, "win"), (t, "lose")]
    before = TransactionBuffer(store).classify("s", entries)
    clock.advance(10)
    assert coord.sweep_gc(retention_ms=0) == 1 and store.get_header(t) is None
    again = TransactionBuffer(store).classify("s", entries)
    assert again == before == [Verdict.DELIVER, Verdict.SKIP]


def test_an_unknown_txn_is_never_delivered(coord, store):
    coord.new_transaction()
    unknown = TxnId(0, 10_000_000)  # lost with a rollback, or another deployment's
    tb = TransactionBuffer(store)
    assert tb.classify("s", [(unknown, "w")]) == [Verdict.SKIP]
    assert tb.wait_for_outcome(TxnId(0, 10_000_001), 0)  # final: no reader waits on it


def test_the_gate_stops_below_the_first_open_write(coord, store):
    tb = TransactionBuffer(store)
    upto = Position(1, 100)
    assert tb.gate("s", upto) == upto
    t = coord.new_transaction().txn_id
    store.register_write(t, "s", "w")
    held = Position(1, 7)
    assert tb.gate("s", upto, previous=held) == held  # pending: cannot place the entry
    store.record_write(t, "s", "w", Position(1, 40), None)
    assert tb.gate("s", upto, previous=held) == Position(1, 39)
    assert tb.gate("s", Position(1, 20), previous=Position(1, 30)) == Position(1, 30)


def test_an_ended_but_uncleaned_txn_does_not_hold_the_gate(store):
    tb = TransactionBuffer(store)
    ended = store.create_txn(store.next_txn_id(partition=0), 60_000).txn_id
    later = store.create_txn(store.next_txn_id(partition=0), 60_000).txn_id
    write(store, ended, "s", "w", 10)
    write(store, later, "s", "w", 50)
    store.end_txn(ended, COMMITTED, None)  # cleanup not run yet
    assert store.open_writes("s") == [OpenWrite(ended, "w", Position(1, 10))]
    assert tb.gate("s", Position(1, 100)) == Position(1, 49)  # the next write shows


def test_a_reader_waiting_on_an_open_txn_is_woken_by_its_end(coord, store):
    tb = TransactionBuffer(store)
    w = store.watch(tb.on_event)
    try:
        t = coord.new_transaction().txn_id
        assert not tb.wait_for_outcome(t, 0.05)
        threading.Timer(0.05, coord.commit, args=(t,)).start()
        started = time.monotonic()
        assert tb.wait_for_outcome(t, 5.0)
        assert time.monotonic() - started < 0.9  # pushed, not the 1 s re-check
        assert tb.classify("s", [(t, "w")]) == [Verdict.SKIP]  # committed, but not a winner
    finally:
        w.close()


def test_settle_classifies_then_waits_for_open_txns_only(coord, store):
    """The one classify-then-wait rule of both readers (the client API's and the Spark
    source's): final verdicts at once; an OPEN transaction waited for, as long as the
    caller allows, then classified again; still OPEN after that: WAIT."""
    tb = TransactionBuffer(store)
    w = store.watch(tb.on_event)
    try:
        done, open_, stuck, other = (coord.new_transaction().txn_id for _ in range(4))
        for t in (done, open_, stuck, other):
            write(store, t, "s", "w", 1)
        coord.commit(done, winners=["w"])
        asked: list = []

        def wait_s(txn):
            asked.append(txn)
            return 5.0 if txn == open_ else 0.05

        threading.Timer(0.05, coord.commit, args=(open_, ["w"])).start()
        got = tb.settle("s", [(done, "w"), (open_, "w"), (stuck, "w")], wait_s)
        assert got == [Verdict.DELIVER, Verdict.DELIVER, Verdict.WAIT]
        assert asked == [open_, stuck]  # a final verdict never waits
        asked.clear()  # past the first run-out patience, nothing more is waited for
        assert tb.settle("s", [(stuck, "w"), (other, "w")], wait_s) == [Verdict.WAIT] * 2
        assert asked == [stuck]
    finally:
        w.close()


# ---------------------------------------------------------------- pending acks
class Broker:
    """What the pending-ack store asks of the broker: apply acks, redeliver."""

    def __init__(self) -> None:
        self.applied: list[tuple[list[Position], bool]] = []
        self.redelivered: list[Position] = []
        self.cursor: Position | None = None

    def pas(self, store, segment: str = "s", sub: str = "sub") -> PendingAckStore:
        return PendingAckStore(store, segment, sub, lambda ps, cum: self.applied.append(
            (list(ps), cum)), self.redelivered.extend, lambda: self.cursor)


def P(e: int) -> Position:
    return Position(1, e)


def test_no_outcome_cached_before_a_server_start_met_during_a_load_is_used(
        coord, store, monkeypatch):
    """A classify that must load one txn's header meets a new server start (a restore
    from an earlier copy) on that very call: the outcomes it cached before are not
    mixed with the new start's answers (T1's commit is lost with the restore: never
    delivered again)."""
    tb = TransactionBuffer(store)
    saved = store.save_state()
    t1 = coord.new_transaction().txn_id
    coord.commit(t1, winners=["w"])
    assert tb.classify("s", [(t1, "w")]) == [Verdict.DELIVER]  # cached
    t2 = coord.new_transaction().txn_id
    load = store.final_headers

    def restored_first(ids):
        monkeypatch.setattr(store, "final_headers", load)
        store.restore_state(saved)  # the load's connection meets the new start
        return load(ids)

    monkeypatch.setattr(store, "final_headers", restored_first)
    assert tb.classify("s", [(t1, "w"), (t2, "w")])[0] is not Verdict.DELIVER


def test_an_ack_whose_record_answer_was_lost_keeps_its_claim(coord, store, monkeypatch):
    """record_acks ran on the server but its answer was lost (the connection dropped):
    the ack may be recorded, so its claim stays (another txn's ack of the message
    conflicts until this txn ends) instead of being released under a recorded ack
    that a commit would apply (two txns consuming one message, invariant 7)."""
    pas = Broker().pas(store)
    t1, t2 = coord.new_transaction().txn_id, coord.new_transaction().txn_id
    record = store.record_acks

    def recorded_then_lost(*args, **kwargs):
        record(*args, **kwargs)
        raise MetastoreUnavailable("fake: the answer was lost with the connection")

    monkeypatch.setattr(store, "record_acks", recorded_then_lost)
    with pytest.raises(MetastoreUnavailable):
        pas.acknowledge(t1, [P(1)])
    monkeypatch.setattr(store, "record_acks", record)
    with pytest.raises(AckConflict):
        pas.acknowledge(t2, [P(1)])
    coord.abort(t1)
    pas.acknowledge(t2, [P(1)])  # the holder aborted: its claim is void


def test_two_txns_cannot_ack_one_message_until_the_first_aborts(coord, store):
    broker = Broker()
    pas = broker.pas(store)
    t1, t2 = coord.new_transaction().txn_id, coord.new_transaction().txn_id
    pas.acknowledge(t1, [P(1), P(2)])
    with pytest.raises(AckConflict) as e:
        pas.acknowledge(t2, [P(2)])
    assert e.value.holder == str(t1) and not e.value.committed
    coord.abort(t1)  # no on_end yet: the claim is void all the same
    pas.acknowledge(t2, [P(2)])
    assert store.list_claims("s", "sub") == Claims({P(2): t2}, {})


def test_a_second_ack_of_one_message_in_one_txn_conflicts(coord, store):
    """Two copies of one message (a redelivery after a dropped connection, an ack
    timeout) processed in one txn: the second ack is refused, so the application
    aborts instead of committing two outputs for one input (found by the Shared
    history machine). A retry of an ack that raised before it was recorded passes."""
    pas = Broker().pas(store)
    t1 = coord.new_transaction().txn_id
    pas.acknowledge(t1, [P(1)])
    with pytest.raises(AckConflict) as e:
        pas.acknowledge(t1, [P(1)])
    assert e.value.holder == str(t1) and "already" in str(e.value)
    pas.acknowledge(t1, [P(2)])  # another message of the same txn: fine


def test_commit_applies_the_acks_and_leaves_tombstones(coord, store):
    broker = Broker()
    pas = broker.pas(store)
    t1, t2 = coord.new_transaction().txn_id, coord.new_transaction().txn_id
    pas.acknowledge(t1, [P(1)])
    pas.acknowledge(t1, [P(5)], cumulative=True)
    coord.commit(t1)
    pas.on_end(t1, COMMITTED)
    assert broker.applied == [([P(1)], False), ([P(5)], True)]
    assert store.list_acks(t1)[("s", "sub")].applied is True
    claims = store.list_claims("s", "sub")
    assert claims.tombstones[P(1)] == t1 and claims.committed == Holding(t1, P(5))
    assert claims.cumulative is None
    for ps in ([P(1)], [P(3)]):
        with pytest.raises(AckConflict) as e:
            pas.acknowledge(t2, ps)
        assert e.value.committed
    assert store.gc_txn(t1, store.server_time_ms()) is Collected.DONE


def test_abort_releases_the_claims_and_redelivers(coord, store):
    broker = Broker()
    pas = broker.pas(store)
    t = coord.new_transaction().txn_id
    pas.acknowledge(t, [P(1), P(2)])
    coord.abort(t)
    pas.on_end(t, ABORTED)
    assert store.list_claims("s", "sub") == Claims({}, {}) and broker.applied == []
    assert sorted(broker.redelivered) == [P(1), P(2)]


def test_an_ack_under_an_ended_txn_is_fenced_and_leaves_no_claim(coord, store):
    pas = Broker().pas(store)
    t = coord.new_transaction().txn_id
    coord.commit(t)
    with pytest.raises(TxnNotOpen):
        pas.acknowledge(t, [P(1)])
    assert store.list_claims("s", "sub") == Claims({}, {})


def test_recovery_applies_committed_acks_a_crash_left(coord, store):
    t = coord.new_transaction().txn_id
    Broker().pas(store).acknowledge(t, [P(3)])
    coord.commit(t)  # the process died before on_end
    broker = Broker()
    fresh = broker.pas(store)
    assert fresh.recover() == {"applied": 1, "released": 0, "open": 0, "failed": 0}
    assert broker.applied == [([P(3)], False)]
    # the tombstone, not the applied ack, is what consumers act on when P(3) comes again
    assert store.claims_of("s", "sub", [P(3)]).of(P(3))[0] is ClaimKind.COMMITTED
    assert fresh.recover() == {"applied": 0, "released": 0, "open": 0, "failed": 0}


def test_committed_acks_the_broker_refuses_are_still_settled(coord, store):
    """Hole 4: an apply the broker refuses (a cumulative ack on a Shared subscription)
    never raises out of recovery and never leaves the txn ACKS_PENDING: the tombstones
    stand for it, and a settle without any consumer does the same for GC."""
    t = coord.new_transaction().txn_id
    Broker().pas(store).acknowledge(t, [P(3)], cumulative=True)
    coord.commit(t)

    def refuse(positions, cumulative):
        raise RuntimeError("CumulativeAcknowledgementNotAllowedError")
    fresh = PendingAckStore(store, "s", "sub", apply=refuse)
    assert fresh.recover() == {"applied": 0, "released": 0, "open": 0, "failed": 1}
    assert store.get_header(t).open_ack_records == 0
    assert store.claims_of("s", "sub", [P(2)]).of(P(2))[0] is ClaimKind.COMMITTED


def test_settle_without_a_consumer_unpins_an_acks_pending_txn(coord, store):
    t = coord.new_transaction().txn_id
    Broker().pas(store).acknowledge(t, [P(1), P(4)])
    coord.commit(t)  # the committing process died before applying
    assert store.get_header(t).open_ack_records == 1
    assert settle_committed_acks(store, t) == 1
    assert store.get_header(t).open_ack_records == 0
    view = store.claims_of("s", "sub", [P(1), P(4), P(2)])
    assert [view.of(P(i))[0] for i in (1, 4, 2)] == [
        ClaimKind.COMMITTED, ClaimKind.COMMITTED, ClaimKind.FREE]


def test_a_claim_whose_holder_was_collected_is_void(coord, store, clock):
    t1, t2 = coord.new_transaction().txn_id, coord.new_transaction().txn_id
    store.claim_acks(t1, "s", "sub", [P(1)], False)  # claimed, never recorded
    coord.abort(t1)
    clock.advance(10)
    assert coord.sweep_gc(retention_ms=0) == 1
    Broker().pas(store).acknowledge(t2, [P(1)])
    assert store.list_claims("s", "sub") == Claims({P(1): t2}, {})


def test_trim_drops_tombstones_behind_the_cursor_only(coord, store):
    broker = Broker()
    pas = broker.pas(store)
    t = coord.new_transaction().txn_id
    pas.acknowledge(t, [P(1), P(2), P(9)])
    coord.commit(t)
    pas.on_end(t, COMMITTED)
    broker.cursor = P(2)
    assert pas.trim() == 2
    claims = store.list_claims("s", "sub")
    assert P(9) in claims.tombstones and P(1) not in claims.tombstones
    with pytest.raises(AckConflict):  # the horizon still conflicts
        pas.acknowledge(coord.new_transaction().txn_id, [P(1)])


# ---------------------------------------------------------------- writer runs
class MsgId:
    def __init__(self, ledger: int, entry: int) -> None:
        self._l, self._e = ledger, entry

    def ledger_id(self) -> int:
        return self._l

    def entry_id(self) -> int:
        return self._e

    def batch_index(self) -> int:
        return -1


class FakeProducer:
    """Appends to a list; ``before_send`` sees the store at append time."""

    def __init__(self, ledger: int = 7, first_entry: int = 10, before_send=None) -> None:
        self.ledger, self.next = ledger, first_entry
        self.sent: list[tuple[bytes, dict]] = []
        self.fail: BaseException | None = None
        self.before_send = before_send
        self.async_result = pulsar.Result.Ok

    def _append(self, value, properties) -> MsgId:
        if self.before_send:
            self.before_send()
        if self.fail is not None:
            raise self.fail
        self.sent.append((value, properties))
        self.next += 1
        return MsgId(self.ledger, self.next - 1)

    def send(self, value, properties=None, **kw) -> MsgId:
        return self._append(value, properties)

    def send_async(self, value, callback, properties=None, **kw) -> None:
        callback(self.async_result, self._append(value, properties))

    def flush(self) -> None:
        pass


def test_a_run_registers_before_its_first_append_and_records_it_once(coord, store):
    t = coord.new_transaction().txn_id
    seen: list = []
    producer = FakeProducer(before_send=lambda: seen.append(store.open_writes("s")))
    run = WriterRun(store, t, "s", "w", producer)
    for i in range(5):
        run.send(b"m%d" % i, {"k": "v"})
    assert seen[0] == [OpenWrite(t, "w", None)]  # H1: registered before the append
    assert run.first == Position(7, 10) and len(producer.sent) == 5
    records, registrations = store.list_writes(t)
    assert registrations == 1 and [(r.first, r.writer) for r in records] == [(Position(7, 10),
                                                                              "w")]
    # the user's property and the protocol's one, nothing else
    assert producer.sent[0][1] == {"k": "v", PROP_TXN: f"{t};w;{store.deployment}"}


def test_a_writer_on_an_earlier_namespace_appends_the_three_property_form():
    """Until the namespace is upgraded, readers of an earlier build may read it."""
    store = MemoryMetadataStore(wire_format=WIRE_THREE)
    t = TransactionCoordinator(store).new_transaction().txn_id
    producer = FakeProducer()
    run = WriterRun(store, t, "s", "w", producer)
    run.send(b"m", {"k": "v"})
    assert producer.sent[0][1] == {"k": "v", PROP_TXN: str(t), PROP_WRITER: "w",
                                   PROP_DEPLOYMENT: store.deployment}


@pytest.mark.parametrize("writer", ["a;b", "", "a b", "x" * 201])
def test_a_writer_id_the_property_cannot_carry_is_refused_before_registering(coord, store,
                                                                          writer):
    t = coord.new_transaction().txn_id
    with pytest.raises(ConfigError, match="writer"):
        WriterRun(store, t, "s", writer, FakeProducer()).send(b"m")
    assert store.open_writes("s") == []  # refused before the send registered it


def test_no_append_after_the_decision(coord, store):
    t = coord.new_transaction().txn_id
    coord.commit(t)
    producer = FakeProducer()
    with pytest.raises(TxnNotOpen):
        WriterRun(store, t, "s", "late", producer).send(b"x")
    assert producer.sent == []


def test_a_sealed_segment_withdraws_the_registration(coord, store):
    t = coord.new_transaction().txn_id

    def sealed() -> None:
        raise SegmentSealed("sealed")

    producer = FakeProducer()
    with pytest.raises(SegmentSealed):
        WriterRun(store, t, "s", "w", producer, fence=sealed).send(b"x")
    assert producer.sent == [] and store.open_writes("s") == []

    producer.fail = pulsar.TopicTerminated("terminated")  # refused: nothing stored
    with pytest.raises(pulsar.TopicTerminated):
        WriterRun(store, t, "s", "w2", producer, fence=lambda: None).send(b"x")
    assert store.open_writes("s") == []


def test_an_append_that_may_have_landed_keeps_the_gate_closed(coord, store):
    t = coord.new_transaction().txn_id
    producer = FakeProducer()
    producer.fail = TimeoutError("no answer")
    run = WriterRun(store, t, "s", "w", producer, fence=lambda: None)
    with pytest.raises(TimeoutError):
        run.send(b"x")
    producer.fail = None
    run.send(b"y")  # a lower, unplaced entry may exist: no first position recorded
    assert run.first is None and store.open_writes("s") == [OpenWrite(t, "w", None)]
    assert TransactionBuffer(store).gate("s", Position(7, 99), Position(7, 1)) == Position(7, 1)


def test_async_sends_are_counted_and_failures_fail_the_flush(coord, store):
    t = coord.new_transaction().txn_id
    producer = FakeProducer()
    run = WriterRun(store, t, "s", "w", producer)
    done: list = []
    for i in range(4):
        run.send_async(b"m%d" % i, callback=lambda res, mid: done.append(res))
    run.flush()
    assert len(producer.sent) == 4 and len(done) == 4 and run.first == Position(7, 10)
    producer.async_result = pulsar.Result.Timeout
    run.send_async(b"lost")
    with pytest.raises(PulsarTxnError, match="failed"):
        run.flush()


class LaterProducer(FakeProducer):
    """Runs send callbacks later, on its own thread, like pulsar-client's I/O thread."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: queue.Queue = queue.Queue()
        threading.Thread(target=self._io, daemon=True).start()

    def _io(self) -> None:
        while True:
            callback, mid = self.pending.get()
            time.sleep(0.002)
            callback(self.async_result, mid)

    def send_async(self, value, callback, properties=None, **kw) -> None:
        self.pending.put((callback, self._append(value, properties)))

    @property
    def _producer(self):
        """What send_many hands built messages to (pulsar-client's native producer)."""
        outer = self

        class Native:
            def send_async(self, msg, callback) -> None:
                outer.pending.put((callback, outer._append(msg.data(), msg.properties())))

        return Native()


def test_flush_returns_only_after_every_callback_of_the_io_thread(coord, store):
    """flush is what the commit trusts: it must not return while a send's outcome is
    still to come (a failure reported after it would be lost)."""
    producer = LaterProducer()
    run = WriterRun(store, coord.new_transaction().txn_id, "s", "w", producer)
    acked: list = []
    for i in range(50):
        run.send_async(b"m%d" % i, callback=lambda res, mid: acked.append(res))
    run.send_many([b"n%d" % i for i in range(50)])
    run.flush(timeout_s=10)
    assert len(acked) == 50 and producer.pending.empty()
    producer.async_result = pulsar.Result.Timeout
    run.send_many([b"late"])
    with pytest.raises(PulsarTxnError, match="1 appends to s failed"):
        run.flush(timeout_s=10)


def test_a_send_that_raised_fails_the_flush_at_once(coord, store):
    """A send_async that raises may or may not have been queued: its callback may never
    come (refused before the producer: flush waited its whole timeout) or come later
    (pulsar-client queues, then checks for signals: a KeyboardInterrupt after queueing
    made the count go negative and a later flush return with a send in flight). Either
    way the run's outcome is unknown: flush fails, at once."""
    for queued_first in (False, True):
        producer = LaterProducer()
        run = WriterRun(store, coord.new_transaction().txn_id, "s", "w", producer)
        run.send(b"first")
        if queued_first:
            def interrupted(value, callback, properties=None, p=producer, **kw):
                LaterProducer.send_async(p, value, callback, properties)
                raise KeyboardInterrupt  # a signal handler's, after the queueing
            producer.send_async = interrupted
        else:
            producer.fail = RuntimeError("the producer is closed")
        with pytest.raises((RuntimeError, KeyboardInterrupt)):
            run.send_async(b"x")
        producer.fail = None
        started = time.monotonic()
        with pytest.raises(PulsarTxnError, match="whether it was queued is unknown"):
            run.flush(timeout_s=3)
        assert time.monotonic() - started < 1, queued_first


def test_only_the_named_attempt_of_a_task_becomes_visible(coord, store):
    """Two attempts of one Spark task write under the batch's txn; the driver names
    the attempt whose commit message it received (H3)."""
    t = coord.new_transaction().txn_id
    for attempt, ledger in (("task0-a0", 7), ("task0-a1", 8)):
        WriterRun(store, t, "s", attempt, FakeProducer(ledger=ledger)).send(b"row")
    coord.commit(t, winners=["task0-a1"])
    tb = TransactionBuffer(store)
    assert tb.classify("s", [(t, "task0-a0"), (t, "task0-a1")]) == [Verdict.SKIP, Verdict.DELIVER]
    assert tb.gate("s", Position(9, 0)) == Position(9, 0)


# ---------------------------------------------------------------- the memory backend itself
def test_memory_urls_name_private_or_shared_states():
    name = f"shared-{uuid.uuid4().hex[:8]}"
    a, b = open_store(f"memory://{name}"), open_store(f"memory://{name}")
    t = a.create_txn(a.next_txn_id(), 1_000).txn_id
    assert b.get_header(t) is not None and a.deployment == b.deployment
    other_ns = open_store(f"memory://{name}?namespace=elsewhere")
    assert other_ns.get_header(t) is None and other_ns.deployment != a.deployment
    p1, p2 = open_store("memory://"), open_store("memory://")
    t = p1.create_txn(p1.next_txn_id(), 1_000).txn_id
    assert p2.get_header(t) is None and p1.url != p2.url
    with pytest.raises(ConfigError):
        MemoryMetadataStore(name, clock=lambda: 0)  # the server's clock is fixed
    with pytest.raises(ValueError):
        open_store("memory://x?namespace=a{b}")


def test_a_closed_memory_store_is_no_longer_current_and_stops_its_watches(store):
    got: list = []
    store.watch(got.append)
    assert store.still_current()
    store.close()
    assert not store.still_current()
    store.end_txn(store.create_txn(store.next_txn_id(), 1_000).txn_id, ABORTED, None)
    time.sleep(0.05)
    assert got == []



def test_the_acks_pending_metric_counts_unsettled_committed_txns(coord, store):
    """Hole 4: a committed txn whose acks nobody settled is visible to an operator."""
    from pulsar_txn.metrics import StoreCollector

    t = coord.new_transaction().txn_id
    Broker().pas(store).acknowledge(t, [P(1)])
    coord.commit(t)  # its consumer died before applying

    def gauge():
        return next(m for m in StoreCollector(store).collect()
                    if m.name == "ptxn_transactions_acks_pending").samples[0].value
    assert gauge() == 1
    settle_committed_acks(store, t)
    assert gauge() == 0


def test_a_waitaof_memory_store_gives_readers_only_decisions_on_disk():
    """The memory backend's model of durability=waitaof (a disk that lags, as under
    appendfsync everysec), as the Redis one behaves (test_waitaof_connection): the
    committer is told "not confirmed" while the disk stalls, readers see the decision
    as not taken and GC keeps it; once on disk it is final, and a host crash falls
    back to exactly what the disk holds."""
    from pulsar_txn.errors import MetastoreUnavailable
    from pulsar_txn.metastore.base import Collected
    from pulsar_txn.state import TxnState

    store = MemoryMetadataStore(durability="waitaof")
    server = store._s
    t = store.next_txn_id()
    store.create_txn(t, 60_000)
    server.fsync()  # everysec's timer: the OPEN header is on disk
    server.disk_stalled = True
    with pytest.raises(MetastoreUnavailable):
        store.end_txn(t, TxnState.COMMITTED, [])
    assert store.get_headers([t])[t].state is TxnState.COMMITTED  # visible at once
    assert store.final_headers([t])[t].state is TxnState.OPEN     # not to readers
    store.materialize_txn(t)
    assert store.gc_txn(t, 10**15) is Collected.UNFSYNCED
    server.host_crash()
    assert store.get_header(t).state is TxnState.OPEN  # the decision was never on disk
    server.disk_stalled = False
    store.end_txn(t, TxnState.COMMITTED, [])
    server.host_crash()
    assert store.final_headers([t])[t].state is TxnState.COMMITTED
