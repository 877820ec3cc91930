"""The embedded broker as our harness runs it (the quick start's broker).

pulsar-lite 0.2 keeps the subscription of every reader ever closed and, at its
``warn`` level, logs a line for each of them on every message it dispatches: a
pipeline that opened a few hundred readers wrote 5.4 GB of log in six minutes, and
formatting those lines became most of the broker's CPU (bench_soak's slowdown).
"""

from __future__ import annotations

import uuid

import pulsar
import pytest

from pulsar_txn.client import quiet_logger
from pulsar_txn.harness.lite import PulsarLite

pytest.importorskip("pulsar_lite")


def test_the_lite_log_does_not_grow_with_every_closed_reader_times_every_message(tmp_path):
    lite = PulsarLite(tmp_path / "lite")
    lite.start()
    client = pulsar.Client(lite.service_url, logger=quiet_logger())
    try:
        topic = f"persistent://public/default/lite-log-{uuid.uuid4().hex[:8]}"
        producer = client.create_producer(topic)
        producer.send(b"first")
        for _ in range(20):  # readers that come and go, as range scans do
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            reader.read_next(10_000)
            reader.close()
        kept = client.create_reader(topic, pulsar.MessageId.earliest)
        for i in range(300):
            producer.send(b"m%d" % i)
        got = 0
        while got < 301:  # every message dispatched (lite redelivers: count them all)
            kept.read_next(10_000)
            got += 1
        log = tmp_path / "lite" / "pulsar-lite.log"
        # 20 closed readers × 300 messages at warn level: ~6,000 lines, ~1 MB
        assert log.stat().st_size < 64_000, log.read_text(errors="replace")[:500]
    finally:
        client.close()
        lite.stop()
