"""Chaos: a consume-transform-produce query killed over and over must be exactly once.

The driver (Python + JVM, the whole process group) is SIGKILLed at >= 20 random
points and restarted from its checkpoint each time; one run has a task attempt
fail after writing (executor side); Redis is SIGKILLed and restarted (AOF) while
the query runs. A READ_COMMITTED observer follows the output the whole time.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from spark_helpers import Observer

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).parent / "spark_jobs" / "pipeline_job.py"
KILLS = int(os.environ.get("PULSAR_TXN_CHAOS_KILLS", "20"))
MESSAGES = 10_000


def _start(broker, redis_url, namespace, src, dst, ckpt, fault="", master="local[2,2]"):
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.Popen(
        [sys.executable, str(JOB), "--source", src, "--sink", dst, "--checkpoint", str(ckpt),
         "--service-url", broker.service_url, "--metastore-url", redis_url,
         "--namespace", namespace, "--fault", fault, "--max-records", "200",
         "--master", master],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True)


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def _produce(client, src, rnd, n) -> Counter:
    """Committed upstream input, with aborted transactions mixed in; the expected output."""
    expected: Counter = Counter()
    p = client.create_producer(src, batching_enabled=True, block_if_queue_full=True)
    i = 0
    while i < n:
        txn = client.new_transaction()
        batch = [f"m{j}" for j in range(i, min(n, i + rnd.randint(50, 400)))]
        for v in batch:
            p.send_async(v.encode(), key=v, txn=txn)
        if rnd.random() < 0.15:
            txn.abort()  # never visible upstream: must never reach the output
            continue
        txn.commit()
        expected.update(f"{v.upper()}-out".encode() for v in batch)
        i += len(batch)
    return expected


def test_pipeline_exactly_once_through_driver_kills_task_failure_and_redis_restart(
        broker, tmp_path, topic_name):
    from pulsar_txn.client import PulsarTxnClient
    from pulsar_txn.harness.redis_server import RedisServer

    redis = RedisServer(tmp_path / "redis").start()  # our own: this test restarts it
    namespace = "chaos"
    # no sweeper here: the queries' drivers must do the background work (hole 6)
    client = PulsarTxnClient(broker.service_url, redis.url, namespace=namespace, sweeper=False)
    src, dst = topic_name("chaos-in"), topic_name("chaos-out")
    rnd = random.Random(int(os.environ.get("PULSAR_TXN_CHAOS_SEED", "473")))
    expected = _produce(client, src, rnd, MESSAGES)
    observer = Observer(client, dst)
    observer.start()
    ckpt = tmp_path / "ckpt"
    kills, runs, redis_restarts = 0, 0, 0
    started = time.monotonic()
    try:
        # run 1: a task attempt fails after writing (executor side); kill it after batch 3
        proc = _start(broker, redis.url, namespace, src, dst, ckpt, fault="fail-first-attempt:2")
        runs += 1
        deadline = time.monotonic() + 180
        from pulsar_txn.errors import ConfigError
        from pulsar_txn.spark.options import sink_id_for_checkpoint

        sink_id = None
        while sink_id is None or client.store.sink_last_batch(sink_id) < 3:
            try:
                sink_id = sink_id or sink_id_for_checkpoint(str(ckpt))
            except ConfigError:  # the query has not written its checkpoint metadata yet
                pass
            assert proc.poll() is None, "pipeline ended early"
            assert time.monotonic() < deadline, "pipeline made no progress"
            time.sleep(0.2)
        _kill(proc)
        kills += 1
        in_flight = 0
        while kills < KILLS:
            proc = _start(broker, redis.url, namespace, src, dst, ckpt)
            runs += 1
            # kill while a batch is being processed, not during Spark's start-up: wait for
            # the run's first transaction (or progress), then a random point after it
            before, t0 = client.store.sink_last_batch(sink_id), time.monotonic()
            while proc.poll() is None and time.monotonic() - t0 < 120:
                if client.store.open_txns() or client.store.sink_last_batch(sink_id) > before:
                    break
                time.sleep(0.05)
            time.sleep(rnd.uniform(0.0, 1.5))
            in_flight += bool(client.store.open_txns())
            if kills == KILLS // 2 and redis_restarts == 0:
                redis.kill()   # SIGKILL while the query runs
                time.sleep(0.5)
                redis.start()  # AOF replay: no acknowledged decision lost
                redis_restarts += 1
                time.sleep(rnd.uniform(1.0, 4.0))
            if proc.poll() is not None:  # finished (or failed on the Redis restart)
                if proc.returncode == 0:
                    break
                continue
            _kill(proc)
            kills += 1
        proc = _start(broker, redis.url, namespace, src, dst, ckpt)  # let it finish
        runs += 1
        out, _ = proc.communicate(timeout=600)
        if "PIPELINE-DONE" not in out:  # e.g. stopped by the Redis restart: run again
            proc = _start(broker, redis.url, namespace, src, dst, ckpt)
            runs += 1
            out, _ = proc.communicate(timeout=600)
        assert "PIPELINE-DONE" in out
        from pulsar_txn.client import read_all

        final = Counter(m.value for m in read_all(client.create_reader(dst), 2000))
        seen = observer.finish()
        import pulsar
        from helpers import raw_entries

        from pulsar_txn.client import quiet_logger

        plain = pulsar.Client(broker.service_url, logger=quiet_logger())
        from pulsar_txn.records import PROP_TXN

        # the writer (".a1." of a retried attempt) is the tag's one field that has dots
        retried = sum(".a1." in m.properties().get(PROP_TXN, "")
                      for m in raw_entries(plain, dst))
        plain.close()
        print(f"\nchaos: {MESSAGES} inputs, {kills} driver kills ({in_flight} with a batch's "
              f"transaction OPEN), {runs} runs, 1 task failure ({retried} rows by retry "
              f"attempts), {redis_restarts} Redis restart(s), "
              f"{time.monotonic() - started:.0f} s; "
              f"output {sum(final.values())} rows, duplicates "
              f"{sum(c - 1 for c in final.values() if c > 1)}, missing "
              f"{sum((expected - final).values())}, extra {sum((final - expected).values())}")
        assert kills >= KILLS >= 1
        assert redis_restarts == 1, "the Redis restart did not happen"
        assert retried > 0, "no task attempt was retried: the executor-side fault did not fire"
        assert final == expected
        assert seen == expected  # the observer never saw an uncommitted or duplicate row
    finally:
        client.close()
        redis.stop()


def test_pipeline_exactly_once_through_executor_kills_broker_and_redis_restarts(
        broker, tmp_path, topic_name):
    """The other faults a running pipeline meets: an executor process SIGKILLed mid-batch
    (a Spark worker's executor JVM, not a failing task), the broker restarted, Redis
    restarted. The query is restarted from its checkpoint whenever it gives up."""
    from spark_helpers import SparkCluster

    from pulsar_txn.client import PulsarTxnClient, read_all
    from pulsar_txn.harness.redis_server import RedisServer

    redis = RedisServer(tmp_path / "redis").start()
    cluster = SparkCluster(tmp_path / "spark").start()
    namespace = "chaos2"
    client = PulsarTxnClient(broker.service_url, redis.url, namespace=namespace, sweeper=False)
    src, dst = topic_name("chaos2-in"), topic_name("chaos2-out")
    rnd = random.Random(int(os.environ.get("PULSAR_TXN_CHAOS_SEED", "473")) + 1)
    expected = _produce(client, src, rnd, MESSAGES // 2)
    observer = Observer(client, dst)
    observer.start()
    ckpt = tmp_path / "ckpt"
    done: Counter = Counter()
    runs, started = 0, time.monotonic()
    plan = ["executor", "broker", "executor", "redis", "executor"]
    try:
        proc = _start(broker, redis.url, namespace, src, dst, ckpt, master=cluster.url)
        runs += 1
        for fault in plan:
            # strike while a batch is in flight: its transaction is OPEN
            t0 = time.monotonic()
            while not client.store.open_txns() and time.monotonic() - t0 < 120:
                if proc.poll() is not None:
                    proc = _start(broker, redis.url, namespace, src, dst, ckpt,
                                  master=cluster.url)
                    runs += 1
                time.sleep(0.05)
            time.sleep(rnd.uniform(0.0, 0.5))
            if fault == "executor":
                done["executor"] += bool(cluster.kill_executor())
            elif fault == "broker":
                broker.restart()
                done["broker"] += 1
            else:
                redis.kill()
                time.sleep(0.5)
                redis.start()
                done["redis"] += 1
        for _ in range(3):  # let it finish; restart it from the checkpoint if it gave up
            out, _ = proc.communicate(timeout=600)
            if "PIPELINE-DONE" in out:
                break
            proc = _start(broker, redis.url, namespace, src, dst, ckpt, master=cluster.url)
            runs += 1
        assert "PIPELINE-DONE" in out
        final = Counter(m.value for m in read_all(client.create_reader(dst), 2000))
        seen = observer.finish()
        print(f"\nchaos: {sum(expected.values())} inputs, {done['executor']} executor kills, "
              f"{done['broker']} broker restart(s), {done['redis']} Redis restart(s), {runs} "
              f"runs, {time.monotonic() - started:.0f} s; output {sum(final.values())} rows, "
              f"duplicates {sum(c - 1 for c in final.values() if c > 1)}, missing "
              f"{sum((expected - final).values())}, extra {sum((final - expected).values())}")
        assert done == Counter(executor=3, broker=1, redis=1), done
        assert final == expected
        assert seen == expected
    finally:
        if proc.poll() is None:
            _kill(proc)
        client.close()
        cluster.stop()
        redis.stop()
