"""Real services for the integration suite: Redis (Valkey) + a Pulsar broker per kind.

``PULSAR_TXN_BROKERS`` (comma list, default ``standalone,lite``) selects the
brokers; every integration test runs once per broker. ``PULSAR_TXN_METASTORE=cluster``
puts the metastore on a 3-primary Redis Cluster (harness.redis_cluster) instead of
one server; tests of one server's own behaviour (restarts, ACLs, TLS) then skip.
Nothing is mocked.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from pulsar_txn.harness.redis_cluster import RedisClusterHarness
from pulsar_txn.harness.redis_server import RedisServer
from pulsar_txn.harness.services import BROKERS, start_broker

ON_CLUSTER = os.environ.get("PULSAR_TXN_METASTORE", "server") == "cluster"


def _kinds() -> list[str]:
    kinds = [k.strip() for k in os.environ.get("PULSAR_TXN_BROKERS", "standalone,lite").split(",")
             if k.strip()]
    bad = [k for k in kinds if k not in BROKERS]
    if bad:
        raise pytest.UsageError(f"PULSAR_TXN_BROKERS: unknown broker(s) {bad}; use {BROKERS}")
    return kinds


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """The metastore's server: one Redis, or a Redis Cluster (``.url`` either way)."""
    if ON_CLUSTER:
        server = RedisClusterHarness(tmp_path_factory.mktemp("redis-cluster")).start()
    else:
        server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def single_redis(redis_server):
    """A test of one Redis server's own behaviour (restart, kill, port)."""
    if ON_CLUSTER:
        pytest.skip("tests one Redis server's own behaviour; the cluster's is "
                    "test_metastore_cluster.py")
    return redis_server


@pytest.fixture(scope="session", params=_kinds())
def broker(request, tmp_path_factory):
    b = start_broker(request.param, Path(tmp_path_factory.mktemp(f"broker-{request.param}")))
    yield b
    b.stop()


@pytest.fixture
def namespace() -> str:
    """A fresh metastore namespace per test: tests never see each other's txns."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def topic_name():
    def make(base: str = "t") -> str:
        return f"persistent://public/default/{base}-{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture
def make_client(request, broker, redis_server, namespace):
    """Clients for the test. In Spark tests they run no sweeper unless asked: the
    queries' drivers must do the background work themselves (DESIGN §3, hole 6)."""
    from pulsar_txn.client import PulsarTxnClient

    made = []
    spark_test = request.node.get_closest_marker("spark") is not None

    def make(**kw):
        kw.setdefault("namespace", namespace)
        # an explicit init: the tests' deployments exist before anything reads them
        # (a client alone creates its namespace only when it writes)
        kw.setdefault("create_namespace", True)
        kw.setdefault("sweeper", not spark_test)
        kw.setdefault("sweep_interval_s", 0.2)
        url = kw.pop("metastore_url", redis_server.url)
        c = PulsarTxnClient(broker.service_url, url, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.close()
        except Exception:
            pass


@pytest.fixture
def client(make_client):
    return make_client()


@pytest.fixture
def plain_pulsar(broker):
    """A plain pulsar-client, as a user of the topics without this layer would have."""
    import pulsar

    from pulsar_txn.client import quiet_logger

    c = pulsar.Client(broker.service_url, logger=quiet_logger())
    yield c
    c.close()


@pytest.fixture(scope="session")
def spark():
    """A real local Spark session (local[2]); the pulsar-txn format is auto-registered."""
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master("local[2]").appName("pulsar-txn-tests")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()
