"""Sink throughput: the same streaming job into pulsar-txn with transactions on and off.

    python benchmarks/bench_sink.py [--rows 1000000] [--files 4]   (PULSAR_TXN_BROKER)

Input: JSON files read with maxFilesPerTrigger=1 and a 1 s processing-time trigger
(``--files 4``: 250,000 rows a trigger, more than the sink writes in a second, so the
wall-clock rate is the sink's own; ``--files 10``: 100,000 a trigger, which the sink now
keeps up with, so both sinks show the trigger's pace). Sink runs alternate
transactional and not, three each; the best and the medians are printed, wall-clock
and inside ``addBatch``. Baselines measured in the same run: a plain pulsar-client
producer in one thread (``send_async`` without a callback, batches of up to 1,000
messages with the sink's earlier 5 ms time trigger, the same keys and 100-byte values:
the delivery limit), and the same sink with
``transactional=false`` (plain appends, same producer settings) in the same Spark
session. Where the time goes (``profile``): the same producer with a no-op Python
callback per message (what learning each append's outcome per message costs through
pulsar-client 3.x; the sink learns it per entry, pulsar_txn.entry_acks), the same with
the transaction's one property and with the older three on each message, the native
message build per property form, and the same query into Spark's ``noop`` sink.
Prints rows/s of each, the ratios, and metastore writes per batch. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import redis
from common import local_spark

from pulsar_txn.harness import Services


def metastore_writes(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return sum(v["calls"] for k, v in stats.items()
               if k in ("cmdstat_evalsha", "cmdstat_incrby", "cmdstat_hset", "cmdstat_del"))


def _query(spark, inputs: Path, fmt: str, options: dict):
    """The benchmark's streaming job: JSON files, one per 1 s trigger, into ``fmt``."""
    from pyspark.sql import functions as F

    src = (spark.readStream.schema("id long, payload string").option("maxFilesPerTrigger", 1)
           .json(str(inputs)))
    return (src.select(F.col("id").cast("string").alias("key"), F.col("payload").alias("value"))
            .writeStream.format(fmt).options(**options)
            .option("checkpointLocation", tempfile.mkdtemp(prefix="ckpt-"))
            .trigger(processingTime="1 second").start())


def _drive(q, rows: int) -> dict:
    """Wait until the query took ``rows`` rows; its rates, wall-clock and addBatch only."""
    t0 = time.perf_counter()
    done = 0
    while done < rows:
        time.sleep(0.2)
        done = sum(p["numInputRows"] for p in q.recentProgress)
        if q.exception():
            raise q.exception()
    wall = time.perf_counter() - t0
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    q.stop()
    add_batch_ms = sum(p["durationMs"].get("addBatch", 0) for p in progress)
    return {"rows": done, "batches": len(progress), "wall_s": wall,
            "rows_per_s_wall": done / wall, "rows_per_s_addBatch": done / (add_batch_ms / 1000)}


def run(spark, services, inputs: Path, rows: int, transactional: bool, ns: str) -> dict:
    topic = f"persistent://public/default/bench-sink-{uuid.uuid4().hex[:8]}"
    r = redis.Redis.from_url(services.metastore_url)
    before = metastore_writes(r)
    q = _query(spark, inputs, "pulsar-txn", {
        "service.url": services.service_url, "metastore.url": services.metastore_url,
        "metastore.namespace": ns, "topic": topic, "transactional": str(transactional).lower()})
    out = _drive(q, rows)
    writes = metastore_writes(r) - before
    return {"transactional": transactional, **out,
            "metastore_writes_per_batch": writes / max(1, out["batches"])}


def spark_floor(spark, inputs: Path, rows: int) -> dict:
    """The same streaming query into Spark's ``noop`` sink: what reading the input and
    running the micro-batches costs Spark itself, with no connector in the way."""
    return _drive(_query(spark, inputs, "noop", {}), rows)


# the three properties a transactional append carried in earlier builds, at their
# usual sizes
TXN_TAGS = {"__ptxn.txn": "v5:13:1776", "__ptxn.writer": "t0.a0.0123456789",
            "__ptxn.dep": "0123456789ab"}
# the one property it carries now (records.txn_properties): the same three values
ONE_TAG = {"__ptxn.txn": "v5:13:1776;t0.a0.0123456789;0123456789ab"}


def plain_producer(services, rows: int, callback: bool = False,
                   tags: dict | None = None) -> dict:
    """The delivery limit: one thread, one pulsar-client producer, send_async with no
    callback, the sink's batching, the same keys and values. ``callback``: with a
    no-op Python callback per message, which any sink that must know each append's
    outcome pays (the callback crosses from the client's I/O thread into Python).
    ``tags``: properties on each message (ONE_TAG: the transaction's, the per-message
    part of what a transactional append costs over a plain one; TXN_TAGS: the older
    three-property form)."""
    import pulsar

    from pulsar_txn.client import quiet_logger

    client = pulsar.Client(services.service_url, logger=quiet_logger())
    topic = f"persistent://public/default/bench-plain-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(topic, batching_enabled=True,
                                      batching_max_messages=1000,
                                      batching_max_publish_delay_ms=5,
                                      block_if_queue_full=True, max_pending_messages=10_000)
    keys = [str(i) for i in range(rows)]
    values = [_payload(i).encode() for i in range(rows)]
    t0 = time.perf_counter()
    send = producer.send_async
    done = (lambda res, msg_id: None) if callback else None
    props = tags
    for k, v in zip(keys, values):
        send(v, done, partition_key=k, properties=props)
    producer.flush()
    wall = time.perf_counter() - t0
    client.close()
    return {"rows": rows, "wall_s": wall, "msgs_per_s": rows / wall}


def build_cost(n: int) -> dict:
    """Microseconds to build one message natively, as the sink does (``send_many``),
    with no property, the one-property form as a map and set by name (``one_by_name``,
    what the sink does since 2026-11-25) and the three-property form: the part of a
    transactional append's extra cost that is this process's CPU, free of the broker
    and of the run-to-run noise of the sink runs (best of three)."""
    import _pulsar

    value = _payload(0).encode()
    forms = {"none": None, "one": ONE_TAG, "one_by_name": next(iter(ONE_TAG.items())),
             "three": TXN_TAGS}
    best: dict[str, float] = {}
    for _ in range(3):
        for name, props in forms.items():
            builder = _pulsar.MessageBuilder
            t0 = time.perf_counter()
            for _ in range(n):
                mb = builder()
                mb.content(value)
                if isinstance(props, tuple):
                    mb.property(*props)
                elif props is not None:
                    mb.properties(props)
                mb.build()
            us = (time.perf_counter() - t0) / n * 1e6
            best[name] = min(best.get(name, us), us)
    return {f"{k}_us": round(v, 3) for k, v in best.items()}


def _payload(i: int) -> str:
    """100 characters, as in the issue's reference measurement."""
    return f"payload-{i:012d}-".ljust(100, "x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: CI checks it runs")
    args = ap.parse_args()
    if args.smoke:
        args.rows, args.files = 4000, 2
    inputs = Path(tempfile.mkdtemp(prefix="sink-in-"))
    per = args.rows // args.files
    for f in range(args.files):
        with open(inputs / f"part-{f:03d}.json", "w") as out:
            for i in range(f * per, (f + 1) * per):
                out.write(f'{{"id": {i}, "payload": "{_payload(i)}"}}\n')
    spark = local_spark()
    results = {"machine": f"{platform.machine()} {os.cpu_count()} cores, Python "
                          f"{platform.python_version()}"}
    with Services() as services:
        results["broker"] = services.kind
        ns = f"b{uuid.uuid4().hex[:8]}"
        run(spark, services, inputs, per, True, ns)  # warm-up (JIT, workers, scripts)
        # the producer variants in rounds, best of three each: a drift of the machine
        # or the broker over the run then weighs on all of them, not on the last one
        variants = {"plain": {}, "callback": {"callback": True},
                    "three": {"callback": True, "tags": TXN_TAGS},
                    "one": {"callback": True, "tags": ONE_TAG}}
        best: dict[str, dict] = {}
        for _ in range(3):
            for name, kw in variants.items():
                # a rate: the callback variants (~35k msg/s) need no million messages
                r = plain_producer(services, args.rows if not kw else min(args.rows, 300_000),
                                   **kw)
                if name not in best or r["msgs_per_s"] > best[name]["msgs_per_s"]:
                    best[name] = r
        producer, with_callback = best["plain"], best["callback"]
        with_tags, one_tag = best["three"], best["one"]
        floor = spark_floor(spark, inputs, args.rows)
        # alternated, best of three each: one run's noise (GC, the broker's own work on
        # 2 shared cores) otherwise decides a ratio meant to be ~1
        runs = [run(spark, services, inputs, args.rows, t, ns)
                for t in (False, True) * (1 if args.smoke else 3)]
        plain = max((r for r in runs if not r["transactional"]),
                    key=lambda r: r["rows_per_s_wall"])
        txn = max((r for r in runs if r["transactional"]), key=lambda r: r["rows_per_s_wall"])
        results.update(profile={
            "plain_producer_with_per_message_callback": with_callback,
            "callback_producer_vs_plain_producer": with_callback["msgs_per_s"]
            / producer["msgs_per_s"],
            "txn_sink_vs_callback_producer_wall": txn["rows_per_s_wall"]
            / with_callback["msgs_per_s"],
            "callback_producer_with_txn_tags": with_tags,
            "txn_tags_vs_none_callback_producer": with_tags["msgs_per_s"]
            / with_callback["msgs_per_s"],
            "callback_producer_with_one_txn_property": one_tag,
            "one_tag_vs_none_callback_producer": one_tag["msgs_per_s"]
            / with_callback["msgs_per_s"],
            "spark_noop_sink_same_query": floor,
            "message_build": build_cost(min(args.rows, 200_000)),
            "note": "an exactly-once sink must learn each append's outcome: pulsar-client "
                    "3.x reports it only through a per-message Python callback, which the "
                    "sink takes on the last message of each entry only (entry_acks)"})
        results.update(plain_producer=producer, plain=plain, txn=txn,
                       sink_runs=[("txn" if r["transactional"] else "plain",
                                   round(r["rows_per_s_wall"]), round(r["rows_per_s_addBatch"]))
                                  for r in runs],
                       # the medians: a plain run that happened to be fast decides the
                       # best-of ratio on this noisy machine
                       ratio_wall_median=statistics.median(
                           r["rows_per_s_wall"] for r in runs if r["transactional"])
                       / statistics.median(r["rows_per_s_wall"] for r in runs
                                           if not r["transactional"]),
                       ratio_wall=txn["rows_per_s_wall"] / plain["rows_per_s_wall"],
                       ratio_addBatch=txn["rows_per_s_addBatch"] / plain["rows_per_s_addBatch"],
                       ratio_addBatch_median=statistics.median(
                           r["rows_per_s_addBatch"] for r in runs if r["transactional"])
                       / statistics.median(r["rows_per_s_addBatch"] for r in runs
                                           if not r["transactional"]),
                       target=">= 0.97",
                       sink_vs_plain_producer_wall=txn["rows_per_s_wall"]
                       / producer["msgs_per_s"],
                       sink_vs_plain_producer_addBatch=txn["rows_per_s_addBatch"]
                       / producer["msgs_per_s"],
                       target_vs_producer=">= 0.9")
    spark.stop()
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
