"""The broker plugin on a secured metastore (issue 28: "ACL/TLS URLs"): Redis over TLS
only, its certificate from the harness's own CA, the default user off. The plugin gets
the library's URL form (``rediss://user:password@host/0?ssl_ca_certs=ca.pem``) for an
ACL user holding only the commands docs/broker-plugin.md lists, so the docs' list is
checked too; its password comes from ``ptxn.metastorePasswordFile`` and never reaches
the broker's log.

Fails with the plugin removed (``PULSAR_TXN_BROKER_PLUGIN=off``): a plain consumer then
sees the OPEN and aborted transactions' entries."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pulsar
import pytest
import redis

from pulsar_txn.client import PulsarTxnClient, quiet_logger
from pulsar_txn.harness import broker_plugin
from pulsar_txn.harness.redis_server import RedisServer
from pulsar_txn.harness.services import start_broker
from pulsar_txn.metastore import RedisMetadataStore

REPO = Path(__file__).resolve().parents[1]
PLUGIN_OFF = os.environ.get("PULSAR_TXN_BROKER_PLUGIN", "on") == "off"
NS = f"plugint{uuid.uuid4().hex[:8]}"
SECRET = f"plugin-S3CR3T-{uuid.uuid4().hex[:6]}"
# what docs/broker-plugin.md tells an operator to grant the plugin's user
DOCUMENTED = ["+info", "+hgetall", "+zrange", "+zscore", "+zrevrangebyscore", "+sismember",
              "+xread", "+xrevrange", "+config|get"]


@pytest.fixture(scope="module")
def secured_redis(tmp_path_factory):
    server = RedisServer(Path(tmp_path_factory.mktemp("plugin-tls-redis")), user="writer",
                         password=f"w-{uuid.uuid4().hex[:8]}", tls=True).start()
    r = redis.Redis.from_url(server.url)
    r.acl_setuser("plugin", enabled=True, passwords=[f"+{SECRET}"], keys=["*"],
                  channels=["*"], commands=DOCUMENTED)
    r.close()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tls_broker(secured_redis, tmp_path_factory):
    if "standalone" not in os.environ.get("PULSAR_TXN_BROKERS", "standalone,lite"):
        pytest.skip("the plugin runs in an Apache Pulsar broker (pulsar-lite cannot host it)")
    RedisMetadataStore(f"{secured_redis.url}&namespace={NS}").close()  # the operator's init
    # the password in a file, not the URL: a standalone's embedded bookie logs every
    # setting of standalone.conf at start, ptxn.metastoreUrl included
    workdir = Path(tmp_path_factory.mktemp("plugin-tls-broker"))
    secret_file = workdir / "metastore-password"
    secret_file.write_text(SECRET + "\n")
    plugin_url = (f"rediss://plugin@127.0.0.1:{secured_redis.port}/0"
                  f"?ssl_ca_certs={secured_redis.ca_file}")
    plugin = None if PLUGIN_OFF else broker_plugin.Governing(
        plugin_url, NS, REPO / "broker-plugin", password_file=secret_file)
    b = start_broker("standalone", workdir, plugin=plugin)
    yield b, workdir
    b.stop()


def test_a_plugin_on_a_tls_metastore_with_a_least_privilege_acl_user_gates_and_filters(
        tls_broker, secured_redis):
    broker, workdir = tls_broker
    writer = PulsarTxnClient(broker.service_url, secured_redis.url, namespace=NS,
                             sweeper=True, sweep_interval_s=0.2)
    plain = pulsar.Client(broker.service_url, logger=quiet_logger())
    topic = f"persistent://public/default/plugin-tls-{uuid.uuid4().hex[:10]}"
    try:
        p = writer.create_producer(topic)
        held = writer.new_transaction(timeout_ms=120_000)
        p.send(b"held", txn=held)
        aborted = writer.new_transaction()
        p.send(b"aborted", txn=aborted)
        aborted.abort()
        p.send(b"after")
        consumer = plain.subscribe(topic, "plain",
                                   initial_position=pulsar.InitialPosition.Earliest)
        got = []
        try:
            try:
                got.append(consumer.receive(2000).data())
            except pulsar.Timeout:
                pass
            assert got == [], "an OPEN transaction's entry, or what follows it, leaked"
            held.commit()
            while True:
                try:
                    m = consumer.receive(20_000 if len(got) < 2 else 1000)
                except pulsar.Timeout:
                    break
                consumer.acknowledge(m)
                got.append(m.data())
        finally:
            consumer.close()
        assert got == [b"held", b"after"], got
    finally:
        plain.close()
        writer.close()
    logs = "".join(f.read_text(errors="replace") for f in workdir.rglob("*.log"))
    assert SECRET not in logs
