"""Claim tables watched by the server: Redis CLIENT TRACKING on a RESP3 connection.

Why: a consumer checks every message against its subscription's claim table as it
hands it out (never hand out a message another consumer's committed transaction
consumed meanwhile). A round trip per message halves a transactional consumer's
pace. With tracking on, the server remembers which keys a connection read and
pushes an invalidation on that connection when one of them is written, so "has
the table changed since I read it?" is answered by looking at the socket (a few
microseconds) and the table is read again only after a write.

Why the answer holds: the server queues the invalidation on the reader's connection
while it executes the write, before the writer's reply is sent, and our read's reply
comes before any invalidation of a later write. A table is "clean" from the reply
of our read until an invalidation of it (or anything we cannot account for: a lost
connection, a flush, a server without RESP3) is seen.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from pulsar_txn.records import Position

from .claims import ClaimView
from .keys import claim_view_fields, decode_claim_view
from .replies import translate

log = logging.getLogger(__name__)

PoolOf = Callable[[str], redis.ConnectionPool]  # the pool of the node that holds a key


def _can_track() -> bool:
    """RESP3 pushes handed to a handler, not returned as a command's reply: redis-py 5
    or later, and hiredis 3 or later when hiredis parses (earlier ones mix them up)."""
    if int(redis.__version__.split(".")[0]) < 5:
        return False
    try:
        import hiredis
    except ImportError:
        return True
    return int(hiredis.__version__.split(".")[0]) >= 3


_CAN_TRACK = _can_track()


class ClaimTracking:
    """One tracking connection per server node, shared by the store's consumers.

    What a read returns with its row is a token: the key's count of invalidations
    seen, and the connection's generation. The table is unchanged for that reader
    while its token is still the current one (so each consumer knows about its own
    reads, whoever else reads the key)."""

    def __init__(self, pool_of: PoolOf) -> None:
        self._pool_of = pool_of
        self._lock = threading.Lock()
        self._conns: dict[int, redis.Connection] = {}  # id(pool) -> connection
        self._epochs: dict[str, int] = {}  # key -> invalidations seen of it
        self._gen = 0  # connections dropped or flushes seen: every token before is void
        self._off: str | None = None  # why tracking is not available (then: never clean)

    def read(self, key: str, fields: list[str]) -> tuple[list, object] | None:
        """HMGET ``fields`` of ``key`` on the tracking connection, with the token of
        that read; None: no tracking on this server (read it the plain way)."""
        with self._lock:
            conn = self._conn(key)
            if conn is None:
                return None
            try:
                self._drain(conn)
                conn.send_command("HMGET", key, *fields)
                row = conn.read_response()  # invalidations before it are handled on the way
            except redis.exceptions.ResponseError:  # e.g. MOVED: a cluster's slot moved
                self._drop()
                return None  # the store's own client follows redirects
            except BaseException:
                self._drop()
                raise
            return row, (self._gen, self._epochs.get(key, 0))

    def unchanged(self, key: str, token: object) -> bool:
        """Never raises: anything unknown (a lost connection, a cluster's node map in
        flux) is "changed", and the caller reads again."""
        with self._lock:
            try:
                conn = self._conns.get(id(self._pool_of(key)))
                if conn is None or token != (self._gen, self._epochs.get(key, 0)):
                    return False
                self._drain(conn)
            except Exception:  # noqa: BLE001 - unknown: read again (and reconnect then)
                self._drop()
                return False
            return token == (self._gen, self._epochs.get(key, 0))

    def close(self) -> None:
        with self._lock:
            self._drop()

    # ---- the connection ----
    def _conn(self, key: str) -> redis.Connection | None:
        if self._off is not None:
            return None
        pool = self._pool_of(key)
        conn = self._conns.get(id(pool))
        if conn is not None:
            return conn
        if not _CAN_TRACK:
            self._off = "pushes are not handled by this redis-py/hiredis"
            return None
        # one attempt, no retries, no health-check PING: a connection that drops is
        # dropped with everything it said (``_drop``), never silently replaced
        kwargs = {**pool.connection_kwargs, "protocol": 3, "health_check_interval": 0,
                  "retry": Retry(NoBackoff(), 0)}
        kwargs.pop("redis_connect_func", None)  # the store's hook counts server starts
        conn = pool.connection_class(**kwargs)
        conn.register_connect_callback(self._connected)
        try:
            conn.connect()
        except redis.exceptions.ResponseError as e:  # a server before RESP3 (Redis 6)
            conn.disconnect()
            self._off = str(e)
            log.info("claim tables are read at every hand-out: the metastore server "
                     "does not track keys (%s)", e)
            return None
        except BaseException:
            conn.disconnect()
            raise
        self._conns[id(pool)] = conn
        return conn

    def _connected(self, conn: redis.Connection) -> None:
        """Every (re)connect turns tracking on anew and voids every earlier token: what
        was written while no connection tracked the key is unknown."""
        conn._parser.set_invalidation_push_handler(self._invalidated)
        conn.send_command("CLIENT", "TRACKING", "ON")
        conn.read_response()
        self._gen += 1

    def _drain(self, conn: redis.Connection) -> None:
        """Handle the invalidations already on the socket (no waiting)."""
        while conn.can_read(timeout=0):
            # a push read in part (TimeoutError) or any other error: the connection is
            # not known to be in step any more; the caller drops it
            conn.read_response(push_request=True, timeout=0)

    def _invalidated(self, message) -> None:
        keys = message[1] if len(message) > 1 else None
        if keys is None:  # a flush: every key
            self._gen += 1
            return
        for k in keys:
            k = k.decode() if isinstance(k, bytes) else k
            self._epochs[k] = self._epochs.get(k, 0) + 1
        if len(self._epochs) > 100_000:  # keys of consumers long gone
            self._epochs.clear()
            self._gen += 1

    def _drop(self) -> None:
        """Forget every connection and what it said: every token is void."""
        for conn in self._conns.values():
            try:
                conn.disconnect()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
        self._conns.clear()
        self._gen += 1


class RedisClaimReads:
    """ClaimReads of one claim table through the store's ClaimTracking (``url``: the
    store's, redacted, for its errors)."""

    def __init__(self, tracking: ClaimTracking, key: str, url: str,
                 plain: Callable[[Sequence[Position]], ClaimView]) -> None:
        self._tracking, self._key, self.url, self._plain = tracking, key, url, plain
        self._token: object = None

    @translate
    def read(self, positions: Sequence[Position]) -> ClaimView:
        self._token = None
        got = self._tracking.read(self._key, claim_view_fields(positions))
        if got is None:
            return self._plain(positions)
        row, self._token = got
        return decode_claim_view(positions, row)

    def unchanged(self) -> bool:
        return self._token is not None and self._tracking.unchanged(self._key, self._token)
