"""Latency of an exactly-once consume-transform-produce pipeline, and its trend over time.

    python benchmarks/bench_pipeline.py [--seconds 120] [--rate 650] [--trigger-ms 0]
                                        [--minute 60] [--json out.json]   (PULSAR_TXN_BROKER)

A producer commits transactions of ``--per-txn`` events into the input at ``--rate``
events/s. A Spark query reads the input READ_COMMITTED, upper-cases each event and
writes it transactionally to the output (``--trigger-ms 0``: Spark's default
trigger, the next micro-batch as soon as the last one ends). A READ_COMMITTED reader
on the output records when each event becomes visible there.

Prints: event committed upstream → its output visible downstream, p50/p99 (the
baseline is the upstream commit → visible to a READ_COMMITTED reader of the *input*,
measured in the same run: the transaction layer's own floor); and from Spark's
progress, the per-micro-batch fixed cost (``latestOffset``, ``queryPlanning``,
``addBatch`` (the sink's write and commit), ``walCommit``/``commitOffsets``), per
``--minute`` window so growth over a long run shows (bench_soak.py). Not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from common import cpu_by_role, local_spark, machine

from pulsar_txn.client import PulsarTxnClient
from pulsar_txn.errors import ReadTimeout
from pulsar_txn.harness import Services

PARTS = ("triggerExecution", "latestOffset", "queryPlanning", "getBatch", "addBatch",
         "walCommit", "commitOffsets")


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


class Watch(threading.Thread):
    """A READ_COMMITTED reader noting when each event id becomes visible."""

    def __init__(self, client: PulsarTxnClient, topic: str) -> None:
        super().__init__(daemon=True)
        self.reader = client.create_reader(topic)
        self.seen: dict[int, float] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                batch = self.reader.read_batch(1000, 100)
            except ReadTimeout:
                continue
            now = time.monotonic()
            for m in batch:
                head, _, tail = m.value.partition(b"-")
                if head.lower() == b"event" and tail.isdigit():
                    self.seen.setdefault(int(tail), now)


def produce(client: PulsarTxnClient, topic: str, rate: float, per_txn: int, stop: float,
            committed: dict[int, float]) -> None:
    producer = client.create_producer(topic)
    seq, started = 0, time.monotonic()
    while time.monotonic() < stop:
        txn = client.new_transaction()
        ids = range(seq, seq + per_txn)
        for i in ids:
            producer.send(f"event-{i}".encode(), key=f"k{i % 16}", txn=txn)
        txn.commit()
        now = time.monotonic()
        for i in ids:
            committed[i] = now
        seq += per_txn
        ahead = started + seq / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


class Progress:
    """Every micro-batch's progress, as Spark reports it (a listener: constant work per
    batch; polling ``recentProgress`` fetches the whole history on each call, a cost
    that grows with the run and showed as a trend of its own)."""

    def __init__(self, spark) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        self.items: list[dict] = []

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event) -> None:
                pass

            def onQueryProgress(inner, event) -> None:  # noqa: N805
                p = event.progress
                self.items.append({"batchId": p.batchId, "durationMs": dict(p.durationMs),
                                   "numInputRows": p.numInputRows,
                                   "_at": time.monotonic()})

            def onQueryIdle(self, event) -> None:
                pass

            def onQueryTerminated(self, event) -> None:
                pass

        self.listener = _Listener()
        spark.streams.addListener(self.listener)


def windows(progress: list[dict], cpu: list[tuple[float, dict[str, float]]], t0: float,
            minute: float) -> list[dict]:
    """Per ``minute``: the micro-batches' mean durations, and each process role's CPU
    use in cores (cpu_by_role), so a trend can be laid at the right door."""
    out: dict[int, dict[str, list[float]]] = {}
    for p in progress:
        w = int((p["_at"] - t0) // minute)
        for part in PARTS:
            out.setdefault(w, {}).setdefault(part, []).append(p["durationMs"].get(part, 0))
        out[w].setdefault("rows", []).append(p["numInputRows"])
    ends: dict[int, tuple[float, dict[str, float]]] = {}
    for at, used in cpu:  # the last sample of each window
        ends[int((at - t0) // minute)] = (at, used)
    cores: dict[int, dict[str, float]] = {}
    prev = cpu[0] if cpu else None
    for w in sorted(ends):
        at, used = ends[w]
        if prev is not None and at > prev[0]:
            cores[w] = {r: round((used.get(r, 0) - prev[1].get(r, 0)) / (at - prev[0]), 2)
                        for r in sorted(used)}
        prev = ends[w]
    return [{"window": w, "batches": len(v["triggerExecution"]),
             "rows": int(sum(v["rows"])),
             **{f"{k}_ms": round(statistics.mean(v[k]), 1) for k in PARTS},
             "cpu_cores": cores.get(w, {})}
            for w, v in sorted(out.items())]


def run(seconds: float, rate: float, per_txn: int, trigger_ms: int, minute: float) -> dict:
    spark = local_spark()
    progress = Progress(spark)
    from pyspark.sql import functions as F

    with Services() as services:
        ns = f"p{uuid.uuid4().hex[:8]}"
        client = PulsarTxnClient(services.service_url, services.metastore_url, namespace=ns)
        src_topic = f"persistent://public/default/pipe-in-{uuid.uuid4().hex[:8]}"
        out_topic = f"persistent://public/default/pipe-out-{uuid.uuid4().hex[:8]}"
        client.create_producer(src_topic).send(b"init")  # the topic exists
        common = {"service.url": services.service_url, "metastore.url": services.metastore_url,
                  "metastore.namespace": ns}
        source = (spark.readStream.format("pulsar-txn").options(**common)
                  .option("topic", src_topic).option("startingOffsets", "latest").load())
        writer = (source.select("key", F.upper(F.col("value").cast("string")).alias("value"))
                  .writeStream.format("pulsar-txn").options(**common)
                  .option("topic", out_topic)
                  .option("checkpointLocation", tempfile.mkdtemp(prefix="pipe-ckpt-")))
        if trigger_ms:
            writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
        query = writer.start()
        while query.lastProgress is None:  # started, its first (empty) batch planned
            time.sleep(0.2)
        downstream, upstream = Watch(client, out_topic), Watch(client, src_topic)
        downstream.start()
        upstream.start()
        committed: dict[int, float] = {}
        t0 = time.monotonic()
        stop = t0 + seconds
        cpu = [(t0, cpu_by_role())]
        prod = threading.Thread(target=produce, args=(client, src_topic, rate, per_txn, stop,
                                                      committed), daemon=True)
        prod.start()
        while prod.is_alive() or time.monotonic() < stop + 5:
            time.sleep(1.0)
            cpu.append((time.monotonic(), cpu_by_role()))
            if not prod.is_alive() and len(downstream.seen) >= len(committed):
                break
        query.stop()
        spark.streams.removeListener(progress.listener)
        for w in (downstream, upstream):
            w.halt.set()
            w.join(5)
        client.close()
        kind = services.kind
    spark.stop()
    late = [downstream.seen[i] - c for i, c in committed.items() if i in downstream.seen]
    floor = [upstream.seen[i] - c for i, c in committed.items() if i in upstream.seen]
    ms = [1000 * x for x in late]
    floor_ms = [1000 * x for x in floor]
    return {"broker": kind, "machine": machine(), "seconds": seconds, "rate": rate,
            "per_txn": per_txn, "trigger_ms": trigger_ms or "default",
            "events": len(committed), "delivered": len(late),
            "pipeline_p50_ms": pct(ms, 0.5), "pipeline_p99_ms": pct(ms, 0.99),
            "baseline_upstream_visible_p50_ms": pct(floor_ms, 0.5),
            "baseline_upstream_visible_p99_ms": pct(floor_ms, 0.99),
            "target_p50_ms": 200,
            # the query's first batch (before the events) is not timed
            "per_window": windows([p for p in progress.items if p["batchId"] > 0], cpu, t0,
                                  minute)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--rate", type=float, default=650, help="committed events/s upstream")
    ap.add_argument("--per-txn", type=int, default=10)
    ap.add_argument("--trigger-ms", type=int, default=0, help="0: Spark's default trigger")
    ap.add_argument("--minute", type=float, default=60, help="breakdown window, seconds")
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="a few seconds: CI checks it runs")
    args = ap.parse_args()
    if args.smoke:
        args.seconds, args.rate, args.minute = 6, 100, 3
    result = run(args.seconds, args.rate, args.per_txn, args.trigger_ms, args.minute)
    text = json.dumps(result, indent=2)
    print(text)
    for w in result["per_window"]:
        print(f"window {w['window']}: {w['batches']} batches, {w['rows']} rows; mean ms: " +
              ", ".join(f"{k} {w[f'{k}_ms']}" for k in PARTS) + "; CPU cores: " +
              ", ".join(f"{r} {c}" for r, c in w["cpu_cores"].items()))
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
