"""Transaction-core benchmarks: ratios against a baseline measured in the same run.

    python benchmarks/bench_core.py [--quick]        (PULSAR_TXN_BROKER picks the broker)

Measures (DESIGN §9): commit latency 64 segments ÷ 1; commit→visible for a waiting
reader (p50/p99); gate computation at 100,000 open txns ÷ 10; READ_COMMITTED
reader throughput ÷ a plain pulsar-client reader on the same data; the client API's
transactional produce (per broker entry, and per message) ÷ a plain pulsar-client
producer; cold start of
coordinator + buffer with 1,000,000 finalized txns in history ÷ none.
Not a test: it prints numbers, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid

import redis
from common import machine, plain_read

from pulsar_txn.buffer import TransactionBuffer
from pulsar_txn.client import PulsarTxnClient
from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.harness import Services
from pulsar_txn.metastore import RedisMetadataStore
from pulsar_txn.records import Position

# Bench-only bulk loader: leaves exactly what end_txn leaves for a finalized txn
# (header + finalized-index entry), n at a time, server-side, to build history fast.
FILL_FINALIZED = """#!lua
local tag, base, n, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
for i = base, base + n - 1 do
  redis.call('HSET', tag .. ':h:' .. i, 'st', 'COMMITTED', 'dl', now, 'cr', now, 'fin', now,
    'own', '', 'tmo', 60000, 'wv', 1, 'ao', 0, 'v', 1, 'win', '["w"]')
  redis.call('ZADD', KEYS[1], now, i)
end
return n
"""


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def timed(fn, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def bench_commit_fanout(url, reps):
    """Decision latency (commit() returns at the CAS), 1 vs 64 segments, interleaved."""
    store = RedisMetadataStore(url, namespace=f"b{uuid.uuid4().hex[:8]}")
    coord = TransactionCoordinator(store)
    lat: dict[int, list[float]] = {1: [], 64: []}

    def one(nseg, r):
        h = coord.new_transaction(60_000)
        segs = [f"persistent://public/default/fan-{nseg}-{i}" for i in range(nseg)]
        for i, s in enumerate(segs):
            store.register_write(h.txn_id, s, "w")
            store.record_write(h.txn_id, s, "w", Position(1, r * 1000 + i), None)
        t0 = time.perf_counter()
        coord.commit(h.txn_id, ["w"], segs)
        lat[nseg].append(time.perf_counter() - t0)
        coord.materialize(h.txn_id, segs)  # off the clock: keep the worker idle

    for r in range(reps + 10):
        one(1, r)
        one(64, r)
    one_ms = statistics.median(lat[1][10:]) * 1e3
    many_ms = statistics.median(lat[64][10:]) * 1e3
    coord.close()
    store.close()
    return {"commit_1_segment_ms": one_ms, "commit_64_segments_ms": many_ms,
            "ratio_64_vs_1": many_ms / one_ms, "target": "<= 1.2"}


def bench_visibility(services, reps):
    client = PulsarTxnClient(services.service_url, services.metastore_url,
                             namespace=f"b{uuid.uuid4().hex[:8]}")
    topic = f"persistent://public/default/vis-{uuid.uuid4().hex[:8]}"
    p = client.create_producer(topic)
    reader = client.create_reader(topic)
    lat = []
    for i in range(reps):
        txn = client.new_transaction()
        p.send(b"v%d" % i, txn=txn)
        woke: list[float] = []

        def wait(woke=woke):
            reader.read_next(10_000)
            woke.append(time.perf_counter())

        th = threading.Thread(target=wait)
        th.start()
        time.sleep(0.01)  # the reader is now blocked at its gate
        t0 = time.perf_counter()
        txn.commit()
        th.join()
        lat.append(woke[0] - t0)
    client.close()
    return {"p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3,
            "target": "p50 <= 20 ms, p99 <= 100 ms"}


def bench_gate(url, big):
    out = {}
    for n in (10, big):
        store = RedisMetadataStore(url, namespace=f"b{uuid.uuid4().hex[:8]}")
        seg = "persistent://public/default/gate"
        coord = TransactionCoordinator(store)
        ids = [store.next_txn_id() for _ in range(n)]
        # the store's public calls (a benchmark must not reach into private scripts:
        # their keys change with the protocol, and this step once crashed on that)
        for j, t in enumerate(ids):
            store.create_txn(t, 3_600_000)
            store.register_write(t, seg, "w")
            store.record_write(t, seg, "w", Position(5, 100 + j), None)
        buf = TransactionBuffer(store)
        recv = Position(9, 0)
        buf.gate(seg, recv)
        out[n] = statistics.median(timed(lambda b=buf, g=seg, r=recv: b.gate(g, r), 300))
        assert buf.gate(seg, recv) == Position(5, 99)
        for t in ids[:1]:
            coord.abort(t)
        store.r.flushdb() if n == big else None
        store.close()
    return {"gate_10_open_ms": out[10] * 1e3, f"gate_{big}_open_ms": out[big] * 1e3,
            "ratio": out[big] / out[10], "target": "<= 3"}


def bench_reader(services, n, aborted_every=0):
    """READ_COMMITTED reader ÷ a plain pulsar-client reader over the same topic.
    ``aborted_every``: every k-th transaction of 1,000 aborts (k=10: 10 % aborted); the
    plain reader reads every message the topic holds, the READ_COMMITTED one the
    committed ones, skipping the rest."""
    client = PulsarTxnClient(services.service_url, services.metastore_url,
                             namespace=f"b{uuid.uuid4().hex[:8]}")
    topic = f"persistent://public/default/rd-{uuid.uuid4().hex[:8]}"
    p = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                               block_if_queue_full=True)
    payload = b"x" * 100
    per_txn = 1000
    committed = 0
    for k, _ in enumerate(range(0, n, per_txn), 1):
        txn = client.new_transaction()
        for _ in range(per_txn):
            p.send_async(payload, txn=txn)
        if aborted_every and k % aborted_every == 0:
            txn.flush()  # written, then aborted: readers skip its entries
            txn.abort()
        else:
            txn.commit()
            committed += per_txn

    def txn_read():
        r = client.create_reader(topic)
        got = 0
        while got < committed:
            r.read_next(5000).data()
            got += 1
        r.close()

    t_plain = min(plain_read(services.service_url, topic, n) for _ in range(2))
    t_txn = min(timed(txn_read, 2))
    client.close()
    return {"messages": n, "aborted_share": round(1 - committed / n, 3),
            "plain_msgs_per_s": n / t_plain, "read_committed_msgs_per_s": committed / t_txn,
            "ratio": t_plain / t_txn, "target": ">= 0.9"}


def bench_produce(services, n, per_txn=1000):
    """The client API's transactional ``send_async`` (no callback: per broker entry,
    issue 31) and with a callback (one per message, the path before) ÷ a plain
    pulsar-client producer's ``send_async`` on the same broker, 100-byte keyed messages."""

    client = PulsarTxnClient(services.service_url, services.metastore_url,
                             namespace=f"b{uuid.uuid4().hex[:8]}")
    payload, keys = b"x" * 100, [str(i) for i in range(n)]
    kw = {"batching_enabled": True, "batching_max_messages": 1000, "block_if_queue_full": True,
          "max_pending_messages": 10_000}

    def noop(_res, _mid):
        pass

    def plain() -> float:
        native = client.pulsar.create_producer(
            f"persistent://public/default/pp-{uuid.uuid4().hex[:8]}", **kw)
        t0 = time.perf_counter()
        for i in range(n):
            native.send_async(payload, noop, partition_key=keys[i])
        native.flush()
        dt = time.perf_counter() - t0
        native.close()
        return dt

    def txn(callback) -> float:
        p = client.create_producer(f"persistent://public/default/tp-{uuid.uuid4().hex[:8]}",
                                   **kw)
        t0 = time.perf_counter()
        for start in range(0, n, per_txn):
            t = client.new_transaction(timeout_ms=300_000)
            for i in range(start, min(n, start + per_txn)):
                p.send_async(payload, callback, key=keys[i], txn=t)
            t.commit()
        dt = time.perf_counter() - t0
        p.close()
        return dt

    plain(), txn(None)  # warm-up
    t_plain = min(plain() for _ in range(2))
    t_entry = min(txn(None) for _ in range(2))
    t_message = min(txn(noop) for _ in range(2))
    client.close()
    return {"messages": n, "messages_per_txn": per_txn,
            "plain_pulsar_client_msgs_per_s": round(n / t_plain),
            "txn_per_entry_msgs_per_s": round(n / t_entry),
            "txn_per_message_callback_msgs_per_s": round(n / t_message),
            "ratio_per_entry_over_plain": round(t_plain / t_entry, 3),
            "ratio_per_entry_over_per_message": round(t_message / t_entry, 3)}


def bench_cold_start(url, history):
    def cold(ns):
        t0 = time.perf_counter()
        store = RedisMetadataStore(url, namespace=ns)
        coord = TransactionCoordinator(store)
        buf = TransactionBuffer(store)
        watch = store.watch(buf.on_event)
        coord.sweep_timeouts()
        buf.gate("persistent://public/default/cold", Position(1, 1))
        dt = time.perf_counter() - t0
        watch.close()
        store.close()
        return dt

    empty_ns, full_ns = f"b{uuid.uuid4().hex[:8]}", f"b{uuid.uuid4().hex[:8]}"
    store = RedisMetadataStore(url, namespace=full_ns)
    fill = store.r.register_script(FILL_FINALIZED)
    now = str(store.server_time_ms())
    per_part = history // store.partitions
    for p in range(store.partitions):
        for base in range(1, per_part + 1, 20_000):
            fill(keys=[store.keys.finalized(p)],
                 args=[store.keys.tag(p), base, min(20_000, per_part - base + 1), now])
    store.close()
    RedisMetadataStore(url, namespace=empty_ns).close()
    cold(empty_ns)
    cold(full_ns)
    t_empty = statistics.median([cold(empty_ns) for _ in range(7)])
    t_full = statistics.median([cold(full_ns) for _ in range(7)])
    redis.Redis.from_url(url).flushdb()
    return {"history_txns": per_part * 16, "cold_start_empty_ms": t_empty * 1e3,
            "cold_start_with_history_ms": t_full * 1e3, "ratio": t_full / t_empty,
            "target": "<= 1.2"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", "--smoke", action="store_true", help="smaller sizes (CI smoke)")
    ap.add_argument("--json", help="also write results to this file")
    ap.add_argument("--only", help="comma list: fanout,visible,gate,reader,reader_aborted,"
                                      "produce,cold")
    args = ap.parse_args()
    q = args.quick
    only = set((args.only or "fanout,visible,gate,reader,reader_aborted,produce,cold").split(","))
    results = {"machine": machine()}
    with Services() as s:
        results["broker"] = s.kind
        plan = {  # name -> (result key, run(quick))
            "fanout": ("commit_fanout",
                       lambda quick: bench_commit_fanout(s.metastore_url, 50 if quick else 300)),
            "visible": ("commit_to_visible",
                        lambda quick: bench_visibility(s, 30 if quick else 200)),
            "gate": ("gate", lambda quick: bench_gate(s.metastore_url,
                                                      10_000 if quick else 100_000)),
            "reader": ("reader_throughput",
                       lambda quick: bench_reader(s, 20_000 if quick else 200_000)),
            "reader_aborted": ("reader_throughput_10pct_aborted",
                               lambda quick: bench_reader(s, 20_000 if quick else 200_000,
                                                          aborted_every=10)),
            "produce": ("txn_produce",
                        lambda quick: bench_produce(s, 5_000 if quick else 200_000)),
            "cold": ("cold_start", lambda quick: bench_cold_start(
                s.metastore_url, 100_000 if quick else 1_000_000)),
        }
        for name, (key, bench) in plan.items():
            if name in only:
                results[key] = bench(q)
                print(json.dumps(results[key]), flush=True)
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
