"""Consume-transform-produce, exactly once: pulsar-txn in → Spark → pulsar-txn out.

Seeds an input topic (some transactions aborted: never read), runs a Spark
query that upper-cases every committed message and writes it transactionally,
then checks the output holds each input exactly once. Runs on the embedded
services it starts (Valkey + pulsar-lite; PULSAR_TXN_BROKER=standalone for the
reference broker) and a local Spark session.

    python examples/pipeline.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter

from pulsar_txn.client import PulsarTxnClient, read_all
from pulsar_txn.harness import Services


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    # the client closes before the services stop, also on an error
    with (Services() as services,
          PulsarTxnClient(services.service_url, services.metastore_url) as client):
        producer = client.create_producer("pipeline-in")
        expected = Counter()
        for t in range(20):
            with client.new_transaction() as txn:
                for i in range(50):
                    producer.send(f"event-{t}-{i}".encode(), key=f"user-{i % 7}", txn=txn)
            expected.update(f"EVENT-{t}-{i}".encode() for i in range(50))
        cancelled = client.new_transaction()
        producer.send(b"cancelled", txn=cancelled)
        cancelled.abort()

        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        common = {"service.url": services.service_url, "metastore.url": services.metastore_url}
        source = (spark.readStream.format("pulsar-txn").options(**common)
                  .option("topic", "pipeline-in")
                  .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", "400")
                  .load())
        upper = source.select("key", F.upper(F.col("value").cast("string")).alias("value"))
        query = (upper.writeStream.format("pulsar-txn").options(**common)
                 .option("topic", "pipeline-out")
                 .option("checkpointLocation", tempfile.mkdtemp(prefix="pipeline-ckpt-"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        spark.stop()

        out = Counter(m.value for m in read_all(client.create_reader("pipeline-out"), 1000))
        print(f"{sum(expected.values())} committed inputs in {len(batches)} micro-batches "
              f"{batches} -> {sum(out.values())} outputs; exactly once: {out == expected}")
        assert out == expected
    print("pipeline OK")


if __name__ == "__main__":
    main()
