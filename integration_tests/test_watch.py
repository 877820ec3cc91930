"""The watches (metastore/watch.py) on a real Redis: pushed, one blocking read per hash
slot, and a resync whenever events may have been missed: after a reconnect, and when
the follower's position was trimmed away (streams are capped with MAXLEN ~) instead
of silently skipping the trimmed events."""

from __future__ import annotations

import statistics
import threading
import time
import uuid

import pytest
import redis
from helpers import raw_redis
from redis.crc import key_slot

from pulsar_txn.harness.redis_server import RedisServer
from pulsar_txn.metastore import RedisMetadataStore
from pulsar_txn.records import TxnEvent
from pulsar_txn.state import TxnState


class Recorder:
    """Collects callbacks; can hold the watch thread inside one (a follower held back)."""

    def __init__(self) -> None:
        self.got: list = []
        self.cond = threading.Condition()
        self.hold_on = None          # predicate: hold when it matches an item
        self.held = threading.Event()
        self.release = threading.Event()

    def __call__(self, item) -> None:
        if self.hold_on is not None and self.hold_on(item) and not self.release.is_set():
            self.held.set()
            self.release.wait(10)
        with self.cond:
            self.got.append(item)
            self.cond.notify_all()

    def wait_for(self, pred, timeout: float = 5.0) -> list:
        with self.cond:
            assert self.cond.wait_for(lambda: pred(self.got), timeout), self.got
            return list(self.got)

    def seqs(self) -> list[int]:
        with self.cond:
            return [e.txn_id.seq for e in self.got if e.kind != "resync"]

    def resyncs(self) -> int:
        with self.cond:
            return sum(1 for e in self.got if e is None or (isinstance(e, TxnEvent)
                                                            and e.kind == "resync"))


@pytest.fixture
def store(redis_server, namespace):
    s = RedisMetadataStore(redis_server.url, namespace=namespace, partitions=4)
    yield s
    s.close()


@pytest.fixture
def r(redis_server):
    c = raw_redis(redis_server.url)
    yield c
    c.close()


def _ev(seq: int) -> dict:
    return {"k": "pos", "t": seq}


def _has(*seqs):
    return lambda got: all(any(getattr(e, "txn_id", None) is not None and e.txn_id.seq == s
                               for e in got) for s in seqs)


def test_txn_watch_follows_every_partition_and_never_resyncs_without_a_gap(store, r):
    ev = store.keys.events
    r.xadd(ev(1), _ev(1))          # before the watch: not delivered (it starts at the end)
    rec = Recorder()
    w = store.watch(rec)
    try:
        assert w.ready.is_set()
        for p in range(4):         # partitions 0, 2, 3 start at a missing stream (origin)
            r.xadd(ev(p), _ev(100 + p))
        rec.wait_for(_has(100, 101, 102, 103))
        pipe = r.pipeline(transaction=False)
        for i in range(1500):      # more than one XREAD batch (COUNT 1024)
            pipe.xadd(ev(2), _ev(1000 + i))
        pipe.execute()
        rec.wait_for(_has(2499))
        r.xtrim(ev(2), maxlen=0, approximate=False)   # drop only what was read
        r.xtrim(ev(3), minid=r.xrevrange(ev(3), count=1)[0][0], approximate=False)
        r.xadd(ev(2), _ev(5000))
        r.xadd(ev(3), _ev(5001))
        rec.wait_for(_has(5000, 5001))
        time.sleep(0.1)
        seqs = rec.seqs()
        assert 1 not in seqs
        assert [s for s in seqs if 1000 <= s < 2500] == list(range(1000, 2500))
        assert rec.resyncs() == 0, rec.got[-5:]
    finally:
        w.close()


def test_txn_watch_resyncs_when_unread_events_were_trimmed(store, r):
    """The follower is idle at event 1; events 2 and 3 arrive and the stream is trimmed
    to its last entry in the same MULTI (a burst past MAXLEN ~): event 2 was never
    read. The follower gets event 3 and must emit a resync, not skip silently."""
    key = store.keys.events(0)
    rec = Recorder()
    w = store.watch(rec)
    try:
        r.xadd(key, _ev(1))
        rec.wait_for(_has(1))
        time.sleep(0.2)               # back in its blocking read
        pipe = r.pipeline(transaction=True)
        pipe.xadd(key, _ev(2))
        pipe.xadd(key, _ev(3))
        pipe.xtrim(key, maxlen=1, approximate=False)
        pipe.execute()
        rec.wait_for(lambda got: any(e.kind == "resync" for e in got))
        assert 2 not in rec.seqs()
        r.xadd(key, _ev(4))           # following goes on, without another resync
        rec.wait_for(_has(4))
        time.sleep(0.1)
        assert rec.resyncs() == 1
    finally:
        w.close()


def test_txn_watch_resyncs_after_falling_behind_past_the_cap(redis_server, namespace, r):
    """Real commits while the follower is held in a callback; the stream is trimmed
    past its position (what MAXLEN ~ does once it is more than event_maxlen behind)."""
    store = RedisMetadataStore(redis_server.url, namespace=namespace, partitions=1)
    rec = Recorder()
    w = store.watch(rec)
    try:
        ids = []
        for _ in range(6):
            t = store.next_txn_id()
            store.create_txn(t, 60_000)
            ids.append(t)
        rec.hold_on = lambda e: e.kind == "end" and e.txn_id == ids[0]
        store.end_txn(ids[0], TxnState.COMMITTED, None)
        assert rec.held.wait(5)
        for t in ids[1:]:
            store.end_txn(t, TxnState.ABORTED, None)
        r.xtrim(store.keys.events(0), maxlen=2, approximate=False)
        rec.release.set()
        got = rec.wait_for(lambda got: any(e.kind == "resync" for e in got))
        ends = [e.txn_id for e in got if e.kind == "end"]
        assert ends[0] == ids[0] and ids[1] not in ends      # trimmed before it was read
        t = store.next_txn_id()
        store.create_txn(t, 60_000)
        store.end_txn(t, TxnState.COMMITTED, None)           # pushed as before
        rec.wait_for(lambda got: any(e.kind == "end" and e.txn_id == t for e in got))
        assert rec.resyncs() == 1
    finally:
        w.close()
        store.close()


def _topic_pair(store) -> tuple[str, str]:
    while True:
        a, b = (f"public/default/w-{uuid.uuid4().hex[:8]}" for _ in range(2))
        if key_slot(store.keys.topic_events(a).encode()) != key_slot(
                store.keys.topic_events(b).encode()):
            return a, b


def test_topic_watch_follows_topics_as_they_come_and_resyncs_on_a_trimmed_gap(store, r):
    a, b = _topic_pair(store)
    ka, kb = store.keys.topic_events(a), store.keys.topic_events(b)
    followed = [a]
    rec = Recorder()
    w = store.watch_topics(lambda: list(followed), rec)
    try:
        rec.wait_for(lambda got: got == [a])               # once when followed
        r.xadd(ka, {"k": "layout", "e": 2})
        rec.wait_for(lambda got: got.count(a) == 2)
        followed.append(b)                                  # joins within a refresh
        rec.wait_for(lambda got: b in got)
        r.xadd(kb, {"k": "layout", "e": 2})
        rec.wait_for(lambda got: got.count(b) == 2)
        assert None not in rec.got
        pipe = r.pipeline(transaction=True)                 # an unread event trimmed
        pipe.xadd(ka, {"k": "layout", "e": 3})
        pipe.xadd(ka, {"k": "layout", "e": 4})
        pipe.xtrim(ka, maxlen=1, approximate=False)
        pipe.execute()
        rec.wait_for(lambda got: None in got)
        assert rec.got.count(None) == 1
        followed.remove(a)
        time.sleep(0.5)
        n = len(rec.got)
        r.xadd(ka, {"k": "layout", "e": 5})                 # no longer followed
        r.xadd(kb, {"k": "layout", "e": 3})
        rec.wait_for(lambda got: got[n:] == [b])
        time.sleep(0.2)
        assert rec.got[n:] == [b]
    finally:
        w.close()


def test_watch_uses_one_connection_per_slot_and_closes_promptly(store, r):
    def clients() -> int:  # on a cluster: every node's (each slot's reads go to its owner)
        if isinstance(r, redis.cluster.RedisCluster):
            return sum(len(r.client_list(target_nodes=n)) for n in r.get_nodes())
        return len(r.client_list())

    before = clients()
    w = store.watch(lambda ev: None)
    assert clients() == before + store.partitions
    time.sleep(0.2)  # its reads are blocked now (5 s)
    t0 = time.monotonic()
    w.close()
    assert time.monotonic() - t0 < 0.5 and not w.is_alive()
    deadline = time.monotonic() + 2
    while clients() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert clients() == before
    w.close()  # idempotent


def test_watch_resyncs_once_after_a_server_restart(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    store = RedisMetadataStore(server.url, namespace="wr")
    rec = Recorder()
    w = store.watch(rec)
    try:
        server.kill()
        time.sleep(0.5)
        server.start()
        rec.wait_for(lambda got: any(e.kind == "resync" for e in got), timeout=10)
        c = redis.Redis.from_url(server.url, decode_responses=True)
        c.xadd(store.keys.events(5), _ev(7))
        rec.wait_for(_has(7))
        c.close()
        time.sleep(0.2)
        # every partition's read broke at once: one resync, not one per partition
        assert rec.resyncs() == 1, rec.got
    finally:
        w.close()
        store.close()
        server.stop()


def test_commit_to_callback_latency(store):
    """The watch's own share of the wake-up latency (commit CAS -> callback)."""
    seen: dict = {}
    cond = threading.Condition()

    def cb(ev):
        if ev.kind == "end":
            with cond:
                seen[ev.txn_id] = time.perf_counter()
                cond.notify_all()

    w = store.watch(cb)
    lat = []
    try:
        for _ in range(50):
            t = store.next_txn_id()
            store.create_txn(t, 60_000)
            t0 = time.perf_counter()
            store.end_txn(t, TxnState.COMMITTED, None)
            with cond:
                assert cond.wait_for(lambda t=t: t in seen, 5)
            lat.append((seen[t] - t0) * 1000)
    finally:
        w.close()
    p50, p99 = statistics.median(lat), sorted(lat)[int(len(lat) * 0.99) - 1]
    print(f"\ncommit -> watch callback: p50 {p50:.2f} ms, p99 {p99:.2f} ms (incl. the CAS)")
    assert p50 < 50


def test_gap_check_decides_each_case_from_one_snapshot(store, r):
    """Each branch of the trimmed-gap check on real stream states (not a mock): the
    follower read ``got`` after ``before`` (the before-th entry ever added)."""
    from pulsar_txn.metastore.watch import RedisWatch

    key = f"{{{store.keys.ns}:gap}}:ev"
    w = RedisWatch(store, lambda ev: None)  # not started: only its check is used
    conn = w._new_conn(key_slot(key.encode()))  # the key's node, on a cluster too

    def check(before, ordinal, got_ids):
        return w._check_gap(conn, key, before, ordinal, [(i, {}) for i in got_ids])

    try:
        e = [r.xadd(key, _ev(i)) for i in range(1, 6)]  # e[0] .. e[4]: ordinals 1 .. 5
        assert not check(e[1], 2, [e[2]])               # head older than the batch
        assert w._pos[key] == (e[2], 3)
        assert not check(e[1], 2, e[2:])                # batch ends at the newest entry
        assert check(e[0], 1, e[2:])                    # ... after a hole (e[1])
        assert w._pos[key] == (e[4], 5)                 # restarts at the newest
        r.xtrim(key, minid=e[2], approximate=False)  # e[0], e[1] trimmed
        assert not check(e[1], 2, e[2:4])               # head == batch start, none unread
        assert w._pos[key] == (e[3], 4)
        assert check(e[0], 1, e[2:4])                   # head == batch start, e[1] unread
        r.xtrim(key, minid=e[4], approximate=False)  # trimmed past the batch
        assert check(e[1], 2, [e[2]])                   # cannot tell: resync
        r.xtrim(key, maxlen=0, approximate=False)       # all read, all trimmed: exact
        assert not check(e[3], 4, [e[4]])
        r.delete(key)
        assert check(e[3], 4, [e[4]])                   # the stream itself is gone
        assert w._pos[key] == ("0-0", 0)
    finally:
        conn.disconnect()
        w.close()
