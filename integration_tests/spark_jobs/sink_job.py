"""A streaming job for the sink's crash tests: JSON files in, pulsar-txn out.

Run as its own process so a test can kill the whole driver (JVM included) and
restart it from the checkpoint, as an operator would.
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--service-url", required=True)
    ap.add_argument("--metastore-url", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--fault", default="")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--speculation", action="store_true")
    ap.add_argument("--timeout-ms", default="60000")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    b = (SparkSession.builder.master(args.master).appName("pulsar-txn-sink-job")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.memory", "1g"))
    if args.speculation:
        b = (b.config("spark.speculation", "true").config("spark.speculation.interval", "100ms")
             .config("spark.speculation.multiplier", "1.5")
             .config("spark.speculation.quantile", "0.5")
             .config("spark.speculation.minTaskRuntime", "200ms"))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if args.speculation and args.master.startswith("spark://"):
        # Spark never speculates on the host that runs the first attempt: start only
        # once both workers' executors are up, or both tasks may land on one host
        import time

        deadline = time.monotonic() + 90
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
        while status.size() < 3 and time.monotonic() < deadline:  # driver + 2 executors
            time.sleep(0.2)
            status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    src = (spark.readStream.schema("id long, payload string").option("maxFilesPerTrigger", 1)
           .json(args.input))
    out = src.repartition(args.partitions).select(
        F.col("id").cast("string").alias("key"), F.col("payload").alias("value"))
    q = (out.writeStream.format("pulsar-txn")
         .option("service.url", args.service_url).option("metastore.url", args.metastore_url)
         .option("metastore.namespace", args.namespace).option("topic", args.topic)
         .option("transaction.timeout.ms", args.timeout_ms).option("sink.fault", args.fault)
         .option("checkpointLocation", args.checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    for p in q.recentProgress:
        print("PROGRESS", p["batchId"], p["numInputRows"], flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
