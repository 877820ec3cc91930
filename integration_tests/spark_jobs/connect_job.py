"""The format through Spark Connect: a Connect client session on a local server
(``SparkSession.builder.remote("local[2]")``) writes, reads and streams.

Run as its own process: a local Connect server owns its JVM, which a test process
that already holds a classic Spark session cannot share. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--service-url", required=True)
    ap.add_argument("--metastore-url", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--topic", required=True)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    common = {"service.url": args.service_url, "metastore.url": args.metastore_url,
              "metastore.namespace": args.namespace}
    out: dict = {"connect": type(spark).__module__}
    rows = [(f"k{i}", f"v{i}") for i in range(20)]
    (spark.createDataFrame(rows, "key string, value string").write.format("pulsar-txn")
     .options(**common).option("topic", args.topic).mode("append").save())
    read = spark.read.format("pulsar-txn").options(**common).option("topic", args.topic).load()
    out["read"] = sorted(bytes(r.value).decode() for r in read.select("value").collect())
    copy = args.topic + "-copy"
    ckpt = tempfile.mkdtemp(prefix="connect-ckpt-")
    q = (spark.readStream.format("pulsar-txn").options(**common).option("topic", args.topic)
         .option("startingOffsets", "earliest").load().select("key", "value")
         .writeStream.format("pulsar-txn").options(**common).option("topic", copy)
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    q.awaitTermination(120)
    streamed = spark.read.format("pulsar-txn").options(**common).option("topic", copy).load()
    out["streamed"] = sorted(bytes(r.value).decode() for r in streamed.select("value").collect())
    spark.stop()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
