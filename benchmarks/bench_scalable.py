"""Scalable topics: commit latency of a txn touching a sealed segment ÷ only active ones.

    python benchmarks/bench_scalable.py [--quick] [--json FILE]   (PULSAR_TXN_BROKER)

Each repetition makes a fresh two-segment topic and a transaction that writes one
message to each segment. In the *sealed* case segment 0 is split (sealed, and
terminated where the broker can) before the commit; in the *active* case it is
not. The cases alternate, so drift hits both alike, and both wait 100 ms before
the commit. Timed: the decision CAS alone, and ``Transaction.commit()`` (which
first flushes this client's producers) in other repetitions.
Commit is one CAS that touches no segment, so the ratio is expected to be ≈ 1
(Pulsar v4 stalls ~30 s committing to a sealed segment: its markers cannot be
appended there). Also reports the split itself (seal CAS + fence + end fixed).
Not a test: it prints numbers, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

from common import machine

from pulsar_txn.client import PulsarTxnClient
from pulsar_txn.harness import Services


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run(services: Services, reps: int) -> dict:
    admin = getattr(services.broker, "admin_url", "") or None
    client = PulsarTxnClient(services.service_url, services.metastore_url,
                             namespace=f"b{uuid.uuid4().hex[:8]}", admin_url=admin,
                             seal_grace_ms=50)
    commit = {"active": [], "sealed": []}   # the decision: one CAS
    client_commit = {"active": [], "sealed": []}  # flush of this client's runs + the CAS
    split_s = []
    try:
        for i in range(4 * reps + 4):
            case = "sealed" if i % 2 else "active"
            name = f"topic://public/default/bench-{uuid.uuid4().hex[:10]}"
            client.scalable.create(name, segments=2)
            producer = client.create_producer(name)
            lay = client.scalable.layout(name)
            keys = _keys_for(lay)
            txn = client.new_transaction(timeout_ms=60_000)
            for key in keys:
                producer.send(b"x", key=key, txn=txn)
            if case == "sealed":
                t0 = time.perf_counter()
                client.scalable.split(name, 0)
                split_s.append(time.perf_counter() - t0)
            time.sleep(0.1)  # both cases: let the split's watchers settle first
            if i % 4 < 2:  # the CAS alone (runs flushed untimed first)
                txn.flush()
                winners = txn.writers
                t0 = time.perf_counter()
                client.coordinator.commit(txn.id, winners, txn.segments)
                bucket = commit
            else:  # what a caller waits for: Transaction.commit()
                t0 = time.perf_counter()
                txn.commit()
                bucket = client_commit
            dt = time.perf_counter() - t0
            if i >= 4:  # the first rounds warm connections and scripts
                bucket[case].append(dt)
            producer.close()
    finally:
        client.close()
    act, sea = statistics.median(commit["active"]), statistics.median(commit["sealed"])
    cact = statistics.median(client_commit["active"])
    csea = statistics.median(client_commit["sealed"])
    return {
        "reps_per_case": len(commit["active"]),
        "fence": "terminate" if admin else "grace period (no admin API)",
        "cas_active_p50_ms": round(act * 1000, 3),
        "cas_sealed_p50_ms": round(sea * 1000, 3),
        "cas_active_p99_ms": round(pct(commit["active"], 0.99) * 1000, 3),
        "cas_sealed_p99_ms": round(pct(commit["sealed"], 0.99) * 1000, 3),
        "ratio_cas_sealed_over_active": round(sea / act, 3),
        "client_commit_active_p50_ms": round(cact * 1000, 3),
        "client_commit_sealed_p50_ms": round(csea * 1000, 3),
        "ratio_client_commit_sealed_over_active": round(csea / cact, 3),
        "split_p50_ms": round(statistics.median(split_s) * 1000, 1),
    }


def _keys_for(lay) -> list[str]:
    """One key per segment, found by hashing candidates (routing is by key hash)."""
    from pulsar_txn.scalable.dag import key_hash

    want = {s.id: None for s in lay.active()}
    n = 0
    while any(v is None for v in want.values()):
        k = f"k{n}"
        sid = lay.route(key_hash(k, lay.hash_fn)).id
        if want[sid] is None:
            want[sid] = k
        n += 1
    return list(want.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", "--smoke", action="store_true", help="fewer repetitions (smoke)")
    ap.add_argument("--json", help="also write results to this file")
    args = ap.parse_args()
    results = {"machine": machine()}
    with Services() as s:
        results["broker"] = s.kind
        results["sealed_commit"] = run(s, 10 if args.quick else 60)
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
