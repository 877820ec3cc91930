"""redis+cluster:// URLs: seeds, credentials and options as for redis://, and errors
that name the option without the password."""

from __future__ import annotations

import pytest

from pulsar_txn.errors import ConfigError
from pulsar_txn.metastore import redis_url


def _captured(monkeypatch) -> dict:
    got: dict = {}
    monkeypatch.setattr(redis_url, "RedisCluster", lambda **kw: got.update(kw) or got)
    return got


def test_seeds_and_percent_encoded_credentials_reach_the_cluster_client(monkeypatch):
    got = _captured(monkeypatch)
    redis_url.cluster_client("rediss+cluster://app:p%40ss%3Aw@10.0.0.1:7000,10.0.0.2:7001/0"
                             "?ssl_ca_certs=/ca.pem", "shown", 5.0)
    assert [(n.host, n.port) for n in got["startup_nodes"]] == [("10.0.0.1", 7000),
                                                                ("10.0.0.2", 7001)]
    assert got["username"] == "app" and got["password"] == "p@ss:w"
    assert got["ssl"] is True and got["ssl_ca_certs"] == "/ca.pem"


def test_unknown_options_and_bad_seeds_are_refused_naming_the_option(monkeypatch):
    _captured(monkeypatch)
    url = "redis+cluster://app:s3cret@10.0.0.1:7000/0?retries=3"
    with pytest.raises(ConfigError, match="retries") as e:
        redis_url.cluster_client(url, redis_url.redact_url(url), 5.0)
    assert "s3cret" not in str(e.value)
    with pytest.raises(ConfigError, match="host:port"):
        redis_url.cluster_client("redis+cluster://10.0.0.1/0", "shown", 5.0)
    with pytest.raises(ConfigError, match="database 0"):
        redis_url.cluster_client("redis+cluster://10.0.0.1:7000/3", "shown", 5.0)
