"""Consume-transform-produce: pulsar-txn in, transform, pulsar-txn out (exactly once).

Run as its own process so the chaos test can SIGKILL the whole driver at any
point and restart it from the checkpoint.
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--service-url", required=True)
    ap.add_argument("--metastore-url", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--fault", default="")
    ap.add_argument("--max-records", default="500")
    ap.add_argument("--master", default="local[2,2]")
    # the history chaos run: runs until killed, and tags each output with its input's
    # value and position (the run maps the output back onto the source)
    ap.add_argument("--trigger", choices=["available-now", "continuous"],
                    default="available-now")
    ap.add_argument("--tag", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master(args.master).appName("pulsar-txn-pipeline")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    common = {"service.url": args.service_url, "metastore.url": args.metastore_url,
              "metastore.namespace": args.namespace}
    src = (spark.readStream.format("pulsar-txn").options(**common).option("topic", args.source)
           .option("startingOffsets", "earliest")
           .option("maxRecordsPerTrigger", args.max_records).load())
    value = (F.concat(F.col("value").cast("string"), F.lit("@"), F.col("messageId"))
             if args.tag else F.concat(F.upper(F.col("value").cast("string")), F.lit("-out")))
    out = src.select(F.col("key"), value.alias("value"))
    w = (out.writeStream.format("pulsar-txn").options(**common).option("topic", args.sink)
         .option("sink.fault", args.fault).option("checkpointLocation", args.checkpoint))
    w = (w.trigger(availableNow=True) if args.trigger == "available-now"
         else w.trigger(processingTime="300 milliseconds"))
    q = w.start()
    q.awaitTermination()
    print("PIPELINE-DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
