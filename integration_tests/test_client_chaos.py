"""Chaos for the client API: a consume-transform-produce loop whose process is SIGKILLed
right after its commits, over batched input, through a broker restart and a Redis
restart, is exactly once: every input's output is visible once, none is missing, and
every input message ends acknowledged on the subscription's cursor (issue 26).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pulsar
import pytest

pytestmark = pytest.mark.slow

WORKER = Path(__file__).parent / "client_jobs" / "ctp_worker.py"
MESSAGES = int(os.environ.get("PULSAR_TXN_CLIENT_CHAOS_MESSAGES", "3000"))


def _write_batched(service_url: str, topic: str, n: int) -> Counter:
    from pulsar_txn.client import quiet_logger

    c = pulsar.Client(service_url, logger=quiet_logger())
    try:
        p = c.create_producer(topic, batching_enabled=True, batching_max_messages=100,
                              batching_max_publish_delay_ms=50, block_if_queue_full=True)
        for i in range(n):
            p.send_async(b"m%d" % i, None, partition_key=f"k{i % 17}")
        p.flush()
        p.close()
    finally:
        c.close()
    return Counter(b"out-m%d" % i for i in range(n))


def test_client_api_pipeline_exactly_once_through_kills_after_commit_and_restarts(
        broker, tmp_path, topic_name):
    from pulsar_txn.client import PulsarTxnClient, quiet_logger, read_all
    from pulsar_txn.harness.redis_server import RedisServer

    redis = RedisServer(tmp_path / "redis").start()  # our own: this test restarts it
    namespace = "cchaos"
    src, dst, sub = topic_name("cchaos-in"), topic_name("cchaos-out"), "ctp"
    seed = int(os.environ.get("PULSAR_TXN_CHAOS_SEED", "473"))
    rnd = random.Random(seed)
    client = PulsarTxnClient(broker.service_url, redis.url, namespace=namespace)
    client.new_transaction().abort()  # the namespace, as the producer's side would
    expected = _write_batched(broker.service_url, src, MESSAGES)
    faults = {"kill after commit": 0, "broker restart": 0, "redis restart": 0,
              "worker failed": 0}
    plan = {3: "broker restart", 6: "redis restart"}
    runs, done, started = 0, False, time.monotonic()
    env = dict(os.environ)
    try:
        while not done:
            assert runs < 80 and time.monotonic() - started < 600, (runs, faults)
            kill_after = 0 if runs >= 14 else rnd.randint(1, 4)
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), "--service-url", broker.service_url,
                 "--metastore-url", redis.url, "--namespace", namespace, "--src", src,
                 "--dst", dst, "--sub", sub, "--kill-after", str(kill_after)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
            runs += 1
            fault = plan.pop(runs, None)
            if fault is not None and (fault != "broker restart" or broker.kind != "lite"):
                assert proc.stdout.readline().startswith("COMMIT"), "the worker made no progress"
                time.sleep(rnd.uniform(0.0, 0.3))
                if fault == "broker restart":
                    broker.restart()
                else:
                    redis.kill()
                    time.sleep(0.3)
                    redis.start()
                faults[fault] += 1
            out, _ = proc.communicate(timeout=300)
            if proc.returncode == -9:
                faults["kill after commit"] += 1
            elif proc.returncode != 0:
                faults["worker failed"] += 1
                time.sleep(1.0)  # its open txn times out; the sweeper of the next aborts it
            done = "CTP-DONE" in out
        final = Counter(m.value for m in read_all(client.create_reader(dst), 3000))
        duplicates = sum(c - 1 for c in final.values() if c > 1)
        missing = sum((expected - final).values())
        extra = sum((final - expected).values())
        plain = pulsar.Client(broker.service_url, logger=quiet_logger())
        try:
            cursor = plain.subscribe(src, sub, consumer_type=pulsar.ConsumerType.Failover)
            left = []
            try:
                while True:
                    left.append(cursor.receive(3000).data())
            except pulsar.Timeout:
                pass
            cursor.close()
        finally:
            plain.close()
        print(f"\nclient chaos (seed {seed}, {broker.kind}): {MESSAGES} batched inputs, "
              f"{runs} worker runs, faults {faults}, {time.monotonic() - started:.0f} s; "
              f"output {sum(final.values())}, duplicates {duplicates}, missing {missing}, "
              f"extra {extra}; left on the subscription {len(left)}")
        assert faults["kill after commit"] >= 10, faults
        assert faults["redis restart"] == 1, faults
        assert duplicates == 0 and missing == 0 and extra == 0
        assert left == [], "input messages not acknowledged on the subscription's cursor"
    finally:
        client.close()
        redis.stop()
