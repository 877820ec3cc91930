"""The source on the wrong namespace or metastore (issue 26, hole 13), on real Spark.

A mistyped ``metastore.namespace`` read 0 rows without an error and committed offsets
past the data; now the query fails at once naming the namespaces that exist, and
never creates the typo. Entries of another deployment fail the query (naming the ids
seen) unless ``read.foreignDeployments=skip``, whose count is in the progress.
"""

from __future__ import annotations

import json
import time

import pytest
from helpers import committed
from spark_helpers import source_df

from pulsar_txn.metastore.keys import Keys

pytestmark = pytest.mark.spark


def test_source_on_a_mistyped_namespace_fails_at_once_and_creates_nothing(
        spark, client, broker, redis_server, namespace, topic_name, tmp_path):
    topic = topic_name("typo")
    committed(client, topic, b"a", b"b")
    typo = namespace + "x"
    with pytest.raises(Exception) as batch:
        source_df(spark, broker, redis_server, typo, stream=False, topic=topic).collect()
    q = (source_df(spark, broker, redis_server, typo, topic=topic,
                   startingOffsets="earliest").writeStream.format("memory")
         .queryName("typo_" + namespace).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    with pytest.raises(Exception) as stream:
        q.awaitTermination(120)
    for e in (batch, stream):
        text = str(e.value)
        assert "metastore.namespace" in text and repr(typo) in text and namespace in text
    assert not client.store.r.exists(Keys(typo, 1).config())


def test_source_fails_on_another_deployments_entries_and_reads_them_once_corrected(
        spark, client, make_client, broker, redis_server, namespace, topic_name, tmp_path):
    topic = topic_name("foreign")
    committed(client, topic, b"a", b"b")
    other = namespace + "b"
    make_client(namespace=other)  # an existing namespace: another deployment
    ckpt = str(tmp_path / "ck")
    got: list[bytes] = []

    def run(ns: str):
        return (source_df(spark, broker, redis_server, ns, topic=topic,
                          startingOffsets="earliest").writeStream
                .foreachBatch(lambda df, _b: got.extend(r.value for r in df.collect()))
                .option("checkpointLocation", ckpt).trigger(availableNow=True).start())

    q = run(other)
    with pytest.raises(Exception) as e:
        q.awaitTermination(120)
    assert client.store.deployment in str(e.value)
    assert "read.foreignDeployments" in str(e.value)
    assert got == []
    # nothing was committed past the entries: the corrected query reads them
    run(namespace).awaitTermination(120)
    assert sorted(got) == [b"a", b"b"]


def test_read_foreign_deployments_skip_passes_them_and_reports_the_count(
        spark, client, make_client, broker, redis_server, namespace, topic_name, tmp_path):
    topic = topic_name("foreign-skip")
    committed(client, topic, b"a", b"b")
    plain = client.create_producer(topic)
    plain.send(b"plain")
    other = namespace + "b"
    make_client(namespace=other)
    rows = source_df(spark, broker, redis_server, other, stream=False, topic=topic,
                     **{"read.foreignDeployments": "skip"}).collect()
    assert [r.value for r in rows] == [b"plain"]
    q = (source_df(spark, broker, redis_server, other, topic=topic, startingOffsets="earliest",
                   **{"read.foreignDeployments": "skip"})
         .writeStream.format("memory").queryName("skip_" + namespace)
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 90
        seen = 0
        while time.monotonic() < deadline and seen < 4:  # 2 by the batch read, 2 here
            p = q.lastProgress
            latest = p["sources"][0].get("latestOffset") if p and p["sources"] else None
            report = json.loads(latest) if isinstance(latest, str) else (latest or {})
            seen = int(report.get("foreignEntriesSkipped", 0))
            time.sleep(0.5)
        assert seen == 4
    finally:
        q.stop()
    from pulsar_txn.metrics import StoreCollector

    (metric,) = [m for m in StoreCollector(make_client(namespace=other).store).collect()
                 if m.name == "ptxn_foreign_entries_skipped"]
    assert metric.samples[0].value == 4


def test_a_streaming_source_stops_when_its_metastore_is_reset(
        spark, client, make_client, broker, redis_server, namespace, topic_name, tmp_path):
    """Issue 26, hole 8 on the source: the driver checks the deployment each trigger."""
    topic = topic_name("reset")
    committed(client, topic, b"before")
    got: list[bytes] = []
    q = (source_df(spark, broker, redis_server, namespace, topic=topic,
                   startingOffsets="earliest").writeStream
         .foreachBatch(lambda df, _b: got.extend(r.value for r in df.collect()))
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while b"before" not in got and time.monotonic() < deadline:
            time.sleep(0.2)
        assert got == [b"before"]
        for key in list(client.store.r.scan_iter(match=f"*{namespace}*", count=1000)):
            client.store.r.delete(key)
        committed(make_client(), topic, b"after")  # a new deployment at the same address
        with pytest.raises(Exception) as e:
            q.awaitTermination(30)
        assert "metastore.url" in str(e.value) and "reset" in str(e.value)
        assert got == [b"before"]
    finally:
        q.stop()
