"""Partitioned topics (what most Pulsar 4.x deployments use): the Spark sink writes a
partitioned topic whole, routing keys as Pulsar's Murmur3 scheme does, one writer-run
per partition under the batch's transaction; the source reads it whole, each
partition a segment; the client API works per partition and says so."""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest

from pulsar_txn.errors import ConfigError


def _partitioned(broker, n: int) -> str:
    if not getattr(broker, "admin_url", ""):
        pytest.skip(f"the {broker.kind} broker cannot create partitioned topics (no admin API)")
    name = f"part-{uuid.uuid4().hex[:8]}"
    req = urllib.request.Request(
        f"{broker.admin_url}/admin/v2/persistent/public/default/{name}/partitions",
        data=json.dumps(n).encode(), method="PUT", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()
    return f"persistent://public/default/{name}"


def test_client_api_names_the_partitions_of_a_partitioned_topic(client, broker):
    topic = _partitioned(broker, 3)
    with pytest.raises(ConfigError, match="partition-0"):
        client.create_producer(topic)
    with pytest.raises(ConfigError, match="3 partitions"):
        client.create_reader(topic)
    p = client.create_producer(topic + "-partition-1")  # one partition: a segment
    with client.transaction() as txn:
        p.send(b"x", txn=txn)


@pytest.mark.spark
def test_spark_writes_and_reads_a_partitioned_topic_whole(spark, broker, redis_server,
                                                          namespace):
    from pulsar_txn.topics import partition_for

    topic = _partitioned(broker, 3)
    common = {"service.url": broker.service_url, "metastore.url": redis_server.url,
              "metastore.namespace": namespace, "topic": topic}
    rows = [(f"key-{i}", f"v{i}") for i in range(30)]
    (spark.createDataFrame(rows, "key string, value string").write.format("pulsar-txn")
     .options(**common).mode("append").save())
    got = (spark.read.format("pulsar-txn").options(**common).load()
           .select("key", "value", "topic", "segment").collect())
    assert sorted(bytes(r.value).decode() for r in got) == sorted(v for _, v in rows)
    assert {r.topic for r in got} == {topic}
    where = {r.key: r.segment for r in got}
    assert len(set(where.values())) == 3  # spread over every partition
    assert where == {k: f"{topic}-partition-{partition_for(k, 3, 0)}" for k, _ in rows}
    with pytest.raises(Exception, match="a partitioned topic"):  # positions per partition
        (spark.read.format("pulsar-txn").options(**common)
         .option("startingOffsets", json.dumps({topic: "0:0"})).load().collect())
