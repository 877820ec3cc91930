"""The Spark source's driver asks each segment's last entry at every trigger: through
one kept probe subscription per segment, not a new one per ask (issue 13 item 5: a
broker that keeps state for every subscription ever made, pulsar-lite, slowed down
over a soak). The kept probe is acknowledged up to the last entry it saw, so it pins
no backlog older than the latest trigger, and the query's stop removes it.

Subscriptions created are counted by a proxy around the planner's real pulsar client
(pulsar-lite cannot list subscriptions); on the reference broker the admin API lists
them and their backlog too.
"""

from __future__ import annotations

import time
import urllib.parse

import pulsar
import pytest

from pulsar_txn.admin import admin_request
from pulsar_txn.broker_io import wait_probe_cleanup
from pulsar_txn.metastore import open_store
from pulsar_txn.records import Position
from pulsar_txn.spark.options import SourceOptions
from pulsar_txn.spark.planning import Planner

PROBE = "__ptxn-probe-"


class _CountingClient:
    """The real pulsar client; counts the probe subscriptions it is asked to subscribe."""

    def __init__(self, real) -> None:
        self._real = real
        self.probe_subscribes: list[tuple[str, str]] = []

    def subscribe(self, topic, subscription_name, *args, **kwargs):
        if subscription_name.startswith(PROBE):
            self.probe_subscribes.append((topic, subscription_name))
        return self._real.subscribe(topic, subscription_name, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._real, name)


@pytest.fixture
def counted_planner(monkeypatch, broker, redis_server, namespace):
    """A Planner whose pulsar client (made in its __init__) is a counting proxy."""
    made: list[_CountingClient] = []
    real_client = pulsar.Client

    def client(*args, **kwargs):
        made.append(_CountingClient(real_client(*args, **kwargs)))
        return made[-1]

    def make(topic: str) -> tuple[Planner, _CountingClient]:
        open_store(redis_server.url, namespace).close()  # a writer's init: sources never do
        with monkeypatch.context() as m:
            m.setattr(pulsar, "Client", client)
            planner = Planner(SourceOptions.from_options({
                "service.url": broker.service_url, "metastore.url": redis_server.url,
                "metastore.namespace": namespace, "topic": topic}))
        return planner, made[-1]

    return make


def _subscriptions(broker, topic: str) -> list[str]:
    local = urllib.parse.quote(topic.rsplit("/", 1)[1])
    return admin_request(broker.admin_url, "GET",
                         f"/admin/v2/persistent/public/default/{local}/subscriptions")


def _backlog(broker, topic: str, name: str) -> int:
    local = urllib.parse.quote(topic.rsplit("/", 1)[1])
    stats = admin_request(broker.admin_url, "GET",
                          f"/admin/v2/persistent/public/default/{local}/stats")
    return stats["subscriptions"][name]["msgBacklog"]


def _eventually(fn, want, timeout_s: float = 10.0):
    """Acks are grouped by the client (sent within ~100 ms): poll for the broker's view."""
    deadline = time.monotonic() + timeout_s
    got = fn()
    while got != want and time.monotonic() < deadline:
        time.sleep(0.1)
        got = fn()
    return got


def test_planning_creates_no_subscription_per_trigger(counted_planner, plain_pulsar, broker,
                                                       topic_name):
    topic = topic_name("probed")
    producer = plain_pulsar.create_producer(topic, batching_enabled=False)
    planner, counting = counted_planner(topic)
    answers = []
    try:
        for _ in range(5):  # an empty segment (pulsar-lite answers it with an error)
            assert planner.last_entry(topic) is None
        for ask in range(45):
            if ask % 9 == 0:  # the last entry moves forward between triggers
                sent = producer.send(f"m{ask}".encode())
                want = Position(sent.ledger_id(), sent.entry_id())
            got = planner.last_entry(topic)
            assert got == want, f"ask {ask}: {got} != the last entry sent {want}"
            answers.append(got)
        assert len(set(answers)) == 5 and answers == sorted(answers)
        names = {name for _, name in counting.probe_subscribes}
        assert len(counting.probe_subscribes) == 1, (
            f"{len(counting.probe_subscribes)} probe subscriptions created for 50 asks of "
            f"one segment ({len(names)} names); one kept probe is enough")
        if getattr(broker, "admin_url", ""):
            assert [s for s in _subscriptions(broker, topic) if s.startswith(PROBE)] == \
                list(names)
    finally:
        planner.close()
    if not getattr(broker, "admin_url", ""):
        pytest.skip(f"asks counted; the {broker.kind} broker cannot list subscriptions, so "
                    "their removal at close is checked on the reference broker only")
    assert wait_probe_cleanup(30)
    left = [s for s in _subscriptions(broker, topic) if s.startswith(PROBE)]
    assert left == [], f"probe subscriptions left after the planner closed: {left}"


def test_kept_probe_pins_no_backlog_older_than_last_probe(counted_planner, plain_pulsar,
                                                           broker, topic_name):
    if not getattr(broker, "admin_url", ""):
        pytest.skip(f"the {broker.kind} broker has no admin API to read a subscription's "
                    "backlog")
    topic = topic_name("backlog")
    producer = plain_pulsar.create_producer(topic, batching_enabled=False)
    planner, _ = counted_planner(topic)
    try:
        producer.send(b"first")
        assert planner.last_entry(topic) is not None
        probes = [s for s in _subscriptions(broker, topic) if s.startswith(PROBE)]
        assert len(probes) == 1, f"no single kept probe subscription: {probes}"
        name = probes[0]
        for i in range(3):
            producer.send(f"a{i}".encode())
        last = planner.last_entry(topic)
        assert _eventually(lambda: _backlog(broker, topic, name), 0) == 0
        # what is written after the latest ask is retained until the next ask
        for i in range(2):
            sent = producer.send(f"b{i}".encode())
        assert _eventually(lambda: _backlog(broker, topic, name), 2) == 2
        assert planner.last_entry(topic) == Position(sent.ledger_id(), sent.entry_id()) > last
        assert _eventually(lambda: _backlog(broker, topic, name), 0) == 0
    finally:
        planner.close()


@pytest.mark.spark
def test_stopping_a_query_removes_its_probe_subscriptions(spark, client, broker, redis_server,
                                                          namespace, topic_name):
    """Spark stops a query by terminating the Python process of its stream reader; the
    reader's stop() must still run there, or the kept probes outlive every query."""
    from spark_helpers import source_df

    if not getattr(broker, "admin_url", ""):
        pytest.skip(f"the {broker.kind} broker cannot list subscriptions")
    topic = topic_name("stopped")
    client.create_producer(topic).send(b"x")
    q = (source_df(spark, broker, redis_server, namespace, topic=topic,
                   startingOffsets="earliest")
         .writeStream.format("memory").queryName(f"probes_{namespace}")
         .trigger(processingTime="200 milliseconds").start())
    try:
        q.processAllAvailable()
        probes = [s for s in _subscriptions(broker, topic) if s.startswith(PROBE)]
        assert len(probes) == 1, f"one kept probe while the query runs: {probes}"
    finally:
        q.stop()
    left = _eventually(lambda: [s for s in _subscriptions(broker, topic) if s.startswith(PROBE)],
                       [], timeout_s=15)
    assert left == [], f"probe subscriptions left after the query stopped: {left}"
