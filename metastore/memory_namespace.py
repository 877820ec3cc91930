"""The memory backend's named states: what a Redis server's namespaces are to it.

Stores opened with the same ``memory://<name>`` and namespace share one state, as
clients of one server share its keys. A reader's open never creates one (as on
Redis), and ``reset_named`` models an operator's metastore reset: the next open
starts a new deployment, and the stores still holding the old state notice it
(``check_deployment``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pulsar_txn.errors import DeploymentChanged, MetastoreUnavailable, NamespaceNotFound
from pulsar_txn.records import TxnId, check_wire_format
from pulsar_txn.state import TxnState

from .base import deployment_changed, missing_namespace
from .memory_state import Server

NAMED: dict[tuple[str, str], Server] = {}
_NAMED_LOCK = threading.Lock()


def named_server(name: str, namespace: str, create: bool,
                 make: Callable[[], Server]) -> Server:
    """The state of (name, namespace); ``create`` False: a missing one raises."""
    with _NAMED_LOCK:
        server = NAMED.get((name, namespace))
        if server is None and not create:
            there = sorted(ns for n, ns in NAMED if n == name)
            raise NamespaceNotFound(missing_namespace(namespace, f"memory://{name}", there))
        if server is None:
            server = NAMED[(name, namespace)] = make()
        return server


def check_named(name: str, namespace: str, server: Server) -> None:
    """Raise DeploymentChanged if (name, namespace) no longer holds ``server``."""
    with _NAMED_LOCK:
        current = NAMED.get((name, namespace), server)
    if current is not server:
        raise DeploymentChanged(deployment_changed(namespace, f"memory://{name}",
                                                   server.deployment, current.deployment))


def reset_named(name: str, namespace: str = "ptxn", wipe: bool = False) -> None:
    """Forget a named state: the next store opened with that name and namespace
    starts a new deployment. ``wipe``: the records go too, as the keys of a Redis
    namespace an operator deletes (stores still holding the state find them gone)."""
    with _NAMED_LOCK:
        server = NAMED.pop((name, namespace), None)
    if wipe and server is not None:
        server.wipe()


class MemoryNamespace:
    """Mixin of MemoryMetadataStore: the namespace's identity and reader counters."""

    url: str
    _s: Server
    durability: str

    @property
    def _name(self) -> str:
        return self.url[len("memory://"):]

    deployment_lost: str | None = None  # see RedisNamespace

    def server_time_ms(self) -> int:
        return self._s.now()

    @property
    def server_starts(self) -> int:
        """Restores of the shared state (a restore breaks every client's connection at
        once: each client meets the new start at its next call)."""
        return self._s.starts

    def save_state(self) -> dict:  # tests: a backup of the server's records
        return self._s.save()

    def restore_state(self, saved: dict) -> None:  # tests: a new server start on a copy
        self._s.restore(saved)

    def check_deployment(self) -> None:
        """Same deployment while the name holds this state (``reset_named``)."""
        try:
            check_named(self._name, self.keys.ns, self._s)  # type: ignore[attr-defined]
        except DeploymentChanged as e:
            self.deployment_lost = str(e)
            raise

    def add_foreign_skipped(self, n: int) -> None:
        """Count entries of other deployments a reader passed (see RedisNamespace)."""
        with self._s.lock:
            self._s.foreign_skipped = getattr(self._s, "foreign_skipped", 0) + n

    def foreign_skipped(self) -> int:
        with self._s.lock:
            return getattr(self._s, "foreign_skipped", 0)

    def set_wire_format(self, wire: int) -> None:
        """See RedisMetadataStore.set_wire_format."""
        wire = check_wire_format(wire, self.keys.ns)
        with self._s.lock:
            self._s.wire_format = wire
        self.wire_format = wire
        if self.durability == "waitaof" and not self._s.fsync():
            raise MetastoreUnavailable("the wire-format switch was written but not "
                                       "fsynced (the disk stalls); run the command again")

    def txns_writing_other_form(self, wire: int) -> list[TxnId]:
        """See RedisMetadataStore.txns_writing_other_form."""
        with self._s.lock:
            return [TxnId(p, seq) for p in range(self.partitions)
                    for seq, txn in sorted(self._s.part(p).txns.items())
                    if txn.state is TxnState.OPEN and txn.wire_forms - {wire}]
