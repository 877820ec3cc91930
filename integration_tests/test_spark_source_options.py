"""Source options on real Spark, Redis and Pulsar: subscription, admission control,
topicsPattern, reader pass-through, progress metrics, streaming startingTimestamp."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pulsar
import pytest
from spark_helpers import source_df

from pulsar_txn.client import quiet_logger

pytestmark = pytest.mark.spark


def _batches(spark, broker, redis_server, namespace, ckpt, available_now=True, fail=None,
             **opts):
    """Run a stream into foreachBatch; return {batchId: [values]} and the query."""
    got: dict[int, list[bytes]] = {}
    lock = threading.Lock()

    def sink(df, batch_id):
        vals = [r.value for r in df.select("value").collect()]
        if fail is not None and fail(batch_id, vals):
            raise RuntimeError(f"fault injection: batch {batch_id} fails")
        with lock:
            got[batch_id] = vals

    w = (source_df(spark, broker, redis_server, namespace, **opts).writeStream.foreachBatch(sink)
         .option("checkpointLocation", str(ckpt)))
    w = w.trigger(availableNow=True) if available_now else \
        w.trigger(processingTime="200 milliseconds")
    return got, lock, w.start()


def _drain(consumer, idle_ms=1500) -> list[bytes]:
    out = []
    while True:
        try:
            m = consumer.receive(idle_ms)
        except pulsar.Timeout:
            return out
        out.append(m.data())
        consumer.acknowledge(m)


def test_source_subscription_advances_only_with_committed_batches(
        spark, client, broker, redis_server, namespace, topic_name, tmp_path):
    topic = topic_name("sub")
    p = client.create_producer(topic)
    for i in range(30):
        p.send(b"m%d" % i)
    # a query whose batch fails: Spark never commits it, the subscription must not move
    _, _, q = _batches(spark, broker, redis_server, namespace, tmp_path / "ck-fail",
                       fail=lambda b, v: True, topic=topic, startingOffsets="earliest",
                       subscription="audit")
    with pytest.raises(Exception, match="fault injection"):
        q.awaitTermination(120)
    plain = pulsar.Client(broker.service_url, logger=quiet_logger())
    try:
        c = plain.subscribe(topic, "audit", consumer_type=pulsar.ConsumerType.Failover,
                            initial_position=pulsar.InitialPosition.Earliest)
        # (3 s: a Failover subscription dispatches ~1 s after its active consumer changes)
        assert len(set(_drain(c, 3000))) == 30  # nothing acknowledged by a failed batch
        c.close()  # (these acks were the test's own: use a fresh subscription below)
    finally:
        plain.close()
    got, _, q = _batches(spark, broker, redis_server, namespace, tmp_path / "ck",
                         topic=topic, startingOffsets="earliest", subscription="progress",
                         maxRecordsPerTrigger="7")
    q.awaitTermination(120)
    assert sorted(v for vals in got.values() for v in vals) == sorted(b"m%d" % i
                                                                       for i in range(30))
    for i in range(30, 33):
        p.send(b"m%d" % i)
    plain = pulsar.Client(broker.service_url, logger=quiet_logger())
    try:
        c = plain.subscribe(topic, "progress", consumer_type=pulsar.ConsumerType.Failover,
                            initial_position=pulsar.InitialPosition.Earliest)
        assert set(_drain(c)) == {b"m30", b"m31", b"m32"}  # backlog = only what is unread
    finally:
        plain.close()


def test_subscription_stops_exactly_at_the_last_committed_batch(
        spark, client, broker, redis_server, namespace, topic_name, tmp_path):
    """Batches 0 and 1 commit, batch 2 fails: the subscription must sit exactly past
    batch 1's rows (not before: a restart would re-count them as backlog; not after: it
    would acknowledge rows no committed batch consumed)."""
    topic = topic_name("sub-exact")
    p = client.create_producer(topic)
    for i in range(30):
        p.send(b"m%d" % i)
    got, _, q = _batches(spark, broker, redis_server, namespace, tmp_path / "ck",
                         fail=lambda b, v: b == 2, topic=topic, startingOffsets="earliest",
                         subscription="exact", maxRecordsPerTrigger="7")
    with pytest.raises(Exception, match="fault injection"):
        q.awaitTermination(120)
    assert sorted(got) == [0, 1] and sum(len(v) for v in got.values()) == 14
    plain = pulsar.Client(broker.service_url, logger=quiet_logger())
    try:
        c = plain.subscribe(topic, "exact", consumer_type=pulsar.ConsumerType.Failover,
                            initial_position=pulsar.InitialPosition.Earliest)
        assert sorted(set(_drain(c))) == sorted(b"m%d" % i for i in range(14, 30))
    finally:
        plain.close()


def test_source_max_bytes_per_trigger_is_respected(spark, client, broker, redis_server,
                                                   namespace, topic_name, tmp_path):
    topic = topic_name("bytes")
    p = client.create_producer(topic)
    payloads = [bytes([65 + i]) * 100 for i in range(20)]
    with client.transaction() as txn:
        for v in payloads[:10]:
            p.send(v, txn=txn)
    for v in payloads[10:]:
        p.send(v)
    got, _, q = _batches(spark, broker, redis_server, namespace, tmp_path / "ck",
                         topic=topic, startingOffsets="earliest", maxBytesPerTrigger="350")
    q.awaitTermination(120)
    sizes = [len(v) for v in got.values() if v]
    assert all(n <= 3 for n in sizes) and len(sizes) >= 7, sizes
    assert sorted(v for vals in got.values() for v in vals) == sorted(payloads)


def test_source_min_records_waits_for_enough_or_max_trigger_delay(
        spark, client, broker, redis_server, namespace, topic_name, tmp_path):
    topic = topic_name("min")
    p = client.create_producer(topic)
    for i in range(3):
        p.send(b"a%d" % i)
    got, lock, q = _batches(spark, broker, redis_server, namespace, tmp_path / "ck",
                            available_now=False, topic=topic, startingOffsets="earliest",
                            minRecordsPerTrigger="10", maxTriggerDelay="60s")
    try:
        time.sleep(3.0)
        with lock:
            assert not any(got.values()), got  # 3 < 10 and the delay has not passed
        with client.transaction() as txn:  # all 8 visible at once: 3 + 8 in one step
            for i in range(8):
                p.send(b"b%d" % i, txn=txn)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                data = [v for v in got.values() if v]
            if data:
                break
            time.sleep(0.2)
        assert len(data) == 1 and len(data[0]) == 11, data  # one batch, once 11 >= 10
    finally:
        q.stop()
    got2, lock2, q2 = _batches(spark, broker, redis_server, namespace, tmp_path / "ck2",
                               available_now=False, topic=topic, startingOffsets="earliest",
                               minRecordsPerTrigger="100", maxTriggerDelay="2s")
    try:
        t0, data = time.monotonic(), []
        while time.monotonic() - t0 < 60 and not data:
            with lock2:
                data = [v for v in got2.values() if v]
            time.sleep(0.2)
        assert len(data[0]) == 11 and time.monotonic() - t0 >= 1.5  # the delay let it through
    finally:
        q2.stop()


def test_source_topics_pattern_picks_matching_topics(spark, make_client, broker, redis_server,
                                                     namespace):
    client = make_client()
    tag = uuid.uuid4().hex[:6]
    for name in (f"pat-{tag}-a", f"pat-{tag}-b", f"other-{tag}"):
        client.scalable.create(f"topic://public/default/{name}", segments=2)
        client.create_producer(f"topic://public/default/{name}").send(name.encode(), key="k")
    rows = (spark.read.format("pulsar-txn").option("service.url", broker.service_url)
            .option("metastore.url", redis_server.url).option("metastore.namespace", namespace)
            .option("topicsPattern", f"topic://public/default/pat-{tag}-.*").load()
            .select("value", "topic").collect())
    assert sorted(r.value for r in rows) == [f"pat-{tag}-a".encode(), f"pat-{tag}-b".encode()]
    assert {r.topic for r in rows} == {f"topic://public/default/pat-{tag}-a",
                                       f"topic://public/default/pat-{tag}-b"}
    plain = f"persistent://public/default/ppat-{tag}-x"
    client.create_producer(plain).send(b"plain")
    reader = (spark.read.format("pulsar-txn").option("service.url", broker.service_url)
              .option("metastore.url", redis_server.url)
              .option("metastore.namespace", namespace)
              .option("topicsPattern", f"persistent://public/default/ppat-{tag}-.*"))
    if not getattr(broker, "admin_url", ""):
        with pytest.raises(Exception, match="needs option 'admin.url'"):
            reader.load().collect()
        return
    rows = reader.option("admin.url", broker.admin_url).load().select("value").collect()
    assert [r.value for r in rows] == [b"plain"]


def test_source_reader_passthrough_and_streaming_starting_timestamp(
        spark, client, broker, redis_server, namespace, topic_name, tmp_path):
    topic = topic_name("ts")
    p = client.create_producer(topic)
    for i in range(3):
        p.send(b"before%d" % i)
    time.sleep(0.05)
    ts = int(time.time() * 1000)
    time.sleep(0.05)
    for i in range(4):
        p.send(b"after%d" % i)
    got, _, q = _batches(spark, broker, redis_server, namespace, tmp_path / "ck",
                         topic=topic, startingTimestamp=str(ts),
                         **{"pulsar.reader.receiver_queue_size": "5",
                            "pulsar.reader.reader_name": "ptxn-test"})
    q.awaitTermination(120)
    assert sorted(v for vals in got.values() for v in vals) == [b"after%d" % i
                                                                for i in range(4)]


def test_source_progress_reports_backlog_and_open_txns_holding_the_gate(
        spark, client, broker, redis_server, namespace, topic_name, tmp_path):
    topic = topic_name("prog")
    p = client.create_producer(topic)
    for i in range(5):
        p.send(b"p%d" % i)
    txn = client.new_transaction(timeout_ms=120_000)
    for i in range(3):
        p.send(b"t%d" % i, txn=txn)
    p.send(b"after0")
    p.send(b"after1")
    got, lock, q = _batches(spark, broker, redis_server, namespace, tmp_path / "ck",
                            available_now=False, topic=topic, startingOffsets="earliest")

    def report():
        prog = q.lastProgress
        if not prog or not prog["sources"]:
            return None
        latest = prog["sources"][0].get("latestOffset")
        return json.loads(latest) if isinstance(latest, str) else latest

    try:
        deadline, r = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            r = report()
            if r and r.get("segmentsRead") and sum(len(v) for v in got.values()) >= 5:
                break
            time.sleep(0.2)
        assert r["openTxnsHoldingGate"] == 1 and r["entriesBehindLatest"] == 5, r
        txn.commit()
        while time.monotonic() < deadline:
            r = report()
            if r and r["openTxnsHoldingGate"] == 0 and r["entriesBehindLatest"] == 0:
                break
            time.sleep(0.2)
        assert r["openTxnsHoldingGate"] == 0 and r["entriesBehindLatest"] == 0, r
        with lock:
            assert sum(len(v) for v in got.values()) == 10
    finally:
        q.stop()


@pytest.mark.parametrize("stream", [True, False])
def test_a_bad_source_option_fails_load_with_our_error_as_the_last_line(spark, stream):
    """Checked in the data source's schema(): a streaming query's option error ended
    under pyspark's own ``UnboundLocalError`` when it came from the stream reader."""
    r = (spark.readStream if stream else spark.read).format("pulsar-txn")
    r = (r.option("service.url", "pulsar://127.0.0.1:1").option("metastore.url",
         "redis://:s3cr3t@127.0.0.1:1").option("topic", "t").option("maxTriggerDelay", "soon"))
    with pytest.raises(Exception) as err:
        r.load()
    text = str(err.value)
    last = [ln for ln in text.splitlines() if ln.strip() and "SQLSTATE" not in ln][-1]
    assert "'maxTriggerDelay'" in last and "UnboundLocalError" not in text, text[-2000:]
    assert "s3cr3t" not in text
