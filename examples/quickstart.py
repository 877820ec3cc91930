"""Quick start: an exactly-once consume-transform-produce pipeline in Spark.

A streaming query reads the topic ``quickstart-in`` READ_COMMITTED, upper-cases each
event and writes it to ``quickstart-out`` in one transaction per micro-batch. While
it runs, a producer keeps committing transactions into the input and aborts every
fourth one. At the end every committed event is in the output exactly once and no
aborted one is.

Runs on embedded services it starts itself (a Valkey server and the pulsar-lite
broker, real processes on loopback) and a local Spark session;
PULSAR_TXN_BROKER=standalone uses the reference Apache Pulsar broker.

    python examples/quickstart.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections import Counter

from pulsar_txn.client import PulsarTxnClient
from pulsar_txn.errors import ReadTimeout
from pulsar_txn.harness import Services

TXNS, PER_TXN = 40, 50


def produce(client: PulsarTxnClient, expected: Counter, counts: dict) -> None:
    """Transactions of PER_TXN events; every fourth is aborted and must never show."""
    producer = client.create_producer("quickstart-in")
    for t in range(TXNS):
        txn = client.new_transaction()
        events = [f"event-{t}-{i}" for i in range(PER_TXN)]
        for i, e in enumerate(events):
            producer.send(e.encode(), key=f"user-{i % 7}", txn=txn)
        if t % 4 == 3:
            txn.abort()
            counts["aborted"] += 1
        else:
            txn.commit()
            expected.update(e.upper().encode() for e in events)
            counts["committed"] += 1
        time.sleep(0.05)


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    # the client closes before the services stop, also on an error
    with (Services() as services,
          PulsarTxnClient(services.service_url, services.metastore_url) as client):
        print(f"services: Valkey at {services.metastore_url}, {services.kind} broker at "
              f"{services.service_url}", flush=True)
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        common = {"service.url": services.service_url, "metastore.url": services.metastore_url}
        client.create_producer("quickstart-in").send(b"hello")  # the topic exists
        source = (spark.readStream.format("pulsar-txn").options(**common)
                  .option("topic", "quickstart-in").option("startingOffsets", "earliest")
                  .load())
        upper = source.select("key", F.upper(F.col("value").cast("string")).alias("value"))
        query = (upper.writeStream.format("pulsar-txn").options(**common)
                 .option("topic", "quickstart-out")
                 .option("checkpointLocation", tempfile.mkdtemp(prefix="quickstart-ckpt-"))
                 .trigger(processingTime="500 milliseconds").start())
        expected, counts = Counter({b"HELLO": 1}), {"committed": 0, "aborted": 0}
        producer = threading.Thread(target=produce, args=(client, expected, counts))
        producer.start()
        out: Counter = Counter()
        reader = client.create_reader("quickstart-out")
        deadline, shown = time.monotonic() + 120, 0.0
        while time.monotonic() < deadline:
            try:
                out.update(m.value for m in reader.read_batch(1000, 200))
            except ReadTimeout:
                pass
            now = time.monotonic()
            if now - shown >= 2:
                shown = now
                p = query.lastProgress
                batch = (f"micro-batch {p['batchId']}" if p else
                         "the query is starting")
                print(f"  {batch}: {counts['committed']} txns committed and "
                      f"{counts['aborted']} aborted upstream; {sum(out.values())} rows "
                      "out so far", flush=True)
            if not producer.is_alive() and sum(out.values()) >= sum(expected.values()):
                break
        producer.join()
        try:  # anything late (there should be nothing)
            out.update(m.value for m in reader.read_batch(100_000, 1000))
        except ReadTimeout:
            pass
        query.stop()
        spark.stop()
        reader.close()
    once = out == expected
    print(f"input: {sum(expected.values())} committed events "
          f"({counts['aborted']} transactions, {counts['aborted'] * PER_TXN} events aborted); "
          f"output: {sum(out.values())} rows; exactly once: {once}")
    if not once:
        sys.exit("quick start FAILED: the output is not the committed input exactly once")
    print("quickstart OK")


if __name__ == "__main__":
    main()
