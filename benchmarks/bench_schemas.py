"""Schema benchmark (issue 29): what typed rows cost the Spark source and sink, as
ratios against the same rows as bytes, measured in the same run. Not a test.

    python benchmarks/bench_schemas.py [--rows 200000] [--json FILE]

The rows are an Avro record of 10 fields (~100 bytes encoded: ints, longs, doubles,
strings, a boolean, a timestamp). Source: a batch query into Spark's ``noop`` sink over
a topic whose messages are those records, once typed (``valueSchema=auto``: a struct
of 10 columns, each payload decoded) and once as bytes (``valueSchema=bytes``, the
same payloads). Sink: a batch ``df.write`` of the same rows, once as a struct column
(encoded under the topic's Avro schema) and once as a binary column of the same
payloads. Each case runs twice after a warm-up; the faster run counts. The broker is
Apache Pulsar standalone whatever PULSAR_TXN_BROKER says: pulsar-lite keeps no schema
registry (both cases would read bytes).
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from pathlib import Path

import pyarrow as pa
from common import local_spark, machine

from pulsar_txn.client import PulsarTxnClient
from pulsar_txn.harness import Services
from pulsar_txn.schema_codec import EncodedSchema, encode_column
from pulsar_txn.schemas import Kind, TopicSchema, arrow_to_avro

FIELDS = pa.struct([
    pa.field("id", pa.int64(), nullable=False), pa.field("customer", pa.int32(), False),
    pa.field("sku", pa.string(), False), pa.field("qty", pa.int32(), False),
    pa.field("price", pa.float64(), False), pa.field("discount", pa.float64(), False),
    pa.field("country", pa.string(), False), pa.field("paid", pa.bool_(), False),
    pa.field("at", pa.timestamp("us", tz="UTC"), False),
    pa.field("note", pa.string(), False)])


def records(n: int) -> pa.Array:
    base = 1_795_000_000_000_000
    return pa.array([{"id": i, "customer": i % 9973, "sku": f"SKU-{i % 5000:06d}",
                      "qty": i % 7 + 1, "price": 9.99 + i % 100, "discount": 0.05,
                      "country": ("DE", "FR", "US", "JP")[i % 4], "paid": i % 2 == 0,
                      "at": base + i * 1000,
                      "note": "standard delivery; leave the parcel at the door, ring twice"}
                     for i in range(n)], FIELDS)


def fill(client, topic: str, schema: TopicSchema, payloads: list[bytes]) -> None:
    p = client.create_producer(topic, schema=EncodedSchema(schema), batching_enabled=True,
                               batching_max_messages=1000, block_if_queue_full=True)
    for i in range(0, len(payloads), 1000):
        with client.transaction() as txn:
            for v in payloads[i:i + 1000]:
                p.send_async(v, txn=txn)
    p.close()


def best(run, times: int = 2) -> float:
    run()  # warm-up: JVM, Python workers, the worker's schema versions
    return min(run() for _ in range(times))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: CI checks it runs")
    args = ap.parse_args()
    if args.smoke:
        args.rows = 3000
    rows = records(args.rows)
    schema = TopicSchema(Kind.AVRO, json.dumps(arrow_to_avro(FIELDS, "Order")))
    payloads = encode_column(rows, schema)
    out = {"machine": machine(), "rows": args.rows,
           "payload_bytes_mean": sum(map(len, payloads)) / len(payloads), "fields": 10}
    spark = local_spark()
    with Services(broker="standalone") as s:
        ns = f"b{uuid.uuid4().hex[:8]}"
        client = PulsarTxnClient(s.service_url, s.metastore_url, namespace=ns,
                                 create_namespace=True)
        topic = f"persistent://public/default/bschema-{uuid.uuid4().hex[:8]}"
        fill(client, topic, schema, payloads)

        def read(value_schema: str) -> float:
            t0 = time.perf_counter()
            df = (spark.read.format("pulsar-txn").option("service.url", s.service_url)
                  .option("metastore.url", s.metastore_url).option("metastore.namespace", ns)
                  .option("topic", topic).option("valueSchema", value_schema).load())
            df.write.format("noop").mode("overwrite").save()
            return time.perf_counter() - t0

        t_typed, t_bytes = best(lambda: read("auto")), best(lambda: read("bytes"))
        out["source"] = {"typed_rows_per_s": args.rows / t_typed,
                         "bytes_rows_per_s": args.rows / t_bytes,
                         "ratio": t_bytes / t_typed, "aim": ">= 0.7"}
        print(json.dumps({"source": out["source"]}), flush=True)

        typed_df = spark.createDataFrame(pa.table({"value": rows}))  # Arrow: types kept
        bytes_df = spark.createDataFrame(pa.table({"value": pa.array(payloads, pa.binary())}))
        typed_df.cache().count()
        bytes_df.cache().count()

        def write(df, kind: str) -> float:
            target = f"persistent://public/default/bsink-{kind}-{uuid.uuid4().hex[:8]}"
            client.create_producer(target, schema=EncodedSchema(schema)).close()
            t0 = time.perf_counter()
            (df.write.format("pulsar-txn").option("service.url", s.service_url)
             .option("metastore.url", s.metastore_url).option("metastore.namespace", ns)
             .option("topic", target).mode("append").save())
            return time.perf_counter() - t0

        t_typed, t_bytes = best(lambda: write(typed_df, "typed")), best(
            lambda: write(bytes_df, "bytes"))
        out["sink"] = {"typed_rows_per_s": args.rows / t_typed,
                       "bytes_rows_per_s": args.rows / t_bytes,
                       "ratio": t_bytes / t_typed, "aim": ">= 0.7"}
        print(json.dumps({"sink": out["sink"]}), flush=True)
        client.close()
    spark.stop()
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
