"""The READ_COMMITTED source on real Spark, Redis and Pulsar (invariants 1-3)."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter

import pytest
from helpers import mixed_history
from spark_helpers import source_df as _reader

pytestmark = pytest.mark.spark


def test_source_never_returns_uncommitted_aborted_or_losing_rows(
        spark, client, broker, redis_server, namespace, topic_name):
    topic = topic_name("src")
    committed: Counter = Counter()
    stop = threading.Event()

    def writers(seed: int):
        rnd = random.Random(seed)
        p, zombie = client.create_producer(topic), client.create_producer(topic)
        n = 0
        while not stop.is_set():
            txn = client.new_transaction()
            batch = [f"s{seed}-{n}-{i}".encode() for i in range(rnd.randint(1, 5))]
            for v in batch:
                p.send(v, txn=txn)
            if rnd.random() < 0.3:  # a losing writer in a committed txn
                zombie.send(b"LOSER", txn=txn)
            if rnd.random() < 0.5:
                client.coordinator.commit(txn.id, winners=[p.writer_id])
                committed.update(batch)
            else:
                txn.abort()
            n += 1

    threads = [threading.Thread(target=writers, args=(s,)) for s in range(2)]
    df = _reader(spark, broker, redis_server, namespace, topic=topic,
                 startingOffsets="earliest")
    q = (df.selectExpr("value", "txnId").writeStream.format("memory")
         .queryName(f"src_{namespace}").trigger(processingTime="300 milliseconds").start())
    for t in threads:
        t.start()
    time.sleep(6)
    stop.set()
    for t in threads:
        t.join()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = spark.sql(f"select value from src_{namespace}").collect()
        if Counter(bytes(r.value) for r in rows) == committed:
            break
        time.sleep(0.5)
    q.stop()
    got = Counter(bytes(r.value) for r in spark.sql(f"select value from src_{namespace}")
                  .collect())
    assert b"LOSER" not in got
    assert got == committed and sum(committed.values()) > 0


def test_source_replay_after_header_gc_is_identical(spark, client, broker, redis_server,
                                                    namespace, topic_name):
    topic = topic_name("replay")
    expected = mixed_history(client, topic)
    client.create_producer(topic).send(b"after-the-range")
    first = (_reader(spark, broker, redis_server, namespace, stream=False, topic=topic)
             .orderBy("messageId").collect())
    end = first[4].messageId  # the range ends at plain-1
    rng = {"topic": topic, "endingOffsets": json.dumps({topic: end})}
    before = _reader(spark, broker, redis_server, namespace, stream=False, **rng).collect()
    assert client.coordinator.sweep_gc(retention_ms=0) == 3
    after = _reader(spark, broker, redis_server, namespace, stream=False, **rng).collect()
    assert [bytes(r.value) for r in before] == expected
    assert [tuple(r) for r in after] == [tuple(r) for r in before]


def test_source_max_records_per_trigger_is_respected(spark, client, broker, redis_server,
                                                     namespace, topic_name):
    topic = topic_name("admit")
    p = client.create_producer(topic)
    with client.transaction() as txn:
        for i in range(35):
            p.send(b"m%d" % i, txn=txn)
    df = _reader(spark, broker, redis_server, namespace, topic=topic,
                 startingOffsets="earliest", maxRecordsPerTrigger="10")
    q = (df.writeStream.format("memory").queryName(f"adm_{namespace}")
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    sizes = [pr["numInputRows"] for pr in q.recentProgress if pr["numInputRows"]]
    assert sizes == [10, 10, 10, 5]
    assert spark.sql(f"select count(*) c from adm_{namespace}").first().c == 35


def test_source_starting_offsets_latest_and_json(spark, client, broker, redis_server,
                                                 namespace, topic_name):
    topic = topic_name("start")
    p = client.create_producer(topic)
    for i in range(3):
        p.send(b"old%d" % i)
    rows = _reader(spark, broker, redis_server, namespace, stream=False, topic=topic).collect()
    second = sorted(rows, key=lambda r: r.messageId)[1].messageId
    from_json = _reader(spark, broker, redis_server, namespace, stream=False, topic=topic,
                        startingOffsets=json.dumps({topic: second})).collect()
    assert [bytes(r.value) for r in from_json] == [b"old2"]
    df = _reader(spark, broker, redis_server, namespace, topic=topic, startingOffsets="latest")
    q = df.writeStream.format("memory").queryName(f"lat_{namespace}").start()
    q.processAllAvailable()
    p.send(b"new")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not spark.sql(f"select * from lat_{namespace}").count():
        time.sleep(0.3)
    q.stop()
    assert [bytes(r.value) for r in spark.sql(f"select value from lat_{namespace}").collect()
            ] == [b"new"]


def test_source_rejects_bad_options_naming_them(spark, broker, redis_server, namespace):
    with pytest.raises(Exception, match="unknown option.*colour"):
        _reader(spark, broker, redis_server, namespace, stream=False, topic="t",
                colour="red").collect()
    with pytest.raises(Exception, match="'maxRecordsPerTrigger'|maxrecordspertrigger"):
        _reader(spark, broker, redis_server, namespace, topic="t",
                maxRecordsPerTrigger="lots").writeStream.format("memory").queryName(
                    f"bad_{namespace}").start().awaitTermination(30)
    with pytest.raises(Exception, match="exactly one of the options 'topic', 'topics'"):
        _reader(spark, broker, redis_server, namespace, stream=False).collect()
    with pytest.raises(Exception, match="'topicsPattern' is not a regular expression"):
        _reader(spark, broker, redis_server, namespace, stream=False,
                topicsPattern="topic://public/default/(").collect()
    with pytest.raises(Exception, match="'subscription'.*streaming queries only"):
        _reader(spark, broker, redis_server, namespace, stream=False, topic="t",
                subscription="s").collect()
    with pytest.raises(Exception, match="is_read_compacted.*not a pulsar-client setting"):
        _reader(spark, broker, redis_server, namespace, stream=False, topic="t",
                **{"pulsar.reader.is_read_compacted": "true"}).collect()


def test_source_starting_timestamp(spark, client, broker, redis_server, namespace,
                                   topic_name):
    topic = topic_name("ts")
    p = client.create_producer(topic)
    for i in range(3):
        p.send(b"before%d" % i)
    time.sleep(0.05)
    ts = int(time.time() * 1000)
    time.sleep(0.05)
    with client.transaction() as txn:
        p.send(b"after0", txn=txn)
    p.send(b"after1")
    rows = _reader(spark, broker, redis_server, namespace, stream=False, topic=topic,
                   startingTimestamp=str(ts)).collect()
    assert sorted(bytes(r.value) for r in rows) == [b"after0", b"after1"]


def test_source_fail_on_data_loss_true_fails_false_skips(spark, client, broker, redis_server,
                                                         namespace, topic_name):
    topic = topic_name("loss")
    p = client.create_producer(topic)
    for i in range(3):
        p.send(b"m%d" % i)
    rows = _reader(spark, broker, redis_server, namespace, stream=False, topic=topic).collect()
    end = max(r.messageId for r in rows)
    p.close()
    if not broker.delete_topic(topic):
        pytest.skip(f"the {broker.kind} broker cannot delete a topic's data")
    planned = {"topic": topic, "endingOffsets": json.dumps({topic: end}),
               "dataTimeoutMs": "2000"}
    with pytest.raises(Exception, match="its data is gone"):
        _reader(spark, broker, redis_server, namespace, stream=False, **planned).collect()
    skipped = _reader(spark, broker, redis_server, namespace, stream=False,
                      failOnDataLoss="false", **planned).collect()
    assert skipped == []


def test_source_min_partitions_splits_without_changing_rows(spark, client, broker,
                                                            redis_server, namespace,
                                                            topic_name):
    topic = topic_name("split")
    expected = mixed_history(client, topic)
    p = client.create_producer(topic)
    for i in range(40):
        with client.transaction() as txn:
            p.send(b"t%d" % i, txn=txn)
    expected += [b"t%d" % i for i in range(40)]
    one = _reader(spark, broker, redis_server, namespace, stream=False, topic=topic)
    three = _reader(spark, broker, redis_server, namespace, stream=False, topic=topic,
                    minPartitions="3")
    assert three.rdd.getNumPartitions() == 3
    rows = sorted(three.collect(), key=lambda r: r.messageId)
    assert [tuple(r) for r in rows] == [tuple(r) for r in sorted(one.collect(),
                                                                  key=lambda r: r.messageId)]
    assert sorted(bytes(r.value) for r in rows) == sorted(expected)


def test_source_only_deployment_finishes_the_background_work(
        spark, make_client, broker, redis_server, namespace, topic_name):
    """Hole 6: with only a Spark source query running (no client sweeper anywhere), an
    abandoned txn is aborted after its deadline, a committed txn whose index cleanup
    died with its committer is materialized, and finalized txns are collected, so
    the query does not stall behind either and the store does not grow without bound."""
    from pulsar_txn.state import TxnState

    writer = make_client(sweeper=False)
    topic = topic_name("bg")
    p = writer.create_producer(topic)
    abandoned = writer.new_transaction(timeout_ms=1500)
    p.send(b"abandoned", txn=abandoned)
    committed = writer.new_transaction()
    p.send(b"committed", txn=committed)
    # the committer dies right after the CAS: no index cleanup, the gate stays held
    writer.store.end_txn(committed.id, TxnState.COMMITTED, [p.writer_id])
    p.send(b"after")
    writer.close()
    df = _reader(spark, broker, redis_server, namespace, topic=topic,
                 startingOffsets="earliest", **{"transaction.retention.ms": "0"})
    q = (df.selectExpr("value").writeStream.format("memory").queryName(f"bg_{namespace}")
         .trigger(processingTime="300 milliseconds").start())
    try:
        deadline, got = time.monotonic() + 30, []
        while time.monotonic() < deadline and len(got) < 2:
            got = [bytes(r.value) for r in spark.sql(f"select value from bg_{namespace}")
                   .collect()]
            time.sleep(0.3)
        checker = make_client(sweeper=False)
        assert sorted(got) == [b"after", b"committed"], (
            q.exception(), checker.store.open_txns(), checker.store.unmaterialized_txns(),
            checker.store.get_header(abandoned.id), checker.store.get_header(committed.id))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and checker.store.finalized_txns():
            time.sleep(0.3)
        assert checker.store.finalized_txns() == []  # collected by the query's driver
        assert checker.store.get_header(abandoned.id) is None
    finally:
        q.stop()


def test_source_never_delivers_a_row_before_its_txn_committed(
        spark, client, broker, redis_server, namespace, topic_name):
    """Invariant 1 in time, not only in the final multiset: every row a micro-batch
    returns belongs to a txn whose commit had *started* before that batch reached
    the sink (so before it was planned). A row of a then-OPEN txn delivered early,
    whose txn commits later, fails here although the final output would match."""
    topic = topic_name("early")
    commit_started: dict[bytes, float] = {}
    aborted: set[bytes] = set()
    violations: list[str] = []
    seen: Counter = Counter()
    stop = threading.Event()

    def writer():
        rnd = random.Random(7)
        p = client.create_producer(topic)
        n = 0
        while not stop.is_set():
            txn = client.new_transaction()
            batch = [f"e-{n}-{i}".encode() for i in range(rnd.randint(1, 4))]
            for v in batch:
                p.send(v, txn=txn)
            time.sleep(rnd.random() * 0.2)  # stays OPEN across trigger boundaries
            if rnd.random() < 0.7:
                now = time.monotonic()
                for v in batch:
                    commit_started[v] = now
                txn.commit()
            else:
                aborted.update(batch)
                txn.abort()
            n += 1

    def check(batch_df, batch_id):
        began = time.monotonic()
        for r in batch_df.select("value").collect():
            v = bytes(r.value)
            seen[v] += 1
            if v in aborted or commit_started.get(v, float("inf")) > began:
                violations.append(f"batch {batch_id}: {v!r} before its commit")

    df = _reader(spark, broker, redis_server, namespace, topic=topic,
                 startingOffsets="earliest")
    q = (df.writeStream.foreachBatch(check).trigger(processingTime="200 milliseconds")
         .start())
    th = threading.Thread(target=writer)
    th.start()
    time.sleep(8)
    stop.set()
    th.join()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and set(seen) != set(commit_started):
        time.sleep(0.3)
    q.stop()
    assert not violations, violations[:5]
    assert seen == Counter(set(commit_started)), "each committed row exactly once"
