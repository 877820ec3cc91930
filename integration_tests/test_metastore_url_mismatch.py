"""``rediss://`` against a server without TLS is said as that (issue 30, Errors): the
TLS handshake gets no answer, and redis-py reported a bare "Timeout connecting to
server" after 50 s (its retries over two commands) with no hint of the mismatch."""

from __future__ import annotations

import time

import pytest

from pulsar_txn.errors import ConfigError


def test_rediss_against_a_plain_server_names_the_tls_mismatch(single_redis):
    from pulsar_txn.metastore import open_store

    plain = single_redis.url
    assert plain.startswith("redis://")
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as err:
        open_store("rediss://" + plain[len("redis://"):])
    msg = str(err.value)
    assert "'metastore.url'" in msg and "redis://" in msg and "TLS" in msg, msg
    assert time.monotonic() - t0 < 35  # not the 50 s of two commands' retries
