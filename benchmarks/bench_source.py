"""Source benchmarks: rows/s of the READ_COMMITTED Spark source ÷ a plain reader,
and commit → visible latency at the Spark level. Not a test.

    python benchmarks/bench_source.py [--messages 200000]     (PULSAR_TXN_BROKER)

Throughput: the same committed data (transactions of 1,000 messages) read by a
batch query into Spark's ``noop`` sink (default options: one partition per core),
versus a plain pulsar-client Reader in one Python thread reading payloads and ids.
Where the time goes, measured in the same run: the executors' read path alone
(``read_partition`` over the whole range in this process, one thread, no Spark), and
Spark's own floor for a Python source (a source that yields the same Arrow batches
from memory, same partitions, into ``noop``). Latency: a streaming query (default
trigger) with foreachBatch; time from ``commit()`` returning to the row arriving.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
import time
import uuid
from pathlib import Path

from common import local_spark, plain_read

from pulsar_txn.client import PulsarTxnClient
from pulsar_txn.harness import Services


def fill(client, topic: str, n: int) -> None:
    p = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                               block_if_queue_full=True)
    for _ in range(0, n, 1000):
        txn = client.new_transaction()
        for _ in range(1000):
            p.send_async(b"x" * 100, txn=txn)
        txn.commit()


def executor_path(opts: dict, topic: str) -> tuple[float, int, list]:
    """(seconds, rows, batches) of the executors' read path over the whole topic, in
    this process, one thread: what one Spark task does, without Spark."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pulsar_txn.spark.offsets import plan_partitions
    from pulsar_txn.spark.partition_reader import read_partition
    from pulsar_txn.spark.source_reader import PulsarTxnStreamReader

    src = PulsarTxnStreamReader({**opts, "topic": topic, "startingOffsets": "earliest"})
    try:
        start = src.initialOffset()
        end = src.latestOffset(start, ReadAllAvailable())
        part, = plan_partitions(start, end, 1)
        t0 = time.perf_counter()
        batches = list(read_partition(src.opts, part))
        return time.perf_counter() - t0, sum(b.num_rows for b in batches), batches
    finally:
        src.stop()


def spark_floor(spark, batches: list, partitions: int) -> float:
    """Seconds for Spark to take as many rows, in the source's own Arrow batches, from
    a Python source that holds them in memory (``partitions`` tasks) into ``noop``:
    Spark's own cost of a Python data source on this machine, which no connector code
    can go below."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from pulsar_txn.spark.partition_reader import SCHEMA

    table = pa.Table.from_batches(batches)
    rows = table.num_rows
    # one real batch of the source's, handed out again and again: a task's input
    # costs Spark the same per row, and the pickled reader stays small (the whole
    # table in it once ran the driver's JVM out of heap)
    template = table.slice(0, 4096).combine_chunks().to_batches()[0]
    per = -(-rows // partitions)

    class _Reader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):
            left = min(per, rows - partition.value * per)
            while left > 0:
                batch = template if left >= template.num_rows else template.slice(0, left)
                left -= batch.num_rows
                yield batch

    class _Memory(DataSource):
        @classmethod
        def name(cls):
            return "bench-arrow-memory"

        def schema(self):
            return SCHEMA

        def reader(self, schema):
            return _Reader()

    spark.dataSource.register(_Memory)

    def once() -> float:
        t0 = time.perf_counter()
        spark.read.format("bench-arrow-memory").load().write.format("noop").mode(
            "overwrite").save()
        return time.perf_counter() - t0

    once()
    return min(once() for _ in range(2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: CI checks it runs")
    args = ap.parse_args()
    if args.smoke:
        args.messages, args.samples = 4000, 2
    spark = local_spark()
    out = {"machine": f"{platform.machine()} {os.cpu_count()} cores, Python "
                      f"{platform.python_version()}"}
    with Services() as s:
        out["broker"] = s.kind
        ns = f"b{uuid.uuid4().hex[:8]}"
        client = PulsarTxnClient(s.service_url, s.metastore_url, namespace=ns)
        topic = f"persistent://public/default/bsrc-{uuid.uuid4().hex[:8]}"
        fill(client, topic, args.messages)

        def spark_read() -> float:
            t0 = time.perf_counter()
            (spark.read.format("pulsar-txn").option("service.url", s.service_url)
             .option("metastore.url", s.metastore_url).option("metastore.namespace", ns)
             .option("topic", topic).load().write.format("noop").mode("overwrite").save())
            return time.perf_counter() - t0

        spark_read()  # warm-up: JVM, Python workers
        t_spark = min(spark_read() for _ in range(2))
        t_plain = min(plain_read(s.service_url, topic, args.messages) for _ in range(2))
        opts = {"service.url": s.service_url, "metastore.url": s.metastore_url,
                "metastore.namespace": ns}
        t_exec, rows, batches = min((executor_path(opts, topic) for _ in range(2)),
                                    key=lambda r: r[0])
        cores = spark.sparkContext.defaultParallelism
        t_floor = spark_floor(spark, batches, cores)
        out["throughput"] = {"messages": args.messages,
                             "source_rows_per_s": args.messages / t_spark,
                             "plain_reader_msgs_per_s": args.messages / t_plain,
                             "ratio": t_plain / t_spark, "target": ">= 0.9",
                             "profile": {
                                 "executor_read_path_one_thread_rows_per_s": rows / t_exec,
                                 "executor_read_path_vs_plain_reader": t_plain / t_exec,
                                 "spark_python_source_floor_rows_per_s": rows / t_floor,
                                 "spark_floor_tasks": cores,
                                 "note": "executor path: read_partition alone, no Spark; "
                                         "floor: the same Arrow batches from memory "
                                         "through Spark into noop"}}
        print(json.dumps(out["throughput"]), flush=True)

        lat_topic = f"persistent://public/default/blat-{uuid.uuid4().hex[:8]}"
        arrivals: dict[bytes, float] = {}
        got = threading.Event()

        def on_batch(df, _batch_id):
            now = time.perf_counter()
            for r in df.select("value").collect():
                arrivals[bytes(r.value)] = now
            if arrivals:
                got.set()

        q = (spark.readStream.format("pulsar-txn").option("service.url", s.service_url)
             .option("metastore.url", s.metastore_url).option("metastore.namespace", ns)
             .option("topic", lat_topic).option("startingOffsets", "earliest").load()
             .writeStream.foreachBatch(on_batch).start())
        p = client.create_producer(lat_topic)
        lat = []
        for i in range(args.samples + 2):
            key = b"lat-%d" % i
            got.clear()
            txn = client.new_transaction()
            p.send(key, txn=txn)
            time.sleep(0.3)  # the query is idle at its gate
            t0 = time.perf_counter()
            txn.commit()
            deadline = time.monotonic() + 30
            while key not in arrivals and time.monotonic() < deadline:
                got.wait(0.05)
            if i >= 2 and key in arrivals:
                lat.append(arrivals[key] - t0)
        q.stop()
        lat.sort()
        out["commit_to_visible_spark"] = {
            "samples": len(lat), "p50_ms": statistics.median(lat) * 1e3,
            "p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3,
            "note": "default micro-batch trigger; includes Spark planning and scheduling"}
        print(json.dumps(out["commit_to_visible_spark"]), flush=True)
        client.close()
    spark.stop()
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
