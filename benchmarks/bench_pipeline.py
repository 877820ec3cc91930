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
``--minute`` window so growth over a long run shows (bench_soak.py).

Then, in the same run, for ``--floor-seconds`` each (default half ``--seconds``; 0
skips them), the same query shape and trigger four more times, warm: with Spark alone
at both ends (a Python source whose events become available at the same rate in groups
of ``--per-txn``, read from nowhere, in Arrow batches, and a Python Arrow sink whose
driver-side commit notes when each event's batch committed), with only our source,
with only our sink, and with ours at both ends. Spark alone's p50 is what Spark's
micro-batch machinery costs an event on this machine with Python ends that do nothing;
the halves show which end takes the rest. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
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


def rnd(ms: float | None) -> float | None:
    return None if ms is None else round(ms, 1)


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
            now = time.time()  # wall clock: compared with other processes' times
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
        for i in ids:  # the commit flushes: a send a time held the reference broker's
            # feeder to ~360 events/s (each waited for its batch's publish delay)
            producer.send_async(f"event-{i}".encode(), key=f"k{i % 16}", txn=txn)
        txn.commit()
        now = time.time()
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


def register_alone(spark) -> None:
    """``bench-pipeline-alone``: the pipeline's two ends with Spark alone. As a source,
    events that become available ``per_txn`` at a time at ``rate`` events/s from
    ``t0`` (wall clock), read from nowhere; as a sink, a writer whose driver-side commit
    (after every task wrote) appends each event's id and the commit's wall-clock time
    to the file ``out``. Neither touches Pulsar or Redis: what it costs an event is
    Spark's micro-batch machinery for a Python source and sink (planning, scheduling,
    the Python workers, the checkpoint's offset and commit logs)."""
    from dataclasses import dataclass

    from pyspark.sql.datasource import (
        DataSource,
        DataSourceStreamArrowWriter,
        DataSourceStreamReader,
        InputPartition,
        WriterCommitMessage,
    )

    class _Reader(DataSourceStreamReader):
        def __init__(self, options) -> None:
            self.t0 = float(options["t0"])
            self.rate = float(options["rate"])
            self.per_txn = int(options["per_txn"])

        def _available(self) -> dict:
            n = int((time.time() - self.t0) * self.rate / self.per_txn) * self.per_txn
            return {"n": n}

        def initialOffset(self):
            return self._available()

        def latestOffset(self):
            return self._available()

        def partitions(self, start, end):
            return [InputPartition((start["n"], end["n"]))]

        def read(self, partition):  # whole columns, as our source hands them out
            import pyarrow as pa

            lo, hi = partition.value
            if hi > lo:
                yield pa.RecordBatch.from_pydict({
                    "key": pa.array([f"k{i % 16}" for i in range(lo, hi)], pa.string()),
                    "value": pa.array([f"event-{i}".encode() for i in range(lo, hi)],
                                      pa.binary())})

        def commit(self, end):
            pass

    @dataclass
    class _Written(WriterCommitMessage):
        ids: list

    class _Writer(DataSourceStreamArrowWriter):  # whole columns, as our sink takes them
        def __init__(self, out: str) -> None:
            self.out = out

        def write(self, iterator):
            return _Written([int(v.split("-")[1]) for b in iterator
                             for v in b.column("value").to_pylist()])

        def commit(self, messages, batchId):
            now = time.time()
            with open(self.out, "a") as f:
                f.write(json.dumps([[i, now] for m in messages if m for i in m.ids]) + "\n")

        def abort(self, messages, batchId):
            pass

    class _Alone(DataSource):
        @classmethod
        def name(cls):
            return "bench-pipeline-alone"

        def schema(self):
            return "key string, value binary"

        def streamReader(self, schema):
            return _Reader(self.options)

        def streamWriter(self, schema, overwrite):
            return _Writer(self.options["out"])

    spark.dataSource.register(_Alone)


def ready_at(i: int, t0: float, rate: float, per_txn: int) -> float:
    """When the Spark-alone source's event ``i`` became available (its group's "commit")."""
    return t0 + (i // per_txn + 1) * per_txn / rate


def compare(spark, client: PulsarTxnClient, common: dict, seconds: float,
            rate: float, per_txn: int, trigger_ms: int, source: str, sink: str) -> dict:
    """The same query with each end either ours (``pulsar-txn``) or Spark alone's
    (``alone``): event available upstream → its batch committed downstream, p50/p99,
    and Spark's mean per-micro-batch durations. Swapping one end at a time shows which
    end the pipeline's time above Spark's own goes to. The feeder (committing events into
    an input topic) and the output's watcher run in every case, read or not: they share
    the 2 cores with Spark, and are the pipeline's surroundings, not its ends."""
    from pyspark.sql import functions as F

    t0 = time.time()
    fed: dict[int, float] = {}
    topic = f"persistent://public/default/cmp-in-{uuid.uuid4().hex[:8]}"
    out_topic = f"persistent://public/default/cmp-out-{uuid.uuid4().hex[:8]}"
    for t in (topic, out_topic):
        client.create_producer(t).send(b"init")  # the topics exist
    watch = Watch(client, out_topic)
    watch.start()
    if source == "pulsar-txn":
        df = (spark.readStream.format("pulsar-txn").options(**common).option("topic", topic)
              .option("startingOffsets", "latest").load())
    else:
        df = (spark.readStream.format("bench-pipeline-alone").option("t0", str(t0))
              .option("rate", str(rate)).option("per_txn", str(per_txn)).load())
    fd, name = tempfile.mkstemp(prefix="alone-", suffix=".jsonl")
    os.close(fd)
    out_file = Path(name)
    w = (df.select("key", F.upper(F.col("value").cast("string")).alias("value"))
         .writeStream.option("checkpointLocation", tempfile.mkdtemp(prefix="cmp-ckpt-")))
    if sink == "pulsar-txn":
        w = w.format("pulsar-txn").options(**common).option("topic", out_topic)
    else:
        w = w.format("bench-pipeline-alone").option("out", str(out_file))
    if trigger_ms:
        w = w.trigger(processingTime=f"{trigger_ms} milliseconds")
    progress = Progress(spark)
    query = w.start()
    while query.lastProgress is None:  # as the pipeline: the query's start is not timed
        time.sleep(0.2)
    started, started_mono, cpu0 = time.time(), time.monotonic(), cpu_by_role()
    threading.Thread(target=produce, args=(
        client, topic, rate, per_txn, time.monotonic() + seconds, fed), daemon=True).start()
    deadline = time.monotonic() + seconds + 5
    while time.monotonic() < deadline:
        time.sleep(0.5)
    cpu1, spent = cpu_by_role(), time.time() - started
    query.stop()
    spark.streams.removeListener(progress.listener)
    watch.halt.set()
    watch.join(5)
    if sink == "pulsar-txn":
        seen = dict(watch.seen)
    else:
        seen = {}
        for line in out_file.read_text().splitlines():
            for i, at in json.loads(line):
                seen.setdefault(i, at)  # a replayed batch: the first commit counts
    out_file.unlink()
    ready = fed
    if source != "pulsar-txn":  # every event that became available in the window
        first = int((started - t0) * rate / per_txn) * per_txn
        ready = {i: ready_at(i, t0, rate, per_txn)
                 for i in range(first, int((started + seconds - t0) * rate) + per_txn)}

    def in_window(r: float) -> bool:
        return started <= r <= started + seconds

    lat = [1000 * (seen[i] - r) for i, r in ready.items() if i in seen and in_window(r)]
    missing = sum(1 for i, r in ready.items() if i not in seen and in_window(r))
    # the micro-batches that ran in the window (the alone source goes on after it)
    batches = [p for p in progress.items
               if p["batchId"] > 0 and started_mono <= p["_at"] <= started_mono + seconds]
    return {"source": source, "sink": sink, "seconds": seconds, "events": len(lat),
            "missing": missing,
            "p50_ms": rnd(pct(lat, 0.5)), "p99_ms": rnd(pct(lat, 0.99)),
            "batches": len(batches),
            "mean_ms": {k: round(statistics.mean(p["durationMs"].get(k, 0) for p in batches),
                                 1) for k in PARTS} if batches else {},
            "cpu_cores": {r: round((cpu1.get(r, 0) - cpu0.get(r, 0)) / spent, 2)
                          for r in sorted(cpu1)}}


def run(seconds: float, rate: float, per_txn: int, trigger_ms: int, minute: float,
        floor_seconds: float) -> dict:
    spark = local_spark()
    if floor_seconds:
        register_alone(spark)
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
        # the same query with both ends Spark alone's, then one, then neither, each
        # measured the same way on a warm JVM (the run above includes the query's and
        # the workers' warm-up, and a second watcher, on the input)
        ends = ([("alone", "alone"), ("pulsar-txn", "alone"), ("alone", "pulsar-txn"),
                 ("pulsar-txn", "pulsar-txn")] if floor_seconds else [])
        compared = [compare(spark, client, common, floor_seconds, rate, per_txn,
                            trigger_ms, a, b) for a, b in ends]
        client.close()
        kind = services.kind
    spark.stop()
    late = [downstream.seen[i] - c for i, c in committed.items() if i in downstream.seen]
    seen_upstream = [upstream.seen[i] - c for i, c in committed.items() if i in upstream.seen]
    ms = [1000 * x for x in late]
    floor_ms = [1000 * x for x in seen_upstream]
    p50 = pct(ms, 0.5)
    alone = compared[0] if compared else None
    return {"broker": kind, "machine": machine(), "seconds": seconds, "rate": rate,
            "per_txn": per_txn, "trigger_ms": trigger_ms or "default",
            "events": len(committed), "delivered": len(late),
            "pipeline_p50_ms": rnd(p50), "pipeline_p99_ms": rnd(pct(ms, 0.99)),
            "baseline_upstream_visible_p50_ms": rnd(pct(floor_ms, 0.5)),
            "baseline_upstream_visible_p99_ms": rnd(pct(floor_ms, 0.99)),
            "target_p50_ms": 200,
            "compared": compared,
            "pipeline_p50_over_spark_alone_p50": (
                round(p50 / alone["p50_ms"], 2) if alone and alone["p50_ms"] and p50 else None),
            "warm_pipeline_p50_over_spark_alone_p50": (
                round(compared[-1]["p50_ms"] / alone["p50_ms"], 2)
                if alone and alone["p50_ms"] and compared[-1]["p50_ms"] else None),
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
    ap.add_argument("--floor-seconds", type=float, default=None,
                    help="each comparison run with an end Spark alone's (default: half "
                         "--seconds; 0: skip)")
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="a few seconds: CI checks it runs")
    args = ap.parse_args()
    if args.smoke:
        args.seconds, args.rate, args.minute = 6, 100, 3
    floor_seconds = args.seconds / 2 if args.floor_seconds is None else args.floor_seconds
    result = run(args.seconds, args.rate, args.per_txn, args.trigger_ms, args.minute,
                 floor_seconds)
    text = json.dumps(result, indent=2)
    print(text)
    for w in result["per_window"]:
        print(f"window {w['window']}: {w['batches']} batches, {w['rows']} rows; mean ms: " +
              ", ".join(f"{k} {w[f'{k}_ms']}" for k in PARTS) + "; CPU cores: " +
              ", ".join(f"{r} {c}" for r, c in w["cpu_cores"].items()))
    print(f"pipeline (pulsar-txn → pulsar-txn): p50 {result['pipeline_p50_ms']} ms, p99 "
          f"{result['pipeline_p99_ms']} ms, target p50 {result['target_p50_ms']} ms")
    for c in result["compared"]:
        print(f"{c['source']} → {c['sink']}: p50 {c['p50_ms']} ms, p99 {c['p99_ms']} ms "
              f"({c['events']} events, {c['missing']} missing, {c['batches']} batches; "
              "mean ms: " +
              ", ".join(f"{k} {v}" for k, v in c["mean_ms"].items()) + "; CPU cores: " +
              ", ".join(f"{r} {v}" for r, v in c["cpu_cores"].items()) + ")")
    if result["compared"]:
        print(f"p50 ÷ Spark alone's: the pipeline (warm-up included) "
              f"{result['pipeline_p50_over_spark_alone_p50']}, the same pipeline warm "
              f"{result['warm_pipeline_p50_over_spark_alone_p50']}")
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
