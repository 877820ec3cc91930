"""The metastore on 1 vs 3 Redis Cluster shards: where a transaction's work lands,
and what one transaction costs a shard. Ratios come from one run on one machine.

    python benchmarks/bench_cluster.py [--txns 6000] [--threads 4] [--smoke] [--out F]

The workload is a transaction's metadata path, store calls only (no broker): id,
create, register + record one write on each of 2 segments, commit (the CAS),
cleanup (materialize). It runs against one Redis server and against a 3-primary
cluster started by the harness, from the same binary with the same persistence
(AOF, appendfsync always). Per shard it reads the server's own counters before
and after (INFO stats/cpu): commands processed and CPU seconds.

What it shows honestly on one 2-core machine:
* balance: each transaction's keys share one hash tag (its id partition), so its
  commands land on the shard owning that partition, and partitions spread over
  the shards: per-shard command counts (max ÷ mean) say how even that is;
* the per-transaction cost on a shard (server CPU µs, commands), the input of the
  capacity model in docs/benchmarks.md: one shard saturates at about
  1 / cpu_per_txn txn/s, and n shards at n × that × balance.
What it cannot show: real multi-machine throughput. Here the three shards and the
client share two cores, so the cluster's txn/s is bounded by this machine, not by
the shards; the printed txn/s are context, not the claim.
Not a test: it prints numbers, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from pathlib import Path

import redis
from common import machine

from pulsar_txn.harness.redis_cluster import RedisClusterHarness
from pulsar_txn.harness.redis_server import RedisServer
from pulsar_txn.metastore import RedisMetadataStore
from pulsar_txn.records import Position
from pulsar_txn.state import TxnState

PARTITIONS = 16  # the default deployment setting


def one_txn(store: RedisMetadataStore, i: int) -> None:
    t = store.next_txn_id()
    store.create_txn(t, 60_000)
    for seg in ("persistent://public/default/a", "persistent://public/default/b"):
        store.register_write(t, seg, "w")
        store.record_write(t, seg, "w", Position(1, i), Position(1, i))
    store.end_txn(t, TxnState.COMMITTED, ["w"])
    store.materialize_txn(t, ["persistent://public/default/a", "persistent://public/default/b"])


def shard_stats(ports: list[int]) -> dict[int, tuple[int, float]]:
    out = {}
    for port in ports:
        r = redis.Redis(port=port, decode_responses=True)
        stats, cpu = r.info("stats"), r.info("cpu")
        out[port] = (int(stats["total_commands_processed"]),
                     float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))
        r.close()
    return out


def run(url: str, ports: list[int], txns: int, threads: int) -> dict:
    store = RedisMetadataStore(url, namespace=f"bc{uuid.uuid4().hex[:8]}",
                               partitions=PARTITIONS)
    for i in range(50):  # scripts loaded, connections open: off the clock
        one_txn(store, i)
    before = shard_stats(ports)
    per = txns // threads
    t0 = time.perf_counter()

    def work(k: int) -> None:
        for i in range(per):
            one_txn(store, k * per + i)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    after = shard_stats(ports)
    store.close()
    done = per * threads
    shards = []
    for port in ports:
        cmds = after[port][0] - before[port][0] - 2  # the two INFO calls of the reading
        cpu = after[port][1] - before[port][1]
        shards.append({"port": port, "commands": cmds, "cpu_s": round(cpu, 4)})
    total_cmds = sum(s["commands"] for s in shards)
    total_cpu = sum(s["cpu_s"] for s in shards)
    mean = total_cmds / len(shards)
    return {
        "shards": len(ports), "txns": done, "wall_s": round(wall, 3),
        "txn_per_s": round(done / wall),
        "commands_per_txn": round(total_cmds / done, 2),
        "server_cpu_us_per_txn": round(total_cpu / done * 1e6, 1),
        "balance_max_over_mean": round(max(s["commands"] for s in shards) / mean, 3),
        "per_shard": shards,
    }


def model(one: dict, three: dict) -> dict:
    """Capacity if each shard had a core of its own: shards / cpu_per_txn × balance."""
    cpu = three["server_cpu_us_per_txn"] / 1e6
    bal = 1 / three["balance_max_over_mean"]
    return {"txn_per_s_by_shards": {n: round(n / cpu * bal) for n in (1, 3, 6, 12)},
            "basis": "server CPU per transaction on the 3-shard run; a shard saturates "
                     "one core; the busiest shard bounds the cluster (balance)",
            "one_shard_cpu_us_per_txn": one["server_cpu_us_per_txn"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--txns", type=int, default=6000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--smoke", action="store_true", help="a few hundred txns (CI smoke)")
    ap.add_argument("--out", help="write the JSON results here")
    args = ap.parse_args()
    txns = 300 if args.smoke else args.txns
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    single = RedisServer(work / "single").start()
    cluster = RedisClusterHarness(work / "cluster", primaries=3).start()
    try:
        one = run(single.url, [single.port], txns, args.threads)
        print(json.dumps({"one_server": one}), flush=True)
        three = run(cluster.url, [n.port for n in cluster.nodes], txns, args.threads)
        print(json.dumps({"three_shards": three}), flush=True)
    finally:
        cluster.stop()
        single.stop()
    results = {
        "machine": machine(), "partitions": PARTITIONS, "one_server": one,
        "three_shards": three,
        "ratios": {
            "cpu_per_txn_3_shards_over_1": round(three["server_cpu_us_per_txn"]
                                                 / one["server_cpu_us_per_txn"], 3),
            "commands_per_txn_3_over_1": round(three["commands_per_txn"]
                                               / one["commands_per_txn"], 3),
            "txn_per_s_3_over_1_this_machine": round(three["txn_per_s"] / one["txn_per_s"],
                                                     3),
        },
        "model": model(one, three),
    }
    print(json.dumps(results, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
