"""Bad input to the client API is answered in our words (issue 30, Errors): a
ConfigError naming the option or argument as documented, the address redacted,
never a raw ValueError/TypeError from pulsar-client, redis-py or urllib and never
a secret. No broker is needed: each is refused before anything connects."""

from __future__ import annotations

import subprocess
import time
from contextlib import contextmanager

import pytest

from pulsar_txn.client import PulsarTxnClient
from pulsar_txn.errors import ConfigError

SECRET = "S3CR3T-pw-7d1e"
PULSAR = "pulsar://127.0.0.1:6650"


def _refused(fn, *named: str) -> str:
    """``fn`` raises a ConfigError naming each of ``named``, with no secret anywhere."""
    with pytest.raises(ConfigError) as err:
        made = fn()
        made.close()
    text = f"{err.value}\n{err.value!r}\n{err.value.__cause__!r}\n{err.value.__context__!r}"
    for name in named:
        assert name in str(err.value), str(err.value)
    assert SECRET not in text, text
    return str(err.value)


@pytest.mark.parametrize("url", ["pulsar://host:notaport", "pulsar://host:6650,other:x",
                                 "pulsar+ssl://host:99999", "pulsar://host:"])
def test_a_service_url_with_a_bad_port_names_service_url(url):
    msg = _refused(lambda: PulsarTxnClient(url, "memory://", sweeper=False), "'service.url'")
    assert "port" in msg


def test_a_metastore_url_with_a_bad_port_names_metastore_url_redacted():
    url = f"redis://app:{SECRET}@host:abc/0"
    msg = _refused(lambda: PulsarTxnClient(PULSAR, url, sweeper=False), "metastore.url")
    assert "port" in msg and "app:***@host:abc" in msg


def test_an_unknown_keyword_is_named_with_the_valid_ones():
    msg = _refused(lambda: PulsarTxnClient(PULSAR, "memory://", sweeper=False,
                                           operation_timout_seconds=5),
                   "operation_timout_seconds", "operation_timeout_seconds", "namespace")
    assert "Client.__init__" not in msg


@pytest.mark.parametrize("timeout", ["30s", 1.5, True, None, -1])
def test_a_transaction_timeout_that_is_not_a_positive_int_names_timeout_ms(timeout):
    with PulsarTxnClient(PULSAR, "memory://", sweeper=False) as client:
        _refused(lambda: client.new_transaction(timeout_ms=timeout), "timeout_ms")
        with pytest.raises(ConfigError, match="timeout_ms"):
            with client.transaction(timeout_ms=timeout):
                pass


@pytest.mark.parametrize("metastore", ["memory://", "redis://127.0.0.1:1/0"])
def test_a_namespace_with_braces_names_metastore_namespace(metastore):
    _refused(lambda: PulsarTxnClient(PULSAR, metastore, sweeper=False, namespace="ns{x}"),
             "metastore.namespace", "ns{x}")
    _refused(lambda: PulsarTxnClient(PULSAR, f"{metastore}?namespace=a}}b", sweeper=False),
             "metastore.namespace")


def test_a_typoed_metastore_url_option_is_named_with_the_valid_ones():
    url = f"redis://:{SECRET}@127.0.0.1:1/0?namespce=x"
    msg = _refused(lambda: PulsarTxnClient(PULSAR, url, sweeper=False),
                   "metastore.url", "namespce", "namespace", "durability")
    assert "AbstractConnection" not in msg


def test_a_unix_url_without_a_host_is_the_same_socket_as_with_localhost():
    from pulsar_txn.metastore.redis_url import parse_store_url

    for url in ("unix:///run/redis.sock?namespace=n", "unix://localhost/run/redis.sock?namespace=n"):
        cfg = parse_store_url(url, "ptxn", None)
        assert cfg.namespace == "n"
        import redis
        pool = redis.ConnectionPool.from_url(cfg.connect)
        assert pool.connection_kwargs["path"] == "/run/redis.sock", (url, cfg.connect)


@pytest.mark.parametrize("url,refused", [
    ("redis://127.0.0.1:1/0?ssl_ca_certs=/ca.pem", "ssl_ca_certs"),   # TLS options on plain
    ("redis://127.0.0.1:1/0?timeout=3", "timeout"),                   # a blocking pool's
    ("unix:///run/r.sock?socket_keepalive=true", "socket_keepalive"),  # TCP only
])
def test_an_option_redis_py_would_refuse_for_the_scheme_is_named(url, refused):
    from pulsar_txn.metastore.redis_url import parse_store_url

    _refused(lambda: parse_store_url(url, "ptxn", None), "metastore.url", refused)


def test_options_redis_py_takes_pass_through():
    from pulsar_txn.metastore.redis_url import parse_store_url

    cfg = parse_store_url("rediss://h:1/0?ssl_ca_certs=/ca.pem&socket_timeout=3&namespace=n"
                          "&max_connections=4&client_name=x", "ptxn", None)
    assert cfg.namespace == "n" and "ssl_ca_certs" in cfg.connect


needs_redis = pytest.mark.skipif(not __import__("shutil").which("redis-server"),
                                 reason="no redis-server")


@contextmanager
def _redis_on_socket(tmp_path, *args: str):
    """A real redis-server (AOF, fsync always) listening on a unix socket only."""
    sock = tmp_path / "r.sock"
    server = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(sock),
                               "--appendonly", "yes", "--appendfsync", "always",
                               "--dir", str(tmp_path), *args], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        yield sock
    finally:
        server.terminate()
        server.wait(10)


@needs_redis
@pytest.mark.parametrize("userinfo,said", [(f":{SECRET}@", "refused the credentials"),
                                           (f"bob:{SECRET}@", "refused the credentials"),
                                           ("", "requires a password")])
def test_a_wrong_or_missing_redis_password_is_a_config_error_naming_metastore_url(
        tmp_path, userinfo, said):
    from pulsar_txn.metastore import open_store

    with _redis_on_socket(tmp_path, "--requirepass", "right-one") as sock:
        url = f"unix://{userinfo}localhost{sock}"
        msg = _refused(lambda: open_store(url), "'metastore.url'", said)
        assert "HELLO" not in msg and "unreachable" not in msg
        open_store(f"unix://:right-one@localhost{sock}").close()


@needs_redis
def test_a_store_opens_over_a_unix_socket_written_with_or_without_localhost(tmp_path):
    from pulsar_txn.metastore import open_store

    with _redis_on_socket(tmp_path) as sock:
        deployments = set()
        for url in (f"unix://{sock}", f"unix://localhost{sock}"):
            store = open_store(url + "?namespace=n")
            deployments.add(store.deployment)
            store.close()
        assert len(deployments) == 1  # one server, one namespace
