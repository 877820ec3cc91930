"""Flat over time: the pipeline at a 200 ms trigger with ~650 committed events/s, for
ten minutes on each broker, with the per-minute micro-batch breakdown.

    python benchmarks/bench_soak.py [--minutes 10] [--brokers lite,standalone]

Runs bench_pipeline.py once per broker (a process each: its own services and Spark
session) and prints, per broker, every minute's mean ``triggerExecution``,
``latestOffset`` and ``addBatch`` and the last full minute ÷ the second (the baseline, in
the same run; the first minute is the query's warm-up): about 1.0 when nothing
grows. Each minute also shows the CPU (in cores) of each process role, the broker,
Redis, Spark's JVM and Python workers, the benchmark's own process and everything else
on the machine: when a trend appears, that is where to look. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--brokers", default="lite,standalone")
    ap.add_argument("--rate", type=float, default=650)
    ap.add_argument("--trigger-ms", type=int, default=200)
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="seconds, lite only")
    args = ap.parse_args()
    minute = 60.0
    if args.smoke:
        args.minutes, args.brokers, args.rate, minute = 0.15, "lite", 100, 3.0
    results = {}
    for broker in args.brokers.split(","):
        out = Path(tempfile.mkstemp(suffix=".json")[1])
        env = {**os.environ, "PULSAR_TXN_BROKER": broker}
        proc = subprocess.run([sys.executable, str(HERE / "bench_pipeline.py"),
                               "--seconds", str(args.minutes * 60), "--rate", str(args.rate),
                               "--trigger-ms", str(args.trigger_ms), "--minute", str(minute),
                               "--floor-seconds", "0",
                               "--json", str(out)], env=env, cwd=HERE)
        if proc.returncode != 0:
            return proc.returncode
        r = json.loads(out.read_text())
        results[broker] = r
        wins = r["per_window"]
        print(f"\n{broker}: {r['events']} events, pipeline p50 {r['pipeline_p50_ms']} ms, "
              f"p99 {r['pipeline_p99_ms']} ms")
        roles = sorted({r for w in wins for r in w.get("cpu_cores", {})})
        print("minute  batches   rows  triggerExecution  latestOffset  addBatch  walCommit  "
              "commitOffsets  | CPU cores: " + "  ".join(roles))
        for w in wins:
            cores = w.get("cpu_cores", {})
            print(f"{w['window']:>6}  {w['batches']:>7}  {w['rows']:>5}  "
                  f"{w['triggerExecution_ms']:>16}  {w['latestOffset_ms']:>12}  "
                  f"{w['addBatch_ms']:>8}  {w['walCommit_ms']:>9}  {w['commitOffsets_ms']:>13}"
                  "  |            " + "  ".join(f"{cores.get(r, 0):>{len(r)}}" for r in roles))
        # the first window holds the query's warm-up, the last a partial minute: the
        # trend is the last full minute against the second
        full = [w for w in wins if w["batches"] > 1][1:]
        if len(full) >= 2 and full[-1]["window"] == wins[-1]["window"]:
            full = full[:-1]
        if len(full) >= 2:
            first, last = full[0], full[-1]
            r["trend"] = {}
            for k in ("triggerExecution", "latestOffset", "addBatch"):
                base = first[f"{k}_ms"] or 1
                r["trend"][k] = round(last[f"{k}_ms"] / base, 2)
                print(f"{k}: minute {last['window']} ÷ minute {first['window']} = "
                      f"{r['trend'][k]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
