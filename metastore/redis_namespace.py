"""The namespace a RedisMetadataStore opened, as the server holds it now.

A reader never creates a namespace, so a missing one is named with those that exist
(``namespaces``); a process that keeps a store while the namespace is wiped and
initialised again (a new deployment id at the same address) must stop before it
reads, writes or acks under the old id (``check_deployment``, issue 26 hole 8).
"""

from __future__ import annotations

import redis

from pulsar_txn.errors import DeploymentChanged, MetastoreUnavailable, TxnNotFound
from pulsar_txn.records import TxnId

from .base import deployment_changed
from .keys import Keys
from .replies import translate


class RedisNamespace:
    # set once a check saw the deployment change (sticky): writes that need no round
    # trip of their own (a registered run's appends) read it before each send
    deployment_lost: str | None = None
    """Mixin of RedisMetadataStore: the namespace's identity on the server."""

    r: redis.Redis
    url: str
    keys: Keys
    deployment: str
    partitions: int

    def namespaces(self, limit: int = 50) -> list[str]:
        """The namespaces this server holds (those with a config record), sorted; at
        most ``limit`` (a SCAN: for error messages and operators, never a hot path)."""
        found: set[str] = set()
        for key in self.r.scan_iter(match="*:config", count=1000):
            name = key.decode() if isinstance(key, bytes) else str(key)
            found.add(name[: -len(":config")])
            if len(found) >= limit:
                break
        return sorted(found)

    def check_deployment(self) -> None:
        """Raise DeploymentChanged if the namespace no longer holds the deployment id
        (and partitions) this store opened: wiped, reset or replaced at the same
        address. One HMGET. A restart of the server (same data) is no change."""
        try:
            dep, deployment, partitions = self.r.hmget(
                Keys(self.keys.ns, 1).config(), "dep", "deployment", "partitions")
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise MetastoreUnavailable(f"metadata store {self.url!r} (option "
                                       f"'metastore.url') unreachable: {e}") from e
        now = dep or deployment
        if now != self.deployment or partitions is None or int(partitions) != self.partitions:
            self.deployment_lost = deployment_changed(self.keys.ns, self.url,
                                                      self.deployment, now)
            raise DeploymentChanged(self.deployment_lost)

    @translate
    def add_foreign_skipped(self, n: int) -> None:
        """Count entries of other deployments a reader passed (``read.foreignDeployments
        =skip``): one field of the namespace's config, read by the source's progress and
        the Prometheus metrics. Never creates the namespace (a reader's write)."""
        self.check_deployment()
        self.r.hincrby(Keys(self.keys.ns, 1).config(), "foreign_skipped", int(n))

    @translate
    def foreign_skipped(self) -> int:
        return int(self.r.hget(Keys(self.keys.ns, 1).config(), "foreign_skipped") or 0)

    @translate
    def register_write(self, txn_id: TxnId, segment: str, writer: str) -> int:
        """RedisWrites.register_write (the wire format to append in); a header that
        vanished with its whole namespace (a reset) is DeploymentChanged, never a write
        under a stale deployment id."""
        try:
            return super().register_write(txn_id, segment, writer)
        except TxnNotFound:
            self.check_deployment()
            raise

    @translate
    def record_acks(self, txn_id: TxnId, *args, **kwargs) -> None:
        """RedisAcks.record_acks; a header gone with its namespace is DeploymentChanged
        (a transactional ack of a client whose metastore was reset)."""
        try:
            super().record_acks(txn_id, *args, **kwargs)  # type: ignore[misc]
        except TxnNotFound:
            self.check_deployment()
            raise
