"""Split and merge scalable topics while an exactly-once Spark pipeline runs.

A producer keeps writing transactions of keyed events to ``topic://…/clicks``
(two segments) while a streaming query reads it READ_COMMITTED, transforms each
event and writes ``topic://…/clicks-enriched`` transactionally. Mid-stream the
input is split, the output is split, then the input is merged. At the end the
output holds every committed input exactly once, and for every key in the order
it was produced. Runs on the embedded services it starts (Valkey + pulsar-lite;
PULSAR_TXN_BROKER=standalone for the reference broker, which also terminates
sealed segments) and a local Spark session.

    python examples/split_during_job.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections import defaultdict

from pulsar_txn.client import PulsarTxnClient, read_all
from pulsar_txn.harness import Services

IN, OUT = "topic://public/default/clicks", "topic://public/default/clicks-enriched"
KEYS, ROUNDS = 16, 40


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    # the client closes before the services stop, also on an error
    with (Services() as services,
          PulsarTxnClient(services.service_url, services.metastore_url,
                          admin_url=getattr(services.broker, "admin_url", None)) as client):
        client.scalable.create(IN, segments=2)
        client.scalable.create(OUT, segments=2)
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        common = {"service.url": services.service_url, "metastore.url": services.metastore_url}
        events = (spark.readStream.format("pulsar-txn").options(**common).option("topic", IN)
                  .option("startingOffsets", "earliest").load())
        enriched = events.select(
            "key", F.concat(F.col("value").cast("string"), F.lit("|seen")).alias("value"))
        query = (enriched.writeStream.format("pulsar-txn").options(**common)
                 .option("topic", OUT)
                 .option("checkpointLocation", tempfile.mkdtemp(prefix="split-ckpt-"))
                 .trigger(processingTime="500 milliseconds").start())

        produced = threading.Event()
        progress = [0]

        def produce() -> None:
            producer = client.create_producer(IN)
            for r in range(ROUNDS):
                with client.transaction() as txn:  # one transaction per round of keys
                    for k in range(KEYS):
                        producer.send(f"user-{k}:{r}".encode(), key=f"user-{k}", txn=txn)
                progress[0] = r
                time.sleep(0.05)
            produced.set()

        writer = threading.Thread(target=produce)
        writer.start()
        for at, change in ((8, lambda: client.scalable.split(IN, 0)),
                           (16, lambda: client.scalable.split(OUT, 1)),
                           (24, lambda: client.scalable.merge(IN, 3, 1))):
            while progress[0] < at:
                time.sleep(0.02)
            lay = change()
            print(f"{lay.name}: epoch {lay.epoch}, active segments "
                  f"{[s.id for s in lay.active()]}")
        writer.join()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if sum(p["numInputRows"] for p in query.recentProgress) >= KEYS * ROUNDS:
                break
            time.sleep(0.5)
        query.stop()
        spark.stop()

        per_key: dict[str, list[int]] = defaultdict(list)
        for m in read_all(client.create_reader(OUT), 1500):
            key, rest = m.value.decode().split(":")
            per_key[key].append(int(rest.split("|")[0]))
        exact = all(v == list(range(ROUNDS)) for v in per_key.values()) and len(per_key) == KEYS
        print(f"{KEYS * ROUNDS} committed inputs -> {sum(map(len, per_key.values()))} outputs "
              f"over {len(client.scalable.layout(OUT, refresh=True).segments)} output "
              f"segments; exactly once and in per-key order: {exact}")
        assert exact, dict(per_key)
    print("split during job OK")


if __name__ == "__main__":
    main()
