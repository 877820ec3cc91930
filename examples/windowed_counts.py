"""A stateful pipeline, exactly once: per-user click counts in event-time windows.

pulsar-txn in → ``groupBy(window(eventTime, "10 seconds"), key).count()`` with a
watermark → pulsar-txn out, in append mode: each window's count is written once,
when the watermark passes the window's end, in the transaction of the micro-batch
that closed it, so a READ_COMMITTED reader downstream sees each count once.
Spark keeps the aggregation state in its checkpoint; the sink makes each
micro-batch's output one transaction keyed by (sink id, batchId); so a restart
replays neither counts nor rows. Aborted input never counts. Runs on the
embedded services it starts and a local Spark session.

    python examples/windowed_counts.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import Counter

from pulsar_txn.client import PulsarTxnClient, read_all
from pulsar_txn.harness import Services

T0 = 1_800_000_000_000  # event time of the first click (ms), on a 10 s window boundary


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    # the client closes before the services stop, also on an error
    with (Services() as services,
          PulsarTxnClient(services.service_url, services.metastore_url) as client):
        producer = client.create_producer("clicks")
        expected: Counter = Counter()
        for second in range(60):  # six 10 s windows, 3 users, one txn per second
            with client.transaction() as txn:
                for user in range(3):
                    for _ in range(user + 1):
                        producer.send(b"click", key=f"u{user}", txn=txn,
                                      event_time_ms=T0 + second * 1000)
                        expected[(f"u{user}", second // 10)] += 1
        cancelled = client.new_transaction()
        producer.send(b"click", key="u0", txn=cancelled, event_time_ms=T0)
        cancelled.abort()  # never counted
        # a late tick far ahead moves the watermark past every window above
        producer.send(b"tick", key="clock", event_time_ms=T0 + 3_600_000)

        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        common = {"service.url": services.service_url, "metastore.url": services.metastore_url}
        clicks = (spark.readStream.format("pulsar-txn").options(**common)
                  .option("topic", "clicks").option("startingOffsets", "earliest")
                  .option("maxRecordsPerTrigger", "100").load())
        # no filter on the tick: Spark would push it below the watermark, which then
        # never sees the tick (its own window stays open and is never emitted)
        counts = (clicks.withWatermark("eventTime", "10 seconds")
                  .groupBy(F.window("eventTime", "10 seconds"), "key").count()
                  .select("key", F.to_json(F.struct(
                      F.col("window.start").cast("long").alias("start"), "key",
                      "count")).alias("value")))
        query = (counts.writeStream.format("pulsar-txn").options(**common)
                 .option("topic", "click-counts").outputMode("append")
                 .option("checkpointLocation", tempfile.mkdtemp(prefix="windows-ckpt-"))
                 .trigger(processingTime="500 milliseconds").start())
        # A window is emitted by the micro-batch after the one whose data passed its end
        # (a no-data batch when nothing new arrives), so run until all windows are out.
        got: Counter = Counter()
        rows = 0
        reader = client.create_reader("click-counts")
        deadline = time.monotonic() + 180
        while rows < len(expected) and time.monotonic() < deadline:
            for m in read_all(reader, 1000):
                w = json.loads(m.value)
                got[(w["key"], (w["start"] * 1000 - T0) // 10_000)] += w["count"]
                rows += 1
        query.stop()
        spark.stop()
        rows += sum(1 for _ in read_all(reader, 1000))  # nothing more: each window once
        print(f"{rows} window counts written once each; match the committed clicks: "
              f"{got == expected}")
        assert got == expected and rows == len(expected), (got, expected)
    print("windowed counts OK")


if __name__ == "__main__":
    main()
