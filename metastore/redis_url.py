"""The metastore URL: where the server is, which namespace, what durability is
accepted, and how the URL may be shown.

Why the URL carries the options: a Spark job passes one string to every executor,
so ``?namespace=`` and ``?durability=`` travel with it; they are taken out before
redis-py sees the URL (it would refuse them). Why the persistence check at open:
a server that may lose an acknowledged commit must be refused before the first
decision, not found out after a restart (docs/durability.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlencode, urlparse, urlunparse

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from pulsar_txn.errors import ConfigError
from pulsar_txn.metastore.keys import namespace_refused

DURABILITY = ("strict", "waitaof", "relaxed")
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
# retried inside redis-py (a failover, a dropped link); the store's callers see
# MetastoreUnavailable only once these retries are spent
RETRIED = (redis.ConnectionError, redis.TimeoutError)


# query parameters whose values are hidden (passwords, tokens, pulsar's authParams)
_SECRET_QUERY = ("pass", "secret", "token", "auth", "key", "credential", "sig")
NOT_A_URL = "<not a URL: hidden, it may be a secret>"


def redact_url(url: str) -> str:
    """The one form in which a URL or URL option (``service.url``, ``metastore.url``,
    ``admin.url``, any address) appears in messages and logs: no password, token or
    ``authParams`` value, in userinfo or query.

    Userinfo without a colon (``redis://TOKEN@host``) is hidden whole: redis-py takes it
    for a user name, but that form is how a bare access token is written. A value that
    is no URL at all (no ``://``: e.g. ``token:<jwt>``, the auth parameters given in the
    wrong option) is hidden whole: nothing tells its secret part apart."""
    url = str(url)
    p = urlparse(url)
    if "@" in url and "@" not in p.netloc:
        # no userinfo found (no "//", or a "/", "?" or "#" in the password): hide all
        # before the last "@", whatever it holds
        scheme = f"{p.scheme}://" if "://" in url else ""
        return f"{scheme}***@{url.rpartition('@')[2]}"
    if "://" not in url:
        return NOT_A_URL
    netloc = p.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if at:
        user, colon, _password = userinfo.partition(":")
        netloc = f"{user}:***@{hosts}" if colon else f"***@{hosts}"
    query = parse_qs(p.query, keep_blank_values=True)
    for k in query:
        if any(word in k.lower() for word in _SECRET_QUERY):
            query[k] = ["***"]
    return urlunparse(p._replace(netloc=netloc, query=urlencode(query, doseq=True),
                                 fragment=""))


@dataclass(frozen=True)
class StoreUrl:
    connect: str      # what redis-py connects to: the URL without the store's options
    shown: str        # for messages and logs (redacted)
    namespace: str
    durability: str
    cluster: bool = False  # redis+cluster:// or rediss+cluster://: a Redis Cluster


def parse_store_url(url: str, namespace: str, durability: str | None) -> StoreUrl:
    """Split the store's own options off the URL; the URL's win over the arguments."""
    parsed = urlparse(url)
    shown = redact_url(url)
    if parsed.scheme not in SCHEMES:
        raise ConfigError(
            f"metastore.url {shown!r}: scheme must be redis://, rediss:// (TLS), unix://, or "
            "redis+cluster:// / rediss+cluster:// (a Redis Cluster: host:port[,host:port...])")
    cluster = parsed.scheme.endswith("+cluster")
    if not cluster and parsed.scheme != "unix":
        try:
            parsed.port  # noqa: B018 (urllib's check; redis-py's says only "Port could not...")
        except ValueError:
            raise ConfigError(f"metastore.url {shown!r}: the port is not a number "
                              "1..65535") from None
    query = parse_qs(parsed.query)
    namespace = query.pop("namespace", [namespace])[0]
    if not namespace or any(c in namespace for c in "{}"):
        raise ConfigError(f"{namespace_refused(namespace)} (metastore.url {shown!r})")
    durability = query.pop("durability", [durability or "strict"])[0]
    if durability not in DURABILITY:
        raise ConfigError(f"metastore.url {shown!r}: durability={durability!r}; expected one "
                          f"of {', '.join(DURABILITY)}")
    if not cluster:
        _check_query(parsed.scheme, set(query), shown)
    connect = urlunparse(parsed._replace(query=urlencode(query, doseq=True)))
    if parsed.scheme == "unix" and not parsed.netloc:
        # unix:///path: urlunparse drops the empty authority ("unix:/path"), which
        # redis-py refuses; it is the same socket as unix://localhost/path
        connect = "unix://" + connect[len("unix:"):]
    return StoreUrl(connect, shown, namespace, durability, cluster)


# the store's own URL options, taken out before redis-py sees the URL
STORE_QUERY = ("namespace", "durability")


def _check_query(scheme: str, names: set[str], shown: str) -> None:
    """Refuse an option redis-py would refuse as ``AbstractConnection.__init__() got an
    unexpected keyword argument``: name it, suggest the nearest, list the usual ones."""
    import difflib
    import inspect

    from redis.connection import (
        URL_QUERY_ARGUMENT_PARSERS,
        Connection,
        SSLConnection,
        UnixDomainSocketConnection,
    )

    cls = {"rediss": SSLConnection, "unix": UnixDomainSocketConnection}.get(scheme, Connection)
    accepted = {"max_connections"}  # the pool's; the rest go to the connection class
    for c in cls.__mro__:
        if "__init__" in c.__dict__:
            accepted |= set(inspect.signature(c.__init__).parameters) - {"self", "kwargs"}
    unknown = sorted(names - accepted)
    if not unknown:
        return
    usual = sorted(n for n in accepted if n in URL_QUERY_ARGUMENT_PARSERS or n.startswith("ssl_")
                   or n in ("username", "password", "client_name"))
    near = difflib.get_close_matches(unknown[0], [*STORE_QUERY, *usual], n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    if scheme != "rediss" and any(n.startswith("ssl_") for n in unknown):
        hint += "; ssl_* options need rediss:// (TLS)"
    raise ConfigError(f"metastore.url {shown!r}: unknown option(s) {', '.join(unknown)}{hint}; "
                      f"known: {', '.join(STORE_QUERY)} (the store's), {', '.join(usual)} "
                      "(redis-py's)")


def auth_refused(shown: str) -> str:
    """Why the server refused us, in the URL's terms: redis-py says a missing password
    as the HELLO command's protocol message, and files both under ConnectionError."""
    parsed = urlparse(shown)  # redacted: a password given shows as ***
    if not parsed.password and "password" not in parse_qs(parsed.query):
        return (f"metadata store {shown!r} (option 'metastore.url'): the server requires a "
                "password and the URL gives none: redis://[user]:password@host:port/db")
    return (f"metadata store {shown!r} (option 'metastore.url'): the server refused the "
            "credentials in the URL (a wrong password, or an ACL user that does not exist "
            "or is disabled)")


# what redis+cluster:// takes in its query, beside the store's own options
CLUSTER_QUERY = ("username", "password", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile",
                 "ssl_cert_reqs")


def cluster_client(url: str, shown: str, socket_timeout: float,
                   on_connect: Callable[[object], None] | None = None) -> RedisCluster:
    """A Redis Cluster client from ``redis+cluster://[user:pass@]h:p[,h:p...][/0][?...]``.
    Any node is a seed: the client learns the slot owners from it and follows MOVED
    replies and failovers itself (refreshing its slot map)."""
    parsed = urlparse(url)
    hosts = parsed.netloc.rpartition("@")[2]
    seeds = []
    for hp in hosts.split(","):
        host, _, port = hp.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"metastore.url {shown!r}: cluster seeds must be host:port, "
                              f"comma-separated; got {hp!r}")
        seeds.append(ClusterNode(host.strip("[]"), int(port)))
    if parsed.path not in ("", "/", "/0"):
        raise ConfigError(f"metastore.url {shown!r}: a Redis Cluster has database 0 only")
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    unknown = sorted(set(query) - set(CLUSTER_QUERY))
    if unknown:
        raise ConfigError(f"metastore.url {shown!r}: unknown option(s) {', '.join(unknown)} "
                          f"for a Redis Cluster; known: namespace, durability, "
                          f"{', '.join(CLUSTER_QUERY)}")
    tls = {k: query[k] for k in CLUSTER_QUERY if k.startswith("ssl_") and k in query}
    username = unquote(parsed.username) if parsed.username else query.get("username")
    password = unquote(parsed.password) if parsed.password else query.get("password")
    return RedisCluster(
        startup_nodes=seeds, username=username or None, password=password,
        ssl=parsed.scheme.startswith("rediss"), decode_responses=True,
        socket_timeout=socket_timeout, socket_connect_timeout=5, health_check_interval=30,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), 8),
        require_full_coverage=True, redis_connect_func=on_connect, **tls)


def connection_pool(url: str, socket_timeout: float) -> redis.ConnectionPool:
    """A pool whose commands ride out a short outage (a failover, a restart) before
    the store reports the metastore unavailable."""
    return redis.ConnectionPool.from_url(
        url, decode_responses=True, socket_timeout=socket_timeout,
        socket_connect_timeout=5, health_check_interval=30,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.02), 4),
        retry_on_error=list(RETRIED),
    )


def _refuse_plain_server_behind_tls_url(r: redis.Redis | RedisCluster, shown: str) -> None:
    """rediss:// to a server without TLS: the handshake gets no answer, and redis-py's
    retries say "Timeout connecting to server" after 50 s. One TLS connect without
    retries first; if it fails and the address answers a plain PING, say so. Any other
    failure is left to the retried commands that follow."""
    import socket

    from redis.backoff import NoBackoff
    from redis.connection import SSLConnection

    pool = getattr(r, "connection_pool", None)  # a cluster client has none: not probed
    if pool is None or not issubclass(pool.connection_class, SSLConnection):
        return
    kwargs = pool.connection_kwargs
    conn = pool.connection_class(**{**kwargs, "retry": Retry(NoBackoff(), 0)})
    try:
        conn.connect()
        return
    except (redis.ConnectionError, redis.TimeoutError):
        pass
    finally:
        conn.disconnect()
    try:
        with socket.create_connection((kwargs["host"], kwargs.get("port", 6379)), 2) as s:
            s.settimeout(2)
            s.sendall(b"PING\r\n")
            plain = s.recv(16)[:1] in (b"+", b"-")
    except OSError:
        return
    if plain:
        raise ConfigError(f"metadata store {shown!r} (option 'metastore.url'): the server "
                          "answers plain Redis, not TLS: use redis:// (or enable TLS on "
                          "the server)")


def check_persistence(r: redis.Redis, shown: str, durability: str) -> None:
    """Refuse a server that would lose acknowledged decisions, unless the URL opts
    into a documented weaker mode (docs/durability.md): ``strict`` needs AOF with
    ``appendfsync always``; ``waitaof`` needs AOF and waits for the fsync of each
    decision (WAITAOF); ``relaxed`` checks nothing (lost decisions fail closed).

    The store's first command: a refused password is said here, as a ConfigError (to
    redis-py it is a ConnectionError, which the store reports as retriable)."""
    _refuse_plain_server_behind_tls_url(r, shown)
    try:
        r.ping()
    except redis.AuthenticationError as e:
        raise ConfigError(auth_refused(shown)) from e
    if durability == "relaxed":
        return
    hint = ("add ?durability=relaxed to metastore.url to accept it (lost decisions come "
            "back as unknown: their txns are never shown), or see docs/durability.md")
    if isinstance(r, RedisCluster):  # every primary holds decisions: each is checked
        for node in r.get_primaries():
            _check_node(r, shown, durability, hint, {"target_nodes": node},
                        f" (cluster node {node.name})")
        return
    _check_node(r, shown, durability, hint, {}, "")


def _check_node(r, shown: str, durability: str, hint: str, target: dict, where: str) -> None:
    try:
        cfg = r.config_get("append*", **target)
    except redis.ResponseError as e:
        raise ConfigError(f"metastore.url {shown!r}: cannot read the server's "
                          f"persistence settings{where} ({e}); {hint}") from None
    if cfg.get("appendonly") != "yes":
        raise ConfigError(f"metastore.url {shown!r}: the server{where} runs without AOF "
                          f"(appendonly {cfg.get('appendonly')}); {hint}")
    if durability == "waitaof":
        try:
            r.execute_command("WAITAOF", 0, 0, 1, **target)
        except redis.ResponseError as e:
            raise ConfigError(f"metastore.url {shown!r}: durability=waitaof needs a "
                              f"server with WAITAOF (Redis 7.2+, Valkey): {e}") from None
    if durability == "strict" and cfg.get("appendfsync") != "always":
        raise ConfigError(
            f"metastore.url {shown!r}: appendfsync is {cfg.get('appendfsync')!r}{where}, so an "
            "acknowledged commit can be lost; use appendfsync always, or add "
            "?durability=waitaof (each decision waits for its fsync); or " + hint)
