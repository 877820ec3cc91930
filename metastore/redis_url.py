"""The metastore URL: where the server is, which namespace, what durability is
accepted, and how the URL may be shown.

Why the URL carries the options: a Spark job passes one string to every executor,
so ``?namespace=`` and ``?durability=`` travel with it; they are taken out before
redis-py sees the URL (it would refuse them). Why the persistence check at open:
a server that may lose an acknowledged commit must be refused before the first
decision, not found out after a restart (docs/durability.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from pulsar_txn.errors import ConfigError

DURABILITY = ("strict", "waitaof", "relaxed")
SCHEMES = ("redis", "rediss", "unix")
# retried inside redis-py (a failover, a dropped link); the store's callers see
# MetastoreUnavailable only once these retries are spent
RETRIED = (redis.ConnectionError, redis.TimeoutError)


def redact_url(url: str) -> str:
    """The URL as it may appear in messages and logs: no password (userinfo or query)."""
    p = urlparse(url)
    netloc = p.netloc
    if p.password is not None:
        netloc = netloc.replace(f":{p.password}@", ":***@", 1)
    query = parse_qs(p.query, keep_blank_values=True)
    for k in query:
        if "pass" in k.lower() or "secret" in k.lower() or "token" in k.lower():
            query[k] = ["***"]
    return urlunparse(p._replace(netloc=netloc, query=urlencode(query, doseq=True)))


@dataclass(frozen=True)
class StoreUrl:
    connect: str      # what redis-py connects to: the URL without the store's options
    shown: str        # for messages and logs (redacted)
    namespace: str
    durability: str


def parse_store_url(url: str, namespace: str, durability: str | None) -> StoreUrl:
    """Split the store's own options off the URL; the URL's win over the arguments."""
    parsed = urlparse(url)
    shown = redact_url(url)
    if parsed.scheme not in SCHEMES:
        raise ConfigError(
            f"metastore.url {shown!r}: scheme must be redis://, rediss:// (TLS) or unix://")
    query = parse_qs(parsed.query)
    namespace = query.pop("namespace", [namespace])[0]
    durability = query.pop("durability", [durability or "strict"])[0]
    if durability not in DURABILITY:
        raise ConfigError(f"metastore.url {shown!r}: durability={durability!r}; expected one "
                          f"of {', '.join(DURABILITY)}")
    connect = urlunparse(parsed._replace(query=urlencode(query, doseq=True)))
    return StoreUrl(connect, shown, namespace, durability)


def connection_pool(url: str, socket_timeout: float) -> redis.ConnectionPool:
    """A pool whose commands ride out a short outage (a failover, a restart) before
    the store reports the metastore unavailable."""
    return redis.ConnectionPool.from_url(
        url, decode_responses=True, socket_timeout=socket_timeout,
        socket_connect_timeout=5, health_check_interval=30,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.02), 4),
        retry_on_error=list(RETRIED),
    )


def check_persistence(r: redis.Redis, shown: str, durability: str) -> None:
    """Refuse a server that would lose acknowledged decisions, unless the URL opts
    into a documented weaker mode (docs/durability.md): ``strict`` needs AOF with
    ``appendfsync always``; ``waitaof`` needs AOF and waits for the fsync of each
    decision (WAITAOF); ``relaxed`` checks nothing (lost decisions fail closed)."""
    if durability == "relaxed":
        return
    hint = ("add ?durability=relaxed to metastore.url to accept it (lost decisions come "
            "back as unknown: their txns are never shown), or see docs/durability.md")
    try:
        cfg = r.config_get("append*")
    except redis.ResponseError as e:
        raise ConfigError(f"metastore.url {shown!r}: cannot read the server's "
                          f"persistence settings ({e}); {hint}") from None
    if cfg.get("appendonly") != "yes":
        raise ConfigError(f"metastore.url {shown!r}: the server runs without AOF "
                          f"(appendonly {cfg.get('appendonly')}); {hint}")
    if durability == "waitaof":
        try:
            r.execute_command("WAITAOF", 0, 0, 1)
        except redis.ResponseError as e:
            raise ConfigError(f"metastore.url {shown!r}: durability=waitaof needs a "
                              f"server with WAITAOF (Redis 7.2+, Valkey): {e}") from None
    if durability == "strict" and cfg.get("appendfsync") != "always":
        raise ConfigError(
            f"metastore.url {shown!r}: appendfsync is {cfg.get('appendfsync')!r}, so an "
            "acknowledged commit can be lost; use appendfsync always, or add "
            "?durability=waitaof (each decision waits for its fsync); or " + hint)
