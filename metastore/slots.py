"""Where a watch's blocking reads go, per hash slot.

A blocking ``XREAD`` holds its connection until it returns, and a cluster serves
each slot from one node, so the stream follower (``watch.py``) opens one
connection per slot group, to the node that owns the slot; on a single server
every slot is on the one server of the store's URL.
"""

from __future__ import annotations

import logging

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

log = logging.getLogger("pulsar_txn.metastore.watch")


class ServerSlots:
    """Every slot on the one server of a plain store's URL."""

    one_server = True  # one group down: every group is (they wait together)

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self._pool = pool
        self.socket_timeout = pool.connection_kwargs.get("socket_timeout") or 5.0

    def connect(self, slot: int):
        kwargs = dict(self._pool.connection_kwargs)
        # the follower has its own backoff and liveness deadline
        kwargs.update(retry=Retry(NoBackoff(), 0), health_check_interval=0)
        return self._pool.connection_class(**kwargs)

    def refresh(self) -> None:
        """Nothing moves on a single server."""


class ClusterSlots:
    """Each slot on the cluster node that owns it now."""

    one_server = False  # a dead node says nothing of the others' groups

    def __init__(self, cluster, socket_timeout: float) -> None:
        self._cluster = cluster
        self.socket_timeout = socket_timeout

    def connect(self, slot: int):
        node = self._cluster.nodes_manager.get_node_from_slot(slot)
        pool = node.redis_connection.connection_pool
        kwargs = dict(pool.connection_kwargs)
        kwargs.update(retry=Retry(NoBackoff(), 0), health_check_interval=0)
        return pool.connection_class(**kwargs)

    def refresh(self) -> None:
        """Learn the slot owners again (after MOVED, or a node that went away)."""
        try:
            self._cluster.nodes_manager.initialize()
        except (redis.RedisError, redis.exceptions.RedisClusterException) as e:
            log.debug("pulsar-txn watch: refreshing the cluster's slot map failed: %s", e)


def slots_of(store) -> ServerSlots | ClusterSlots:
    """Where a store's blocking reads go, per slot."""
    if getattr(store, "pool", None) is None:
        return ClusterSlots(store.r, store.socket_timeout)
    return ServerSlots(store.pool)
