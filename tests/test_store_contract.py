"""The MetadataStore contract, one suite run against every backend.

Each test states a property the roles rely on and runs once on the in-memory store
and once on a real Redis server (started on loopback by the project's harness, a
fresh namespace per test). A backend that breaks the property fails the test; the
two backends passing the same suite is what lets the roles' unit tests run on the
memory store.

Time: the scripts read the server's clock, so on Redis time passes for real (short
timeouts and waits of a few ms); the memory store's clock is advanced by hand.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable

import pytest

from pulsar_txn.errors import (
    AckConflict,
    AckConflictReason,
    ConfigError,
    InvalidTxnTransition,
    MetastoreError,
    PulsarTxnError,
    SinkBoundToOtherQuery,
    SinkFenced,
    SinkIdMovedAway,
    TopicNotFound,
    TxnIdStale,
    TxnNotFound,
    TxnNotOpen,
    TxnRecordsLost,
    TxnTimedOut,
)
from pulsar_txn.metastore import MemoryMetadataStore, open_store
from pulsar_txn.metastore.base import (
    Collected,
    LayoutVerdict,
    Materialized,
    MetadataStore,
)
from pulsar_txn.metastore.claims import AckRecord, ClaimKind, Claims, Holding
from pulsar_txn.records import (
    BEFORE_EARLIEST,
    WIRE_ONE,
    WIRE_THREE,
    OpenWrite,
    Position,
    Segment,
    SinkBatch,
    TxnEvent,
    TxnId,
    WriteRecord,
    partition_of,
    sink_owner,
)
from pulsar_txn.state import SegmentState, TxnState

P = 4  # partitions: few, so that txns share partitions and per-partition rules show
LONG = 60_000
COMMITTED, ABORTED = TxnState.COMMITTED, TxnState.ABORTED


class FakeClock:
    def __init__(self) -> None:
        self.ms = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.ms


class Backend:
    """A store under test, a way to open more clients of the same state, and a way
    to let server time pass."""

    def __init__(self, kind: str, store: MetadataStore, reopen: Callable[..., MetadataStore],
                 advance: Callable[[int], None]) -> None:
        self.kind, self.store, self._reopen, self._advance = kind, store, reopen, advance
        self.opened = [store]

    def client(self, **kw) -> MetadataStore:
        s = self._reopen(**kw)
        self.opened.append(s)
        return s

    def advance(self, ms: int) -> None:
        self._advance(ms)

    def earlier(self) -> Callable[[], MetadataStore]:
        """Opens clients of a namespace as a build before the one-property form left it
        (no wire format recorded); the first call creates it."""
        raise NotImplementedError  # set per backend


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    from pulsar_txn.harness.redis_server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(params=["memory", "redis"])
def backend(request):
    if request.param == "memory":
        clock, name = FakeClock(), f"contract-{uuid.uuid4().hex[:10]}"
        store = MemoryMetadataStore(name, partitions=P, clock=clock)

        def advance(ms: int) -> None:
            clock.ms += ms

        def reopen(**kw):
            return open_store(f"memory://{name}", **{"partitions": P, **kw})

        def earlier():
            old = f"memory://{name}-old"
            MemoryMetadataStore(f"{name}-old", partitions=P, wire_format=WIRE_THREE).close()
            return lambda: open_store(old, partitions=P)
    else:
        url = f"{request.getfixturevalue('redis_server').url}?namespace=c{uuid.uuid4().hex[:10]}"

        def advance(ms: int) -> None:
            time.sleep(ms / 1000 + 0.003)  # TIME has ms resolution; deadlines are strict

        def reopen(**kw):
            return open_store(url, **{"partitions": P, **kw})

        def earlier():
            old = f"{url}old"
            first = open_store(old, partitions=P)
            first.r.hdel(first.keys.config(), "wire")  # what an earlier build recorded
            first.close()
            return lambda: open_store(old, partitions=P)

        store = reopen()
    b = Backend(request.param, store, reopen, advance)
    b.earlier = earlier
    yield b
    for s in b.opened:
        s.close()


@pytest.fixture
def store(backend) -> MetadataStore:
    return backend.store


def test_a_store_names_its_namespace_and_address_without_a_secret(backend):
    """``namespace`` and ``url`` are part of the interface (issue 32): errors name them,
    and no caller reaches into a backend's key builder for the namespace."""
    s = backend.store
    assert s.namespace == ("ptxn" if backend.kind == "memory" else s.keys.ns)
    assert s.namespace.startswith("ptxn" if backend.kind == "memory" else "c")
    assert s.url.startswith(("memory://", "redis://")) and "@" not in s.url
    assert backend.client().namespace == s.namespace


# ---- helpers ----
def new_txn(store, timeout_ms=LONG, owner="", partition=None) -> TxnId:
    t = store.next_txn_id(owner, partition)
    return store.create_txn(t, timeout_ms, owner).txn_id


def wrote(store, t: TxnId, segment: str, writer: str, entry: int | None, ledger: int = 1):
    store.register_write(t, segment, writer)
    if entry is not None:
        store.record_write(t, segment, writer, Position(ledger, entry), None)


def finished(store, t: TxnId, state=COMMITTED, winners=None) -> int:
    """End and materialize; the finalization time."""
    header, _, _ = store.end_txn(t, state, winners)
    assert store.materialize_txn(t) is Materialized.DONE
    return header.finalized_ms


def K(entry: int, ledger: int = 1) -> Position:
    """A message of segment "s" (ledger 1): what an ack names."""
    return Position(ledger, entry)


def seg(i: int, lo: int, hi: int, **kw) -> Segment:
    return Segment(i, lo, hi, f"persistent://public/default/s-{i}", **kw)


def drain(q: queue.Queue, until: Callable[[list], bool], timeout: float = 5.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while not until(got):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            got.append(q.get(timeout=left))
        except queue.Empty:
            break
    return got


# ---- deployment ----
def test_clients_of_one_state_agree_on_deployment_and_partitions(backend):
    other = backend.client()
    assert other.deployment == backend.store.deployment and backend.store.deployment
    assert other.partitions == backend.store.partitions == P
    assert backend.store.still_current() and other.still_current()
    with pytest.raises(ConfigError):
        backend.client(partitions=P + 1)


def test_a_new_namespace_writes_the_one_property_form(backend):
    assert backend.store.wire_format == WIRE_ONE == backend.client().wire_format


def test_a_wire_format_switch_reaches_every_clients_next_registration(backend):
    """Readers of an earlier build never deliver the one-property form, so a switch
    must reach running writers, not only stores opened after it: a registration answers
    the form its run appends in, read with the switch atomically, whenever the client
    opened; the transactions whose runs registered the other form before are listed
    until they end (the command waits for them: integration_tests/test_wire_format.py);
    kept stores see the switch (still_current)."""
    open_earlier = backend.earlier()
    a, b = open_earlier(), open_earlier()
    try:
        assert a.wire_format == b.wire_format == WIRE_THREE
        before = new_txn(b)
        assert b.register_write(before, "seg", "w1") == WIRE_THREE
        assert a.txns_writing_other_form(WIRE_THREE) == []
        a.set_wire_format(WIRE_ONE)
        assert a.wire_format == WIRE_ONE and not b.still_current()
        after = new_txn(b)  # b opened before the switch
        assert b.register_write(after, "seg", "w2") == WIRE_ONE
        assert b.register_write(before, "seg", "w3") == WIRE_ONE  # a new run of an old txn
        assert b.register_write(before, "seg", "w1") == WIRE_ONE  # a repeated registration
        assert a.txns_writing_other_form(WIRE_ONE) == [before]
        b.end_txn(before, COMMITTED, [])
        assert a.txns_writing_other_form(WIRE_ONE) == []
        c = open_earlier()
        assert c.wire_format == WIRE_ONE and c.still_current()
        c.set_wire_format(WIRE_ONE)  # once upgraded, again is a no-op
        assert c.wire_format == WIRE_ONE
        # back, if a reader of an earlier build has to run again: running writers follow
        c.set_wire_format(WIRE_THREE)
        assert not a.still_current() and open_earlier().wire_format == WIRE_THREE
        assert a.txns_writing_other_form(WIRE_THREE) == [after]
        assert b.register_write(new_txn(b), "seg", "w4") == WIRE_THREE
        b.end_txn(after, ABORTED, [])
        assert c.txns_writing_other_form(WIRE_THREE) == []
        with pytest.raises(ConfigError, match="wire"):
            c.set_wire_format(3)
        c.close()
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("wire", ["3", "", "one"])
def test_a_namespace_of_an_unknown_wire_format_is_refused_by_name(redis_server, wire):
    """A later build's form is never overwritten with this one's: upgrade the process."""
    url = f"{redis_server.url}?namespace=w{uuid.uuid4().hex[:10]}"
    first = open_store(url)
    first.r.hset(first.keys.config(), "wire", wire)
    first.close()
    with pytest.raises(ConfigError, match=r"wire format.*upgrade this process"):
        open_store(url)


def test_a_second_client_sees_the_first_ones_state(backend):
    t = new_txn(backend.store)
    assert backend.client().get_header(t).state is TxnState.OPEN


# ---- transaction ids and creation ----
def test_ids_are_fresh_and_live_in_the_asked_partition(store):
    owner = "sink-a|q|3"
    ids = [store.next_txn_id() for _ in range(20)] + [store.next_txn_id(partition=2)
                                                      for _ in range(5)]
    assert len(set(ids)) == len(ids)
    assert {t.partition for t in ids[20:]} == {2}
    assert store.next_txn_id(owner).partition == partition_of(owner, P)


def test_create_gives_an_open_header_with_its_deadline(store):
    t = store.next_txn_id()
    h = store.create_txn(t, 5_000)
    assert (h.txn_id, h.state, h.finalized_ms, h.winners) == (t, TxnState.OPEN, None, frozenset())
    assert h.deadline_ms == h.created_ms + 5_000
    assert abs(h.created_ms - store.server_time_ms()) < 5_000
    assert store.get_header(t) == h
    unknown = TxnId(t.partition, t.seq + 10_000)
    assert store.get_headers([t, unknown]) == {t: h, unknown: None}


def test_a_retried_create_returns_the_same_header_and_a_reused_id_is_refused(store):
    t = store.next_txn_id("someone")
    h = store.create_txn(t, LONG)
    assert store.create_txn(t, LONG) == h
    with pytest.raises(PulsarTxnError, match="already in use"):
        store.create_txn(t, LONG, owner="someone")


def test_an_owner_has_one_transaction_until_it_is_replaced(store):
    owner = "sink|q|7"
    first = store.create_txn(store.next_txn_id(owner), LONG, owner)
    again = store.create_txn(store.next_txn_id(owner), LONG, owner)
    assert again == first and store.find_owner(owner) == first.txn_id
    store.end_txn(first.txn_id, ABORTED, None)
    fresh = store.create_txn(store.next_txn_id(owner), LONG, owner, replace=first.txn_id)
    assert fresh.txn_id != first.txn_id and fresh.state is TxnState.OPEN
    assert store.find_owner(owner) == fresh.txn_id
    assert store.find_owner("nobody") is None
    wrong = (partition_of(owner, P) + 1) % P
    with pytest.raises(ValueError):
        store.create_txn(store.next_txn_id(partition=wrong), LONG, owner)


def test_an_id_the_watermark_passed_is_never_created_and_counts_as_collected(store):
    unused = store.next_txn_id(partition=0)
    later = new_txn(store, partition=0)
    fin = finished(store, later)
    assert store.gc_txn(later, fin) is Collected.DONE
    with pytest.raises(TxnIdStale):
        store.create_txn(unused, LONG)
    assert store.collected([unused, later]) == {unused, later}
    assert store.get_header(unused) is None


# ---- the end CAS ----
def test_end_is_one_cas_repeatable_but_never_reversed(store):
    t = new_txn(store)
    h, changed, timed_out = store.end_txn(t, COMMITTED, [])
    assert (h.state, changed, timed_out) == (COMMITTED, True, False)
    assert h.finalized_ms is not None and store.get_header(t) == h
    h2, changed2, _ = store.end_txn(t, COMMITTED, [])
    assert (h2, changed2) == (h, False)
    with pytest.raises(InvalidTxnTransition):
        store.end_txn(t, ABORTED, None)
    a = new_txn(store)
    store.end_txn(a, ABORTED, None)
    with pytest.raises(InvalidTxnTransition):
        store.end_txn(a, COMMITTED, None)
    assert store.get_header(a).state is ABORTED and store.get_header(t).state is COMMITTED


def test_concurrent_ends_make_one_decision(backend):
    t = new_txn(backend.store)
    clients = [backend.client() for _ in range(3)]
    results: list = []

    def end(s, target) -> None:
        try:
            results.append(s.end_txn(t, target, [])[1:])
        except InvalidTxnTransition:
            results.append("refused")

    threads = [threading.Thread(target=end, args=(s, target)) for s in clients
               for target in (COMMITTED, ABORTED, COMMITTED)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    final = backend.store.get_header(t).state
    assert results.count((True, False)) == 1  # one CAS changed the state
    losing = sum(1 for s in clients for target in (COMMITTED, ABORTED, COMMITTED)
                 if target is not final)
    assert results.count("refused") == losing
    assert results.count((False, False)) == len(threads) - 1 - losing


def test_concurrent_claims_of_one_message_leave_one_holder(backend):
    txns = [new_txn(backend.store) for _ in range(6)]
    clients = [backend.client() for _ in range(3)]
    won: list = []

    def claim(i: int) -> None:
        try:
            clients[i % 3].claim_acks(txns[i], "s", "sub", [K(1)], i % 2 == 0)
            won.append(txns[i])
        except AckConflict:
            pass

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    claims = backend.store.list_claims("s", "sub")
    assert len(won) == 1
    assert claims.live.get(K(1)) == won[0] or claims.cumulative == Holding(won[0], K(1))


def test_ending_an_unknown_txn_is_not_found(store):
    with pytest.raises(TxnNotFound):
        store.end_txn(TxnId(0, 987_654), COMMITTED, None)


def test_a_commit_after_the_deadline_aborts(backend, store):
    t = new_txn(store, timeout_ms=20)
    a = new_txn(store, timeout_ms=20)
    backend.advance(40)
    h, changed, timed_out = store.end_txn(t, COMMITTED, ["w"])
    assert (h.state, changed, timed_out, h.winners) == (ABORTED, True, True, frozenset())
    h, changed, timed_out = store.end_txn(a, ABORTED, None)
    assert (h.state, changed, timed_out) == (ABORTED, True, False)
    c = store.metrics_snapshot()["counters"]
    assert (c["opened"], c["committed"], c["aborted"], c["timed_out"]) == (2, 0, 2, 2)


@pytest.mark.parametrize("lost", ["write", "ack"])
def test_a_commit_finding_fewer_records_than_its_process_made_aborts(store, lost):
    """The store came back from an earlier copy that lacks some of a txn's records;
    the committing process knows how many it made. Committing would show its entries
    without its acks (or the other way round): the same CAS aborts it instead."""
    t = new_txn(store)
    wrote(store, t, "s", "w", 5)
    store.record_acks(t, "s", "sub", [K(1)], False)
    store.record_acks(t, "s", "sub", [K(2)], False)
    made = (2, 2) if lost == "write" else (1, 3)
    with pytest.raises(TxnRecordsLost) as err:
        store.end_txn(t, COMMITTED, ["w"], made=made)
    assert "aborted" in str(err.value) and err.value.state == "ABORTED"
    assert store.get_header(t).state is ABORTED
    ok = new_txn(store)
    wrote(store, ok, "s", "w", 6)
    store.record_acks(ok, "s", "sub", [K(3)], False)
    assert store.end_txn(ok, COMMITTED, ["w"], made=(1, 1))[0].state is COMMITTED


def test_winners_are_named_or_every_writer_with_a_position(store):
    t = new_txn(store)
    wrote(store, t, "s", "placed", 5)
    wrote(store, t, "s", "unplaced", None)
    wrote(store, t, "s2", "placed", 1)
    assert store.end_txn(t, COMMITTED, None)[0].winners == frozenset({"placed"})
    named = new_txn(store)
    wrote(store, named, "s", "a", 7)
    assert store.end_txn(named, COMMITTED, ["b", "a", "b"])[0].winners == {"a", "b"}
    aborted = new_txn(store)
    wrote(store, aborted, "s", "a", 9)
    assert store.end_txn(aborted, ABORTED, ["a"])[0].winners == frozenset()


def test_the_commit_cas_advances_the_sinks_progress(store):
    sink, q = "sink-1", "query-1"
    assert store.sink_progress(sink) == (-1, None)
    b0 = new_txn(store, owner=sink_owner(sink, q, 0))
    store.end_txn(b0, COMMITTED, [], sink=SinkBatch(sink, q, 0))
    assert store.sink_progress(sink) == (0, q) and store.sink_last_batch(sink) == 0
    b2 = new_txn(store, owner=sink_owner(sink, q, 2))
    store.end_txn(b2, COMMITTED, [], sink=SinkBatch(sink, q, 2))
    b1 = new_txn(store, owner=sink_owner(sink, q, 1))
    store.end_txn(b1, COMMITTED, [], sink=SinkBatch(sink, q, 1))
    assert store.sink_progress(sink) == (2, q)  # never backwards
    b3 = new_txn(store, owner=sink_owner(sink, q, 3))
    store.end_txn(b3, ABORTED, None, sink=SinkBatch(sink, q, 3))
    assert store.sink_last_batch(sink) == 2  # an abort advances nothing


def test_a_repeated_commit_carries_the_progress_a_first_one_lacked(store):
    sink, q = "sink-2", "query"
    t = new_txn(store, owner=sink_owner(sink, q, 4))
    store.end_txn(t, COMMITTED, [])
    _, changed, _ = store.end_txn(t, COMMITTED, [], sink=SinkBatch(sink, q, 4))
    assert not changed and store.sink_progress(sink) == (4, q)


def test_a_sink_bound_to_another_query_fences_the_commit(store):
    sink = "sink-3"
    t = new_txn(store, owner=sink_owner(sink, "old", 0))
    assert store.bind_sink(sink, "old") == -1
    assert store.bind_sink(sink, "new", rebind=True) == -1
    with pytest.raises(SinkFenced):
        store.end_txn(t, COMMITTED, [], sink=SinkBatch(sink, "old", 0))
    assert store.get_header(t).state is TxnState.OPEN and store.sink_progress(sink) == (-1, "new")
    other = new_txn(store, partition=(partition_of(sink, P) + 1) % P)
    with pytest.raises(ValueError):
        store.end_txn(other, COMMITTED, [], sink=SinkBatch(sink, "new", 0))


def test_bind_sink_keeps_one_query_per_sink_id(store):
    sink = "sink-4"
    assert store.bind_sink(sink, "q1") == -1
    t = new_txn(store, owner=sink_owner(sink, "q1", 5))
    store.end_txn(t, COMMITTED, [], sink=SinkBatch(sink, "q1", 5))
    assert store.bind_sink(sink, "q1") == 5
    with pytest.raises(SinkBoundToOtherQuery) as e:
        store.bind_sink(sink, "q2")
    assert e.value.query_id == "q1"
    assert store.bind_sink(sink, "q2", rebind=True) == -1
    assert store.sink_progress(sink) == (-1, "q2")



def test_a_rebind_keeps_the_old_querys_progress_and_never_lets_it_back(store):
    """Hole 7: a rebind never erases another query's progress, and a query that lost
    its sink id never binds it again, with or without rebind (its collected batches
    would commit twice)."""
    sink = "sink-5"
    store.bind_sink(sink, "q1")
    t = new_txn(store, owner=sink_owner(sink, "q1", 7))
    store.end_txn(t, COMMITTED, [], sink=SinkBatch(sink, "q1", 7))
    assert store.bind_sink(sink, "q2", rebind=True) == -1
    for rebind in (True, False):
        with pytest.raises(SinkIdMovedAway, match="sink.id.rebind") as e:
            store.bind_sink(sink, "q1", rebind=rebind)
        assert (e.value.query_id, e.value.last_batch) == ("q2", 7)
    assert store.sink_progress(sink) == (-1, "q2")
    assert store.bind_sink(sink, "q2", rebind=True) == -1  # the holder's rebind: a no-op
    assert store.bind_sink(sink, "q3", rebind=True) == -1
    with pytest.raises(SinkIdMovedAway) as e:
        store.bind_sink(sink, "q2", rebind=True)
    assert e.value.last_batch == -1

# ---- materialization ----
def test_materialize_moves_the_gate_and_lists_the_losers(store):
    t = new_txn(store, partition=1)
    wrote(store, t, "s", "win", 4)
    wrote(store, t, "s", "lose", 6)
    wrote(store, t, "s2", "lose", None)
    assert store.materialize_txn(t) is Materialized.OPEN
    store.end_txn(t, COMMITTED, ["win"])
    assert t in store.unmaterialized_txns()
    assert {w.writer for w in store.open_writes("s")} == {"win"}  # lowest recorded one
    assert store.materialize_txn(t) is Materialized.DONE
    assert store.materialize_txn(t) is Materialized.ALREADY
    assert t not in store.unmaterialized_txns()
    assert store.open_writes("s") == [] and store.open_writes("s2") == []
    pairs = [(t, "win"), (t, "lose")]
    assert store.aborted_writers("s", pairs) == {(t, "lose")}
    assert store.aborted_writers("s2", pairs) == {(t, "lose")}
    assert store.materialize_txn(TxnId(1, 999_999)) is Materialized.GONE


def test_an_abort_lists_every_writer(store):
    t = new_txn(store)
    wrote(store, t, "s", "a", 1)
    wrote(store, t, "s", "b", None)
    finished(store, t, ABORTED)
    assert store.aborted_writers("s", [(t, "a"), (t, "b")]) == {(t, "a"), (t, "b")}


def test_materialize_finds_segments_the_caller_did_not_name(store):
    t = new_txn(store)
    wrote(store, t, "s1", "w", 1)
    wrote(store, t, "s2", "w", 1)
    store.end_txn(t, ABORTED, None)
    q: queue.Queue = queue.Queue()
    w = store.watch(q.put)
    try:
        assert store.materialize_txn(t, ["s1"]) is Materialized.DONE
        got = drain(q, lambda g: any(e.kind == "mat" for e in g))
    finally:
        w.close()
    assert store.open_writes("s2") == []
    assert store.aborted_writers("s2", [(t, "w")]) == {(t, "w")}
    assert TxnEvent("mat", t, None, ("s1", "s2")) in got  # readers of s2 are woken too


# ---- index queries ----
def test_open_expired_and_finalized_lists(backend, store):
    short = new_txn(store, timeout_ms=20)
    long_ = new_txn(store)
    opened = dict(store.open_txns())
    assert opened[short] < opened[long_] and set(opened) == {short, long_}
    backend.advance(40)
    assert store.expired_txns() == [short]
    f1 = finished(store, short, ABORTED)
    backend.advance(5)
    f2 = finished(store, long_)
    assert store.expired_txns() == [] and store.open_txns() == []
    assert dict(store.finalized_txns()) == {short: f1, long_: f2}
    assert store.finalized_txns(before_ms=f1) == [(short, f1)]
    assert len(store.finalized_txns(limit=1)) <= P


# ---- garbage collection ----
def test_gc_answers_why_it_keeps_a_header(store):
    t = new_txn(store)
    assert store.gc_txn(t, 10**15) is Collected.OPEN
    wrote(store, t, "s", "w", 3)
    store.record_acks(t, "s", "sub", [K(1)], False)
    fin = store.end_txn(t, COMMITTED, None)[0].finalized_ms
    assert store.gc_txn(t, fin) is Collected.UNMATERIALIZED
    store.materialize_txn(t)
    assert store.gc_txn(t, fin - 1) is Collected.YOUNG
    assert store.gc_txn(t, fin) is Collected.ACKS_PENDING
    store.mark_acks_applied(t, "s", "sub")
    assert store.gc_txn(t, fin) is Collected.DONE
    assert store.gc_txn(t, fin) is Collected.GONE
    assert store.get_header(t) is None and store.list_writes(t) == ([], 0)
    assert store.list_acks(t) == {} and t not in dict(store.finalized_txns())


def test_an_aborted_txns_unapplied_acks_do_not_hold_gc(store):
    t = new_txn(store)
    store.record_acks(t, "s", "sub", [K(1)], False)
    fin = finished(store, t, ABORTED)
    assert store.gc_txn(t, fin) is Collected.DONE


def test_collection_keeps_the_losers_and_leaves_a_trace(store):
    t = new_txn(store, owner="job|q|1")
    wrote(store, t, "s", "win", 1)
    wrote(store, t, "s", "lose", 2)
    fin = finished(store, t, COMMITTED, ["win"])
    assert store.gc_txn(t, fin) is Collected.DONE
    assert store.find_owner("job|q|1") is None
    assert store.collected([t]) == {t}
    assert store.aborted_writers("s", [(t, "win"), (t, "lose")]) == {(t, "lose")}  # H2


def test_the_watermark_stops_below_the_oldest_live_txn(store):
    old = new_txn(store, partition=0)
    young = new_txn(store, partition=0)
    fin = finished(store, young)
    assert store.gc_txn(young, fin) is Collected.DONE
    assert store.collected([old, young]) == {young}  # old has a header: not collected
    never = store.next_txn_id(partition=0)  # handed out after the collection
    assert store.collected([never]) == set()
    fin = finished(store, old, ABORTED)
    assert store.gc_txn(old, fin) is Collected.DONE
    assert store.collected([old, young, never]) == {old, young, never}
    assert store.collected([TxnId(0, never.seq + 10_000)]) == set()  # fail closed


# ---- writes ----
def test_a_write_registers_before_its_position(store):
    t = new_txn(store)
    store.register_write(t, "s", "w")
    assert store.open_writes("s") == [OpenWrite(t, "w", None)]
    assert store.list_writes(t) == ([WriteRecord("s", "w")], 1)
    store.record_write(t, "s", "w", Position(2, 5), None)
    assert store.open_writes("s") == [OpenWrite(t, "w", Position(2, 5))]
    store.record_write(t, "s", "w", Position(2, 3), Position(2, 9))  # first stays
    store.register_write(t, "s", "w")  # a repeated registration changes nothing
    assert store.list_writes(t) == ([WriteRecord("s", "w", Position(2, 5), Position(2, 9))], 1)


def test_registration_is_the_fence(backend, store):
    with pytest.raises(TxnNotFound):
        store.register_write(TxnId(0, 999_999), "s", "w")
    t = new_txn(store)
    store.end_txn(t, COMMITTED, [])
    with pytest.raises(TxnNotOpen) as e:
        store.register_write(t, "s", "w")
    assert e.value.state == "COMMITTED"
    late = new_txn(store, timeout_ms=20)
    store.register_write(late, "s", "w")
    backend.advance(40)
    with pytest.raises(TxnTimedOut):
        store.register_write(late, "s", "other")
    # an append that happened may still be recorded until the end
    store.record_write(late, "s", "w", Position(1, 1), None)
    assert store.list_writes(late)[0][0].first == Position(1, 1)


def test_record_needs_a_registration_and_an_open_txn(store):
    t = new_txn(store)
    with pytest.raises(PulsarTxnError, match="before registration"):
        store.record_write(t, "s", "w", Position(1, 1), None)
    store.register_write(t, "s", "w")
    store.end_txn(t, ABORTED, None)
    with pytest.raises(TxnNotOpen):
        store.record_write(t, "s", "w", Position(1, 1), None)
    with pytest.raises(TxnNotFound):
        store.record_write(TxnId(0, 999_999), "s", "w", Position(1, 1), None)


def test_open_writes_per_partition_pending_and_lowest_recorded(store):
    a = new_txn(store, partition=0)
    b = new_txn(store, partition=0)
    c = new_txn(store, partition=0)
    o = new_txn(store, partition=1)
    wrote(store, a, "s", "w", 5)
    wrote(store, b, "s", "w", 2)
    wrote(store, c, "s", "w", None)
    wrote(store, o, "s", "w", 9)
    assert set(store.open_writes("s")) == {OpenWrite(b, "w", Position(1, 2)),
                                           OpenWrite(c, "w", None),
                                           OpenWrite(o, "w", Position(1, 9))}
    assert set(store.open_writes("s", skip=[b, c])) == {OpenWrite(a, "w", Position(1, 5)),
                                                        OpenWrite(o, "w", Position(1, 9))}
    assert store.open_writes("elsewhere") == []


def test_withdraw_only_a_registration_without_position(store):
    t = new_txn(store)
    wrote(store, t, "s", "pending", None)
    wrote(store, t, "s", "placed", 4)
    assert store.withdraw_write(t, "s", "pending") is True
    assert store.withdraw_write(t, "s", "placed") is False
    assert store.withdraw_write(t, "s", "unknown") is False
    assert store.open_writes("s") == [OpenWrite(t, "placed", Position(1, 4))]
    assert [r.writer for r in store.list_writes(t)[0]] == ["placed"]


# ---- acks: claims ----
HELD = AckConflictReason.HELD
COMMITTED_ACK = AckConflictReason.COMMITTED
ON_CURSOR = AckConflictReason.ON_CURSOR


def test_two_txns_cannot_claim_one_message(store):
    t1, t2 = new_txn(store), new_txn(store)
    store.claim_acks(t1, "s", "sub", [K(1), K(2)], False)
    with pytest.raises(AckConflict) as e:
        store.claim_acks(t2, "s", "sub", [K(2), K(3)], False)
    assert (e.value.position, e.value.holder_id, e.value.reason) == (K(2), t1, HELD)
    assert K(3) not in store.list_claims("s", "sub").live  # all or nothing
    store.claim_acks(t1, "s", "sub", [K(1)], False)  # its own claim again
    store.claim_acks(t2, "s", "other-sub", [K(1)], False)  # another subscription
    assert store.list_claims("s", "sub") == Claims({K(1): t1, K(2): t1}, {})


def test_a_cumulative_claim_covers_everything_below_it(store):
    t1, t2 = new_txn(store), new_txn(store)
    store.claim_acks(t2, "s", "sub", [K(9)], False)
    with pytest.raises(AckConflict) as e:
        store.claim_acks(t1, "s", "sub", [K(10)], True)
    assert (e.value.position, e.value.holder_id) == (K(9), t2)
    store.claim_acks(t1, "s", "sub", [K(5)], True)
    with pytest.raises(AckConflict) as e:
        store.claim_acks(t2, "s", "sub", [K(3)], False)
    assert (e.value.holder_id, e.value.reason) == (t1, HELD)
    with pytest.raises(AckConflict):
        store.claim_acks(t2, "s", "sub", [K(7)], True)
    store.claim_acks(t2, "s", "sub", [K(6)], False)
    store.claim_acks(t1, "s", "sub", [K(4)], True)  # raised only, never lowered
    assert store.list_claims("s", "sub").cumulative == Holding(t1, K(5))


def test_release_frees_the_holders_claims_only(store):
    t1, t2 = new_txn(store), new_txn(store)
    store.claim_acks(t1, "s", "sub", [K(1), K(2)], False)
    store.claim_acks(t2, "s", "sub", [K(3)], False)
    assert store.release_acks(t1, "s", "sub", [K(1)]) == 1
    assert store.release_acks(t1, "s", "sub") == 1
    assert store.list_claims("s", "sub") == Claims({K(3): t2}, {})
    store.claim_acks(t2, "s", "sub", [K(1)], False)


def test_a_committed_ack_stays_a_conflict(store):
    t1, t2 = new_txn(store), new_txn(store)
    store.claim_acks(t1, "s", "sub", [K(1), K(2)], False)
    assert store.release_acks(t1, "s", "sub", [K(1), K(2)], committed=True) == 2
    assert store.list_claims("s", "sub") == Claims({}, {K(1): t1, K(2): t1})
    with pytest.raises(AckConflict) as e:
        store.claim_acks(t2, "s", "sub", [K(2)], False)
    assert (e.value.holder_id, e.value.reason) == (t1, COMMITTED_ACK)
    with pytest.raises(AckConflict) as e:  # given again to a consumer: a redelivery
        store.claim_acks(t2, "s", "sub", [K(5)], True, given=[K(1)])
    assert (e.value.position, e.value.reason) == (K(1), COMMITTED_ACK)
    store.claim_acks(t2, "s", "sub", [K(5)], True)  # acking past acked messages is fine
    assert store.release_acks(t1, "s", "sub") == 0  # tombstones are not claims


def test_a_committed_cumulative_ack_raises_the_tombstone(store):
    t1, t2, t3 = new_txn(store), new_txn(store), new_txn(store)
    store.claim_acks(t1, "s", "sub", [K(5)], True)
    assert store.release_acks(t1, "s", "sub", cumulative=True, committed=True) == 1
    claims = store.list_claims("s", "sub")
    assert claims == Claims({}, {}, None, Holding(t1, K(5)))
    assert claims.committed_horizon == K(5)
    for positions, cumulative in (([K(5)], False), ([K(3)], True)):
        with pytest.raises(AckConflict) as e:
            store.claim_acks(t2, "s", "sub", positions, cumulative)
        assert (e.value.holder_id, e.value.reason) == (t1, COMMITTED_ACK)
    store.claim_acks(t2, "s", "sub", [K(8)], True)
    store.release_acks(t2, "s", "sub", committed=True)  # every claim of the holder
    assert store.list_claims("s", "sub").committed == Holding(t2, K(8))
    with pytest.raises(AckConflict) as e:
        store.claim_acks(t3, "s", "sub", [K(6)], False)
    assert (e.value.holder_id, e.value.reason) == (t2, COMMITTED_ACK)
    store.claim_acks(t3, "s", "sub", [K(9)], False)


def test_trimmed_tombstones_leave_their_horizon_as_a_conflict(store):
    t1, t2, t3 = new_txn(store), new_txn(store), new_txn(store)
    store.claim_acks(t1, "s", "sub", [K(1), K(2), K(4)], False)
    store.release_acks(t1, "s", "sub", committed=True)
    store.claim_acks(t2, "s", "sub", [K(3)], False)
    dropped = store.trim_tombstones("s", "sub", K(2),
                                    [(K(1), t1), (K(2), t3), (K(4), t1)])
    assert dropped == 1  # K(2): another holder named; K(4): above the horizon
    assert store.list_claims("s", "sub") == Claims({K(3): t2}, {K(2): t1, K(4): t1},
                                                   trimmed=K(2))
    with pytest.raises(AckConflict) as e:
        store.claim_acks(t3, "s", "sub", [K(1)], False)
    assert (e.value.holder_id, e.value.reason, e.value.committed) == (None, ON_CURSOR, True)
    store.trim_tombstones("s", "sub", K(1), [])
    assert store.list_claims("s", "sub").trimmed == K(2)  # raised only


def test_claims_of_tells_free_held_and_committed_messages(store):
    """What a consumer asks before it hands a message out or acks it plainly: held by a
    txn (individually or under a live cumulative claim), consumed under a committed
    one (tombstone, committed cumulative horizon, trimmed horizon), or free."""
    t1, t2, t3 = new_txn(store), new_txn(store), new_txn(store)
    store.claim_acks(t1, "s", "sub", [K(10)], False)
    store.claim_acks(t2, "s", "sub", [K(4), K(6)], False)
    store.release_acks(t2, "s", "sub", [K(4), K(6)], committed=True)
    store.claim_acks(t3, "s", "sub", [K(9)], True)
    keys = [K(i) for i in range(1, 13)]
    assert store.has_claims("s", "sub") and not store.has_claims("s", "other")
    view = store.claims_of("s", "sub", keys)
    kinds = {i: view.of(K(i)) for i in range(1, 13)}
    assert kinds[10] == (ClaimKind.HELD, t1)
    assert kinds[8] == kinds[2] == (ClaimKind.HELD, t3)
    assert kinds[4] == kinds[6] == (ClaimKind.COMMITTED, t2)
    assert kinds[11] == kinds[12] == (ClaimKind.FREE, None)
    store.release_acks(t3, "s", "sub", committed=True)  # the cumulative claim commits
    view = store.claims_of("s", "sub", keys)
    assert view.of(K(8)) == (ClaimKind.COMMITTED, t3)
    assert view.of(K(11)) == (ClaimKind.FREE, None)
    store.trim_tombstones("s", "sub", K(6), [(K(4), t2), (K(6), t2)])
    assert store.claims_of("s", "sub", [K(4)]).of(K(4)) == (ClaimKind.COMMITTED, None)
    assert store.claims_of("s", "other", keys).of(K(10)) == (ClaimKind.FREE, None)


def _changed_soon(reads, limit_s: float = 1.0) -> bool:
    """Whether ``reads`` learns of a write within ``limit_s``: on Redis the server
    pushes the invalidation in the event-loop iteration that made the write, a few
    microseconds after (or before) the writer's reply."""
    deadline = time.monotonic() + limit_s
    while reads.unchanged():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_claim_reads_know_when_their_table_changed(store):
    """A consumer's hand-out check asks the store again only when the claim table may
    have changed since its own last read (ClaimReads): unchanged after a read, changed
    by every kind of write to its table (claim, release, tombstone, trim), not by a
    write to another table, and a reader knows of its own reads only."""
    t1, t2 = new_txn(store), new_txn(store)
    a, b = store.claim_reads("s", "sub"), store.claim_reads("s", "sub")
    assert not a.unchanged()  # never read: unknown
    assert a.read([K(1)]).of(K(1)) == (ClaimKind.FREE, None)
    assert a.unchanged() and not b.unchanged()
    store.claim_acks(t1, "s", "other", [K(1)], False)
    store.claim_acks(t1, "t", "sub", [K(1)], False)
    assert a.unchanged()  # other tables
    store.claim_acks(t1, "s", "sub", [K(1)], False)
    assert _changed_soon(a)
    assert a.read([K(1)]).of(K(1)) == (ClaimKind.HELD, t1) and a.unchanged()
    assert b.read([K(2)]).of(K(2)) == (ClaimKind.FREE, None) and b.unchanged()
    store.release_acks(t1, "s", "sub", [K(1)], committed=True)
    assert _changed_soon(a) and _changed_soon(b)
    assert a.read([K(1)]).of(K(1)) == (ClaimKind.COMMITTED, t1) and a.unchanged()
    store.claim_acks(t2, "s", "sub", [K(3)], False)
    assert _changed_soon(a)
    a.read([K(3)])
    store.release_acks(t2, "s", "sub")  # an abort's release
    assert _changed_soon(a)
    a.read([K(1)])
    store.trim_tombstones("s", "sub", K(1), [(K(1), t1)])
    assert _changed_soon(a)
    assert a.read([K(1)]).of(K(1)) == (ClaimKind.COMMITTED, None) and a.unchanged()


def test_claim_reads_after_a_restore_of_the_store_know_nothing(restorable):
    """A restore of an earlier copy (a new server start on old data) may take writes
    back: no read before it counts as current."""
    store = restorable.open()
    t = new_txn(store)
    saved = restorable.save()
    store.claim_acks(t, "s", "sub", [K(1)], False)
    reads = store.claim_reads("s", "sub")
    assert reads.read([K(1)]).of(K(1)) == (ClaimKind.HELD, t) and reads.unchanged()
    restorable.restore(saved)
    assert not reads.unchanged()
    assert reads.read([K(1)]).of(K(1)) == (ClaimKind.FREE, None)


def test_a_whole_entry_sorts_after_its_batch_indexes_in_claims(store):
    """Ack order, not Position order: a cumulative claim of batch index 2 of entry 5
    holds indexes 0..2 and not the entry as a whole (batch -1), and a horizon at the
    whole entry covers every index of it."""
    t1, t2 = new_txn(store), new_txn(store)
    store.claim_acks(t1, "s", "sub", [Position(1, 5, 2)], True)
    view = store.claims_of("s", "sub", [Position(1, 5, 0), Position(1, 5, 3),
                                        Position(1, 5), Position(1, 4)])
    assert view.of(Position(1, 5, 0)) == view.of(Position(1, 4)) == (ClaimKind.HELD, t1)
    assert view.of(Position(1, 5, 3)) == view.of(Position(1, 5)) == (ClaimKind.FREE, None)
    store.claim_acks(t2, "s", "other", [Position(1, 5, 1)], False)
    store.release_acks(t2, "s", "other", committed=True)
    store.trim_tombstones("s", "other", Position(1, 5), [(Position(1, 5, 1), t2)])
    assert store.claims_of("s", "other", [Position(1, 5, 7)]).of(Position(1, 5, 7)) == (
        ClaimKind.COMMITTED, None)
    assert store.list_claims("s", "other") == Claims({}, {}, trimmed=Position(1, 5))


def test_a_cumulative_claim_needs_a_position(store):
    t = new_txn(store)
    with pytest.raises(MetastoreError):
        store.claim_acks(t, "s", "sub", [], True)


# ---- acks: records ----
def test_ack_records_accumulate_under_an_open_txn(backend, store):
    t = new_txn(store)
    store.record_acks(t, "s", "sub", [K(1), K(2)], False)
    store.record_acks(t, "s", "sub", [K(2), K(3)], False)
    store.record_acks(t, "s", "sub", [K(7)], True)
    store.record_acks(t, "s", "sub", [K(6)], True)
    store.record_acks(t, "s2", "sub", [K(1)], False)
    acks = store.list_acks(t)
    assert acks[("s", "sub")] == AckRecord((K(1), K(2), K(3)), K(7), applied=False)
    assert acks[("s2", "sub")] == AckRecord((K(1),), None, applied=False)
    assert store.get_header(t).open_ack_records == 2
    store.mark_acks_applied(t, "s", "sub")
    store.mark_acks_applied(t, "s", "sub")
    store.mark_acks_applied(t, "s", "never")
    assert store.list_acks(t)[("s", "sub")].applied is True
    assert store.get_header(t).open_ack_records == 1


def test_a_refused_ack_record_leaves_nothing_that_holds_gc(store):
    """A malformed record (a cumulative ack of no position) is refused before it
    writes: no open-ack count without a record, which would pin the header as
    ACKS_PENDING forever once the transaction commits."""
    t = new_txn(store)
    with pytest.raises(MetastoreError):
        store.record_acks(t, "s", "sub", [], True)
    assert store.get_header(t).open_ack_records == 0
    fin = finished(store, t)
    assert store.gc_txn(t, fin) is Collected.DONE


def test_no_ack_joins_an_ended_or_expired_txn(backend, store):
    with pytest.raises(TxnNotFound):
        store.record_acks(TxnId(0, 999_999), "s", "sub", [K(1)], False)
    t = new_txn(store)
    store.end_txn(t, ABORTED, None)
    with pytest.raises(TxnNotOpen):
        store.record_acks(t, "s", "sub", [K(1)], False)
    late = new_txn(store, timeout_ms=20)
    backend.advance(40)
    with pytest.raises(TxnTimedOut):
        store.record_acks(late, "s", "sub", [K(1)], False)
    assert store.list_acks(late) == {}


# ---- scalable topics ----
TOPIC = "public/default/orders"


def test_a_topic_is_created_once(store):
    segs = [seg(0, 0, 32767), seg(1, 32768, 65535)]
    assert store.create_topic(TOPIC, segs, 2, "murmur3") is True
    assert store.create_topic(TOPIC, [seg(0, 0, 65535)], 1, "crc32") is False
    assert store.get_layout(TOPIC) == (1, 2, {0: segs[0], 1: segs[1]}, 1, "murmur3")
    assert store.get_segment(TOPIC, 1) == segs[1] and store.get_segment(TOPIC, 7) is None
    assert isinstance(store.get_segment(TOPIC, 0), Segment)
    assert store.get_layout("public/default/none") is None
    assert TOPIC in store.list_topics()


def test_a_layout_change_is_one_epoch_checked_step(store):
    store.create_topic(TOPIC, [seg(0, 0, 32767), seg(1, 32768, 65535)], 2)
    kids = [seg(2, 0, 16383, parents=(0,), created_epoch=2),
            seg(3, 16384, 32767, parents=(0,), created_epoch=2)]
    change = store.change_layout(TOPIC, 1, [0], kids, 4)
    assert (change.verdict, change.value) == (LayoutVerdict.APPLIED, "2")
    epoch, nxt, segs, version, _ = store.get_layout(TOPIC)
    assert (epoch, nxt, version, segs[2], segs[3]) == (2, 4, 2, kids[0], kids[1])
    parent = segs[0]
    assert (parent.state, parent.sealed_epoch, parent.children) == (SegmentState.SEALED, 2,
                                                                   (2, 3))
    assert parent.sealed_ms is not None and segs[1].active
    merge = [seg(4, 0, 65535, parents=(1,), created_epoch=3)]
    assert store.change_layout(TOPIC, 1, [1], merge, 5).verdict is LayoutVerdict.STALE
    assert store.change_layout(TOPIC, 2, [0], merge, 5).value == "0"
    assert store.change_layout(TOPIC, 2, [0], merge, 5).verdict is LayoutVerdict.NOT_ACTIVE
    assert store.change_layout(TOPIC, 2, [99], merge, 5).verdict is LayoutVerdict.NOT_ACTIVE
    again = store.change_layout(TOPIC, 2, [1], [seg(3, 0, 1)], 5)  # id 3 exists
    assert (again.verdict, again.value) == (LayoutVerdict.STALE, "2")
    assert store.change_layout("public/default/none", 1, [0], merge, 5).verdict \
        is LayoutVerdict.NOT_FOUND
    assert store.get_layout(TOPIC)[:2] == (2, 4)  # nothing a refused change wrote


def test_a_sealed_segments_end_is_fixed_once(store):
    store.create_topic(TOPIC, [seg(0, 0, 32767), seg(1, 32768, 65535)], 2)
    store.change_layout(TOPIC, 1, [0], [seg(2, 0, 32767, parents=(0,))], 3)
    version = store.get_layout(TOPIC)[3]
    with pytest.raises(ConfigError):
        store.seal_end(TOPIC, 1, Position(5, 5))
    assert store.seal_end(TOPIC, 0, Position(5, 7)) == Position(5, 7)
    assert store.seal_end(TOPIC, 0, Position(9, 9)) == Position(5, 7)
    assert store.get_segment(TOPIC, 0).end == Position(5, 7)
    assert store.get_layout(TOPIC)[3] == version + 1
    for topic, sid in ((TOPIC, 42), ("public/default/none", 0)):
        with pytest.raises(TopicNotFound):
            store.seal_end(topic, sid, Position(1, 1))


def test_an_empty_sealed_segment_ends_before_the_earliest(store):
    store.create_topic(TOPIC, [seg(0, 0, 65535)], 1)
    store.change_layout(TOPIC, 1, [0], [seg(1, 0, 65535, parents=(0,))], 2)
    assert store.get_segment(TOPIC, 0).end is None  # sealed, end not fixed yet
    assert store.seal_end(TOPIC, 0, BEFORE_EARLIEST) == BEFORE_EARLIEST
    assert store.get_layout(TOPIC).segments[0].end == BEFORE_EARLIEST


# ---- notification ----
def test_watch_pushes_positions_decisions_and_cleanups(store):
    q: queue.Queue = queue.Queue()
    w = store.watch(q.put)
    try:
        t = new_txn(store)
        wrote(store, t, "s", "w", 3)
        store.end_txn(t, COMMITTED, None)
        store.materialize_txn(t)
        got = drain(q, lambda g: any(e.kind == "mat" for e in g))
    finally:
        w.close()
    mine = [e for e in got if e.txn_id == t]
    assert mine == [TxnEvent("pos", t, None, ("s",)), TxnEvent("end", t, COMMITTED),
                    TxnEvent("mat", t, None, ("s",))]


def test_a_watcher_started_late_sees_every_later_decision(backend):
    writer = backend.store
    t = new_txn(writer)
    wrote(writer, t, "s", "w", 1)
    q: queue.Queue = queue.Queue()
    w = backend.client().watch(q.put)  # another process's watch, started after the write
    try:
        writer.end_txn(t, ABORTED, None)  # at once: no settling time
        got = drain(q, lambda g: any(e.kind == "end" for e in g))
    finally:
        w.close()
    assert TxnEvent("end", t, ABORTED) in got


def test_a_failing_callback_does_not_stop_the_watch(store):
    q: queue.Queue = queue.Queue()

    def callback(ev: TxnEvent) -> None:
        q.put(ev)
        raise RuntimeError("subscriber bug")

    w = store.watch(callback)
    try:
        a, b = new_txn(store), new_txn(store)
        store.end_txn(a, ABORTED, None)
        store.end_txn(b, ABORTED, None)
        got = drain(q, lambda g: sum(e.kind == "end" for e in g) >= 2)
    finally:
        w.close()
    assert {e.txn_id for e in got if e.kind == "end"} == {a, b}


def test_a_closed_watch_delivers_nothing_more(store):
    q: queue.Queue = queue.Queue()
    w = store.watch(q.put)
    w.close()
    store.end_txn(new_txn(store), ABORTED, None)
    time.sleep(0.2)
    assert q.empty()


def test_topic_watch_reports_follows_and_changes(store):
    other = "public/default/other"
    for topic in (TOPIC, other):
        store.create_topic(topic, [seg(0, 0, 65535)], 1)
    followed = {TOPIC}
    q: queue.Queue = queue.Queue()
    w = store.watch_topics(lambda: list(followed), q.put)
    try:
        assert drain(q, lambda g: TOPIC in g, 3) == [TOPIC]  # once, as it is followed
        store.change_layout(other, 1, [0], [seg(1, 0, 65535)], 2)  # not followed
        store.change_layout(TOPIC, 1, [0], [seg(1, 0, 65535)], 2)
        assert drain(q, lambda g: TOPIC in g, 3) == [TOPIC]
        followed.add(other)
        assert drain(q, lambda g: other in g, 3) == [other]
        store.seal_end(other, 0, "-")
        assert drain(q, lambda g: other in g, 3) == [other]
    finally:
        w.close()


# ---- operators' view ----
def test_metrics_snapshot_counts_what_is_pending(store):
    a = new_txn(store, partition=0)
    b = new_txn(store, partition=1)
    c = new_txn(store, partition=2)
    wrote(store, a, "s", "w", 8)
    wrote(store, b, "s", "w", 3)
    wrote(store, b, "t", "w", None)
    store.end_txn(c, COMMITTED, [])
    sink = "sink-m"
    store.bind_sink(sink, "q")
    m = store.metrics_snapshot()
    assert m["counters"] == {"opened": 3, "committed": 1, "aborted": 0, "timed_out": 0}
    assert (m["open"], m["unmaterialized"], m["gc_backlog"]) == (2, 1, 1)
    created = {store.get_header(t).created_ms for t in (a, b)}
    assert m["oldest_open_created_ms"] == min(created)
    assert m["open_writes"] == {"s": (2, Position(1, 3)), "t": (1, None)}
    assert m["sinks"] == {sink: -1}
    assert abs(m["now_ms"] - store.server_time_ms()) < 5_000


def test_readers_get_every_decision_a_crash_cannot_lose(store):
    """final_headers, what readers classify with: with nothing left to fsync (the memory
    store; Redis in strict mode fsyncs before it replies), every decision as taken.
    (durability=waitaof: tests/test_waitaof_connection.py.)"""
    c, a, o = new_txn(store), new_txn(store), new_txn(store)
    store.end_txn(c, COMMITTED, ["w"])
    store.end_txn(a, ABORTED, None)
    forged = TxnId(c.partition, c.seq + 10_000)
    assert store.final_headers([c, a, o, forged]) == store.get_headers([c, a, o, forged])
    assert store.final_headers([c])[c].state is COMMITTED


# ---- restores of the store (DESIGN §3: ids are never reused after a rollback) ----
class Restorable:
    """One namespace on a state that can be saved and later started again from a saved
    copy, as a restore from a backup or a host crash does (a new server process on an
    earlier state). Memory: a saved copy of the shared state; Redis: a copy of the data
    directory, the server killed and started again on it."""

    def __init__(self, kind: str, tmp_path) -> None:
        self.kind, self.opened = kind, []
        if kind == "memory":
            self.name = f"restore-{uuid.uuid4().hex[:10]}"
            self.url = f"memory://{self.name}"
        else:
            from pulsar_txn.harness.redis_server import RedisServer

            self.tmp = tmp_path
            self.server = RedisServer(tmp_path / "redis").start()
            self.url = f"{self.server.url}?namespace=restore"

    def open(self) -> MetadataStore:
        s = open_store(self.url, partitions=P)
        self.opened.append(s)
        return s

    def save(self):
        if self.kind == "memory":
            return self.opened[0].save_state()
        import shutil

        dest = self.tmp / f"copy-{len(list(self.tmp.glob('copy-*')))}"
        shutil.copytree(self.server.workdir, dest)  # appendfsync always: all is on disk
        return dest

    def restore(self, saved) -> None:
        for s in self.opened:
            s.close()
        self.opened.clear()
        if self.kind == "memory":
            MemoryMetadataStore(self.name).restore_state(saved)
            return
        import shutil

        self.server.kill()
        shutil.rmtree(self.server.workdir)
        shutil.copytree(saved, self.server.workdir)
        self.server.start()

    def close(self) -> None:
        for s in self.opened:
            s.close()
        if self.kind == "redis":
            self.server.stop()


@pytest.fixture(params=["memory", "redis"])
def restorable(request, tmp_path):
    r = Restorable(request.param, tmp_path)
    yield r
    r.close()


def test_ids_are_never_handed_out_twice_whatever_restores_happen(restorable):
    """A lost id handed out again would make the lost transaction's entries look like
    the new one's (once it commits and is collected). Saved states are started again
    and again, in the same and in other orders, including one taken before the
    partition handed out any id: no id is ever handed out twice, allocated or created."""
    handed: set[TxnId] = set()

    def use(store, n: int = 3) -> None:
        got = [store.next_txn_id(partition=0) for _ in range(n)]
        got += [new_txn(store, partition=0) for _ in range(n)]
        again = handed & set(got)
        assert not again, f"handed out twice: {sorted(map(str, again))}"
        assert len(set(got)) == len(got)
        handed.update(got)

    first = restorable.open()
    use(first, n=0)  # the namespace exists; partition 0 has handed out nothing yet
    new_txn(first, partition=1)
    before_first_use = restorable.save()
    use(first)
    older = restorable.save()
    use(first)
    newer = restorable.save()
    for saved in (older, older, before_first_use, newer, older, before_first_use, newer):
        restorable.restore(saved)
        use(restorable.open())
        use(restorable.open())  # a second client of the same start: its own block
