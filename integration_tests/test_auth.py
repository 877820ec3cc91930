"""A secured cluster: Apache Pulsar standalone with token and TLS client-certificate
authentication and TLS listeners (a broker of its own, started here). The client API,
the Spark source and sink, and the CLI connect with a token or a certificate, over
pulsar:// or pulsar+ssl:// (and https:// for the admin API); without credentials they
fail naming the option; the token never appears in an error, a log line of ours or
Spark's progress."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import subprocess
import sys
import uuid

import pytest

from pulsar_txn.errors import BrokerUnavailable, ConfigError

needs_reference_broker = pytest.mark.skipif(
    "standalone" not in os.environ.get("PULSAR_TXN_BROKERS", "standalone,lite"),
    reason="token authentication needs the reference broker (pulsar-lite has none)")


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def _jwt(secret: bytes, subject: str) -> str:
    """An HS256 token as Pulsar's AuthenticationProviderToken checks it."""
    head = _b64(json.dumps({"alg": "HS256"}).encode())
    body = _b64(json.dumps({"sub": subject}).encode())
    sig = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(sig)}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """Token and TLS client-certificate authentication, plain and TLS listeners
    (a CA, server and client certificates made by the harness)."""
    from pulsar_txn.harness.standalone import PulsarStandalone

    secret = secrets.token_bytes(32)
    admin, user = _jwt(secret, "admin"), _jwt(secret, "app")
    conf = "\n".join([
        "authenticationEnabled=true",
        "authenticationProviders="
        "org.apache.pulsar.broker.authentication.AuthenticationProviderToken,"
        "org.apache.pulsar.broker.authentication.AuthenticationProviderTls",
        f"tokenSecretKey=data:;base64,{base64.b64encode(secret).decode()}",
        "authorizationEnabled=false",
        "superUserRoles=admin",
        "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken",
        f"brokerClientAuthenticationParameters=token:{admin}",
    ])
    broker = PulsarStandalone(tmp_path_factory.mktemp("secured"), extra_conf=conf,
                              client_token=admin, tls=True)
    broker.start()
    yield broker, user
    broker.stop()


@needs_reference_broker
def test_client_api_connects_with_a_token_and_is_refused_without(secured, redis_server,
                                                                  namespace):
    import pulsar

    from pulsar_txn.client import PulsarTxnClient, read_all

    broker, token = secured
    client = PulsarTxnClient(broker.service_url, redis_server.url, namespace=namespace,
                             sweeper=False, authentication=pulsar.AuthenticationToken(token))
    try:
        t = f"persistent://public/default/auth-{uuid.uuid4().hex[:8]}"
        with client.transaction() as txn:
            client.create_producer(t).send(b"secret-ok", txn=txn)
        assert [m.value for m in read_all(client.create_reader(t), 500)] == [b"secret-ok"]
    finally:
        client.close()
    anonymous = PulsarTxnClient(broker.service_url, redis_server.url, namespace=namespace,
                                sweeper=False, operation_timeout_seconds=5)
    try:
        with pytest.raises(Exception) as err:
            anonymous.create_producer("persistent://public/default/auth-none")
        assert token not in str(err.value)
    finally:
        anonymous.close()


@needs_reference_broker
@pytest.mark.spark
def test_spark_source_and_sink_authenticate_with_the_pulsar_spark_options(
        secured, spark, redis_server, namespace, tmp_path):
    broker, token = secured
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    common = {"service.url": broker.service_url, "metastore.url": redis_server.url,
              "metastore.namespace": namespace,
              "pulsar.client.authPluginClassName":
                  "org.apache.pulsar.client.impl.auth.AuthenticationToken",
              "pulsar.client.authParams": f"file://{token_file}"}
    t = f"persistent://public/default/auth-spark-{uuid.uuid4().hex[:8]}"
    rows = [(f"k{i}", f"v{i}") for i in range(10)]
    (spark.createDataFrame(rows, "key string, value string").write.format("pulsar-txn")
     .options(**common).option("topic", t).mode("append").save())
    got = (spark.read.format("pulsar-txn").options(**common).option("topic", t).load()
           .select("value").collect())
    assert sorted(bytes(r.value).decode() for r in got) == [f"v{i}" for i in range(10)]
    # streaming: the progress JSON carries no secret
    inline = {**common, "pulsar.client.authParams": f"token:{token}"}
    q = (spark.readStream.format("pulsar-txn").options(**inline).option("topic", t)
         .option("startingOffsets", "earliest").load().writeStream.format("noop")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
         .start())
    try:
        q.awaitTermination(120)
    finally:
        q.stop()
    assert q.exception() is None
    assert sum(p["numInputRows"] for p in q.recentProgress) == 10
    assert all(token not in json.dumps(p, default=str) for p in q.recentProgress)
    # a wrong plugin name is refused naming the option, without the secret
    with pytest.raises(Exception) as err:
        (spark.read.format("pulsar-txn").options(**inline).option("topic", t)
         .option("pulsar.client.authPluginClassName", "kerberos").load().collect())
    assert "pulsar.client.authPluginClassName" in str(err.value)
    assert token not in str(err.value)


def test_authentication_options_are_checked_without_showing_the_secret():
    from pulsar_txn.connection import authentication, bearer_token

    with pytest.raises(ConfigError, match="authPluginClassName"):
        authentication(None, "token:abc")
    with pytest.raises(ConfigError) as err:
        authentication("basic", "token:s3cr3t")
    assert "s3cr3t" not in str(err.value)
    with pytest.raises(ConfigError, match="tlsCertFile"):
        authentication("tls", "garbage")
    assert bearer_token("token", "token:abc") == "abc"
    os.environ["PTXN_TEST_TOKEN"] = "from-env"
    assert bearer_token("org.apache.pulsar.client.impl.auth.AuthenticationToken",
                        "env:PTXN_TEST_TOKEN") == "from-env"
    assert isinstance(BrokerUnavailable("x"), ConnectionError)


@needs_reference_broker
def test_cli_connects_with_a_token_from_the_environment(secured, redis_server, namespace):
    broker, token = secured
    env = {**os.environ, "PULSAR_TXN_AUTH_PLUGIN": "token",
           "PULSAR_TXN_AUTH_PARAMS": f"token:{token}"}
    name = f"public/default/auth-cli-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([sys.executable, "-m", "pulsar_txn.cli", "topic", "create",
                           f"topic://{name}", "--segments", "2", "--service-url",
                           broker.service_url, "--metastore", redis_server.url,
                           "--namespace", namespace], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert token not in done.stdout + done.stderr


def test_metastore_over_tls_with_an_acl_user(broker, tmp_path, topic_name):
    """rediss:// with a CA file and an ACL user (the default user disabled): the client
    works; a wrong password or a plain connection fails naming 'metastore.url' and
    never showing the password."""
    import shutil

    from pulsar_txn.client import PulsarTxnClient, read_all
    from pulsar_txn.errors import PulsarTxnError
    from pulsar_txn.harness.redis_server import RedisServer, tls_server_binary

    if tls_server_binary() is None or shutil.which("openssl") is None:
        pytest.skip("no Redis server built with TLS here (apt-get install redis-server; "
                    ".ci/run installs it)")
    server = RedisServer(tmp_path / "redis", user="app", password="pw-0f-the-app",
                         tls=True).start()
    try:
        assert server.url.startswith("rediss://app:")
        client = PulsarTxnClient(broker.service_url, server.url, namespace="tls",
                                 sweeper=False)
        try:
            t = topic_name()
            with client.transaction() as txn:
                client.create_producer(t).send(b"over-tls", txn=txn)
            assert [m.value for m in read_all(client.create_reader(t), 500)] == [b"over-tls"]
        finally:
            client.close()
        for url in (server.url.replace("pw-0f-the-app", "wrong-pw-123"),
                    server.url.replace("rediss://", "redis://").split("?")[0]):
            with pytest.raises(PulsarTxnError) as err:
                PulsarTxnClient(broker.service_url, url, namespace="tls", sweeper=False)
            msg = str(err.value)
            assert "metastore.url" in msg
            assert "pw-0f-the-app" not in msg and "wrong-pw-123" not in msg
    finally:
        server.stop()


@needs_reference_broker
def test_admin_calls_carry_the_token(secured, redis_server, namespace):
    """The REST admin API of a secured broker needs the token too: sealing a segment
    (split) terminates its backing topic through it."""
    import pulsar

    from pulsar_txn.admin import AdminError, admin_request
    from pulsar_txn.client import PulsarTxnClient

    broker, token = secured
    with pytest.raises(AdminError) as err:  # without the token: refused
        admin_request(broker.admin_url, "GET", "/admin/v2/clusters")
    assert err.value.status == 401
    client = PulsarTxnClient(broker.service_url, redis_server.url, namespace=namespace,
                             sweeper=False, authentication=pulsar.AuthenticationToken(token),
                             admin_url=broker.admin_url, admin_token=token)
    try:
        name = f"topic://public/default/auth-seal-{uuid.uuid4().hex[:8]}"
        client.scalable.create(name, segments=2)
        client.create_producer(name).send(b"x", key="k")
        client.scalable.split(name, 0)
        sealed = [s for s in client.scalable.describe(name)["segments"] if s["id"] == 0][0]
        assert sealed["state"] != "ACTIVE"
        assert sealed.get("end") not in (None, "")
    finally:
        client.close()


@needs_reference_broker
def test_client_api_over_tls_checks_the_broker_certificate(secured, redis_server, namespace,
                                                            caplog):
    """pulsar+ssl:// and https:// with the CA, hostname verification on: transactions,
    reads and a seal (REST admin over https, with the token) work; without the CA the
    broker is refused. The token shows up in no error and no log line."""
    import logging

    import pulsar

    from pulsar_txn.client import PulsarTxnClient, read_all

    caplog.set_level(logging.DEBUG)
    broker, token = secured
    tls = {"tls_trust_certs_file_path": str(broker.ca.ca_file), "tls_validate_hostname": True}
    client = PulsarTxnClient(broker.service_url_tls, redis_server.url, namespace=namespace,
                             sweeper=False, authentication=pulsar.AuthenticationToken(token),
                             admin_url=broker.admin_url_tls, admin_token=token, **tls)
    try:
        t = f"persistent://public/default/tls-{uuid.uuid4().hex[:8]}"
        with client.transaction() as txn:
            client.create_producer(t).send(b"over-tls", txn=txn)
        assert [m.value for m in read_all(client.create_reader(t), 500)] == [b"over-tls"]
        name = f"topic://public/default/tls-seal-{uuid.uuid4().hex[:8]}"
        client.scalable.create(name, segments=2)
        client.create_producer(name).send(b"x", key="k")
        client.scalable.split(name, 0)  # terminates segment 0 through https://
        sealed = [s for s in client.scalable.describe(name)["segments"] if s["id"] == 0][0]
        assert sealed["state"] != "ACTIVE" and sealed.get("end") not in (None, "")
    finally:
        client.close()
    untrusting = PulsarTxnClient(broker.service_url_tls, redis_server.url, namespace=namespace,
                                 sweeper=False, authentication=pulsar.AuthenticationToken(token),
                                 operation_timeout_seconds=5)
    try:
        with pytest.raises(Exception) as err:
            untrusting.create_producer("persistent://public/default/tls-untrusted")
        assert token not in str(err.value)
    finally:
        untrusting.close()
    assert token not in caplog.text


@needs_reference_broker
@pytest.mark.spark
def test_spark_over_tls_with_a_client_certificate(secured, spark, redis_server, namespace):
    """The Java client's option names (pulsar-spark's), TLS client-certificate
    authentication for both the binary protocol and the REST admin API (the
    source lists topics for topicsPattern through https://)."""
    broker, _ = secured
    ca = broker.ca
    common = {"service.url": broker.service_url_tls, "metastore.url": redis_server.url,
              "metastore.namespace": namespace,
              "pulsar.client.tlsTrustCertsFilePath": str(ca.ca_file),
              "pulsar.client.tlsHostnameVerificationEnable": "true",
              "pulsar.client.authPluginClassName":
                  "org.apache.pulsar.client.impl.auth.AuthenticationTls",
              "pulsar.client.authParams":
                  f"tlsCertFile:{ca.client_cert},tlsKeyFile:{ca.client_key}"}
    stem = f"tls-spark-{uuid.uuid4().hex[:8]}"
    t = f"persistent://public/default/{stem}"
    rows = [(f"k{i}", f"v{i}") for i in range(10)]
    (spark.createDataFrame(rows, "key string, value string").write.format("pulsar-txn")
     .options(**common).option("topic", t).mode("append").save())
    got = (spark.read.format("pulsar-txn").options(**common)
           .option("topicsPattern", f"persistent://public/default/{stem}.*")
           .option("admin.url", broker.admin_url_tls).load().select("value").collect())
    assert sorted(bytes(r.value).decode() for r in got) == [f"v{i}" for i in range(10)]


@needs_reference_broker
def test_metrics_serve_probes_a_secured_broker_for_the_gate_lag(secured, redis_server,
                                                                  namespace):
    """`pulsar-txn metrics serve` takes the same credentials as the other commands (here
    from the environment): the per-segment gate lag needs the broker's last entry."""
    import socket
    import time
    import urllib.request

    import pulsar

    from pulsar_txn.client import PulsarTxnClient

    broker, token = secured
    client = PulsarTxnClient(broker.service_url, redis_server.url, namespace=namespace,
                             sweeper=False, authentication=pulsar.AuthenticationToken(token))
    t = f"persistent://public/default/auth-metrics-{uuid.uuid4().hex[:8]}"
    try:
        producer = client.create_producer(t)
        held = client.new_transaction(timeout_ms=120_000)
        producer.send(b"open", txn=held)
        producer.send(b"after")  # held back from readers by the OPEN transaction
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "PULSAR_TXN_AUTH_PLUGIN": "token",
               "PULSAR_TXN_AUTH_PARAMS": f"token:{token}"}
        proc = subprocess.Popen([sys.executable, "-m", "pulsar_txn.cli", "metrics", "serve",
                                 "--port", str(port), "--addr", "127.0.0.1",
                                 "--metastore", redis_server.url, "--namespace", namespace,
                                 "--service-url", broker.service_url],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env)
        try:
            assert "serving Prometheus metrics" in proc.stdout.readline()
            body = ""
            for _ in range(20):  # the first scrape may race the client's connect
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                              timeout=30).read().decode()
                if "ptxn_segment_gate_lag_entries{" in body:
                    break
                time.sleep(0.5)
            lag = [line for line in body.splitlines()
                   if line.startswith("ptxn_segment_gate_lag_entries{")]
            assert lag and float(lag[0].rsplit(" ", 1)[1]) >= 1, body[-1500:]
            assert token not in body
        finally:
            proc.terminate()
            out = proc.communicate(timeout=10)[0]
        assert token not in out
        held.abort()
    finally:
        client.close()
