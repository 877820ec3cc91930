"""The PendingAckStore's deferred acks (``Consumer.acknowledge_async``) and how a
transaction's end settles its claims, on the memory backend.

Deferred acks are claimed and recorded in one go (per batch, at the latest by the
commit's flush); whatever fails there fails the transaction and hands every message
of the batch out again. An end names the positions it settles: reading the whole
claim table (which holds every tombstone until trimmed) is kept for a transaction
whose claims are not all known to this process.
"""

from __future__ import annotations

import threading

import pytest

from pulsar_txn import pending_ack
from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.errors import AckConflict, AckConflictReason, MetastoreUnavailable, TxnNotOpen
from pulsar_txn.metastore import MemoryMetadataStore
from pulsar_txn.metastore.claims import ClaimKind, Claims, Holding
from pulsar_txn.pending_ack import PendingAckStore
from pulsar_txn.records import Position
from pulsar_txn.state import TxnState


class Broker:
    def __init__(self) -> None:
        self.applied: list[tuple[list[Position], bool]] = []
        self.redelivered: list[Position] = []

    def pas(self, store) -> PendingAckStore:
        return PendingAckStore(store, "s", "sub", lambda ps, cum: self.applied.append(
            (list(ps), cum)), self.redelivered.extend, lambda: None)


def P(e: int) -> Position:
    return Position(1, e)


def OPEN() -> bool:
    return True


@pytest.fixture
def store():
    s = MemoryMetadataStore(partitions=4)
    yield s
    s.close()


@pytest.fixture
def coord(store):
    c = TransactionCoordinator(store, materialize_inline=True)
    yield c
    c.close()


class Calls:
    """Counts a store method's calls (and keeps their arguments)."""

    def __init__(self, monkeypatch, store, name: str) -> None:
        self.args: list[tuple] = []
        real = getattr(store, name)

        def counted(*a, **k):
            self.args.append((a, k))
            return real(*a, **k)

        monkeypatch.setattr(store, name, counted)


def test_deferred_acks_are_claimed_and_recorded_in_one_go(coord, store, monkeypatch):
    claims, records = Calls(monkeypatch, store, "claim_acks"), Calls(monkeypatch, store,
                                                                      "record_acks")
    broker = Broker()
    pas = broker.pas(store)
    t = coord.new_transaction().txn_id
    for e in (1, 2, 3):
        assert pas.defer(t, P(e), OPEN) is False
    assert store.list_claims("s", "sub") == Claims({}, {})  # nothing asked yet
    pas.flush_deferred(t, seal=True)
    assert len(claims.args) == len(records.args) == 1
    assert store.list_claims("s", "sub").live == {P(1): t, P(2): t, P(3): t}
    coord.commit(t)
    pas.on_end(t, TxnState.COMMITTED)
    assert broker.applied == [([P(1), P(2), P(3)], False)]


def test_a_full_batch_asks_to_be_flushed(coord, store, monkeypatch):
    monkeypatch.setattr(pending_ack, "ACK_BATCH", 3)
    pas = Broker().pas(store)
    t = coord.new_transaction().txn_id
    assert [pas.defer(t, P(e), OPEN) for e in (1, 2, 3)] == [False, False, True]


def test_an_ack_after_the_commit_took_the_batch_is_refused(coord, store):
    """The commit's flush seals the batch: an ack racing the commit cannot be taken
    and left behind (its message consumed by the output, its ack never committed)."""
    pas = Broker().pas(store)
    t = coord.new_transaction().txn_id
    pas.defer(t, P(1), OPEN)
    pas.flush_deferred(t, seal=True)
    with pytest.raises(TxnNotOpen):
        pas.defer(t, P(2), OPEN)
    assert store.list_claims("s", "sub").live == {P(1): t}


def test_a_second_deferred_ack_of_one_message_in_one_txn_conflicts(coord, store):
    pas = Broker().pas(store)
    t = coord.new_transaction().txn_id
    pas.defer(t, P(1), OPEN)
    with pytest.raises(AckConflict) as e:
        pas.defer(t, P(1), OPEN)  # in the batch
    assert e.value.reason is AckConflictReason.AGAIN
    pas.flush_deferred(t)
    with pytest.raises(AckConflict) as e:
        pas.defer(t, P(1), OPEN)  # recorded already
    assert e.value.reason is AckConflictReason.AGAIN


def test_a_conflict_at_the_flush_hands_every_deferred_message_out_again(coord, store):
    """Another txn holds P(2): the batch P(1..3) claims nothing (all or nothing), the
    flush raises, and when the txn ends (its commit aborts it) all three go round."""
    broker = Broker()
    pas = broker.pas(store)
    holder, t = coord.new_transaction().txn_id, coord.new_transaction().txn_id
    pas.acknowledge(holder, [P(2)])
    for e in (1, 2, 3):
        pas.defer(t, P(e), OPEN)
    with pytest.raises(AckConflict):
        pas.flush_deferred(t, seal=True)
    assert store.list_claims("s", "sub").live == {P(2): holder}
    coord.abort(t)
    pas.on_end(t, TxnState.ABORTED)
    assert sorted(broker.redelivered) == [P(1), P(2), P(3)]
    assert store.claims_of("s", "sub", [P(1)]).of(P(1))[0] is ClaimKind.FREE


def test_an_abort_hands_deferred_acks_out_again(coord, store):
    broker = Broker()
    pas = broker.pas(store)
    t = coord.new_transaction().txn_id
    pas.defer(t, P(1), OPEN)
    pas.defer(t, P(2), OPEN)
    assert t in pas.pending_txns()  # a missed end is found by recovery too
    coord.abort(t)
    pas.on_end(t, TxnState.ABORTED)
    assert sorted(broker.redelivered) == [P(1), P(2)] and broker.applied == []
    assert pas.pending_txns() == []


def test_an_end_settles_by_naming_its_positions(coord, store, monkeypatch):
    """The claim table holds every tombstone until it is trimmed: an end that read it
    whole would cost more with every committed ack of the subscription. A commit and
    an abort name what they settle."""
    pas = Broker().pas(store)
    releases = Calls(monkeypatch, store, "release_acks")
    t1, t2 = coord.new_transaction().txn_id, coord.new_transaction().txn_id
    pas.acknowledge(t1, [P(1), P(2)])
    coord.commit(t1)
    pas.on_end(t1, TxnState.COMMITTED)
    pas.acknowledge(t2, [P(3)])
    pas.acknowledge(t2, [P(9)], cumulative=True)
    coord.abort(t2)
    pas.on_end(t2, TxnState.ABORTED)
    whole = [a for a, k in releases.args
             if not (a[3] if len(a) > 3 else k.get("positions")) and not k.get("cumulative")]
    assert whole == []
    claims = store.list_claims("s", "sub")
    assert claims.tombstones == {P(1): t1, P(2): t1}
    assert claims.live == {} and claims.cumulative is None


def test_an_end_whose_claims_are_unknown_reads_the_whole_table(coord, store, monkeypatch):
    """A claim whose answer was lost may exist without a record: that txn's end still
    finds it (by reading the table whole) and leaves nothing held."""
    pas = Broker().pas(store)
    t = coord.new_transaction().txn_id
    claim = store.claim_acks

    def claimed_then_lost(*a, **k):
        claim(*a, **k)
        raise MetastoreUnavailable("fake: the answer was lost with the connection")

    monkeypatch.setattr(store, "claim_acks", claimed_then_lost)
    with pytest.raises(MetastoreUnavailable):
        pas.acknowledge(t, [P(4)])
    monkeypatch.setattr(store, "claim_acks", claim)
    pas.acknowledge(t, [P(5)])
    coord.commit(t)
    pas.on_end(t, TxnState.COMMITTED)
    claims = store.list_claims("s", "sub")
    assert claims.live == {} and claims.tombstones == {P(5): t}


def test_a_deferred_ack_after_its_txn_ended_is_refused(coord, store):
    """Asked under the lock the commit's flush takes: an ack that comes after the end
    (or once the commit began) is refused, never left in a batch no one claims."""
    pas = Broker().pas(store)
    t = coord.new_transaction().txn_id
    with pytest.raises(TxnNotOpen):
        pas.defer(t, P(1), lambda: False)
    assert pas.deferred_holders() == {} and pas.pending_txns() == []


def test_the_commits_flush_waits_for_a_batch_being_claimed_and_fails_with_it(
        coord, store, monkeypatch):
    """A full batch is being claimed on the acking thread when the commit's flush runs
    on another: the commit must not go on without it (its acks would be missing from
    a committed txn), so it waits for that claim and raises what it raised."""
    pas = Broker().pas(store)
    holder, t = coord.new_transaction().txn_id, coord.new_transaction().txn_id
    pas.acknowledge(holder, [P(2)])
    claim, inside, go = store.claim_acks, threading.Event(), threading.Event()

    def slow_claim(*a, **k):
        inside.set()
        assert go.wait(10)
        return claim(*a, **k)

    monkeypatch.setattr(store, "claim_acks", slow_claim)
    for e in (1, 2, 3):
        pas.defer(t, P(e), OPEN)
    errors: dict[str, BaseException] = {}

    def run(name: str, seal: bool) -> None:
        try:
            pas.flush_deferred(t, seal=seal)
        except BaseException as e:  # noqa: BLE001 - recorded for the assertions
            errors[name] = e

    batch = threading.Thread(target=run, args=("batch", False))
    batch.start()
    assert inside.wait(10)
    commit = threading.Thread(target=run, args=("commit", True))
    commit.start()
    commit.join(0.3)
    assert commit.is_alive(), "the commit's flush went on while a batch was being claimed"
    go.set()
    batch.join(10)
    commit.join(10)
    assert isinstance(errors.get("batch"), AckConflict)
    assert isinstance(errors.get("commit"), AckConflict)


def test_a_refused_claim_keeps_the_txns_earlier_claims(coord, store):
    """A cumulative ack refused by a conflict releases nothing the txn held before: its
    earlier cumulative claim stays, so its commit tombstones it (a later claim of a
    message below it by another txn conflicts, invariant 7)."""
    pas = Broker().pas(store)
    t, other = coord.new_transaction().txn_id, coord.new_transaction().txn_id
    pas.acknowledge(t, [P(5)], cumulative=True)
    pas.acknowledge(other, [P(7)])
    with pytest.raises(AckConflict):
        pas.acknowledge(t, [P(9)], cumulative=True)
    assert store.list_claims("s", "sub").cumulative == Holding(t, P(5))
    coord.commit(t)
    pas.on_end(t, TxnState.COMMITTED)
    with pytest.raises(AckConflict) as e:
        pas.acknowledge(coord.new_transaction().txn_id, [P(3)])
    assert e.value.committed


def test_a_claim_of_a_committed_txn_is_consumed_only_if_the_txn_recorded_it(coord, store):
    """``verdicts`` before the committer wrote its tombstones (its follow-up failed, or
    it died after the CAS): a HELD claim whose holder committed is a consumed message
    if the holder recorded the ack, individually or cumulatively; a claim it never
    recorded is no ack (it is released and the message goes round), and a claim of an
    open or aborted holder stays HELD."""
    acks, cum = Broker().pas(store), PendingAckStore(store, "s", "sub2", lambda ps, c: None)
    t, o, a, c = (coord.new_transaction().txn_id for _ in range(4))
    store.claim_acks(t, "s", "sub", [P(1), P(2)], False, [])
    store.record_acks(t, "s", "sub", [P(1)], False)  # P(2): claimed, never recorded
    for holder, p in ((o, P(3)), (a, P(4))):
        store.claim_acks(holder, "s", "sub", [p], False, [])
        store.record_acks(holder, "s", "sub", [p], False)
    store.claim_acks(c, "s", "sub2", [P(6)], True, [])
    store.record_acks(c, "s", "sub2", [P(6)], True)
    ps = [P(1), P(2), P(3), P(4), P(5)]

    def kinds(pas, sub):
        return [k for k, _ in pas.verdicts(store.claims_of("s", sub, ps), ps)]

    H, C, F = ClaimKind.HELD, ClaimKind.COMMITTED, ClaimKind.FREE
    assert kinds(acks, "sub") == [H, H, H, H, F]
    assert kinds(cum, "sub2") == [H, H, H, H, H]
    for txn in (t, c):
        coord.commit(txn)  # the CAS alone: nobody writes tombstones
    coord.abort(a)
    assert kinds(acks, "sub") == [C, H, H, H, F]
    assert kinds(cum, "sub2") == [C, C, C, C, C]
