"""One switch for the broker, one real Redis: the services every test and example use.

``PULSAR_TXN_BROKER`` = ``lite`` (embedded, quick start), ``standalone`` (the
reference Apache Pulsar broker from Maven Central jars) or ``container``
(testcontainers, needs Docker).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pulsar_txn.metastore import open_store

from .broker_plugin import Governing
from .redis_server import RedisServer

BROKERS = ("lite", "standalone", "container")


def broker_kind(default: str = "lite") -> str:
    kind = os.environ.get("PULSAR_TXN_BROKER", default)
    if kind not in BROKERS:
        raise ValueError(f"PULSAR_TXN_BROKER={kind!r}: expected one of {', '.join(BROKERS)}")
    return kind


def start_broker(kind: str, workdir: Path, plugin: Governing | None = None):
    """A started broker of ``kind``; with ``plugin``, the reference broker with
    pulsar-txn's broker plugin installed and configured (docs/broker-plugin.md)."""
    if plugin is not None:
        if kind != "standalone":
            raise ValueError(f"the broker plugin runs in an Apache Pulsar broker "
                             f"(standalone), not {kind!r}: pulsar-lite cannot host it")
        from .standalone import PulsarStandalone

        classpath, conf = plugin.install(Path(workdir))
        broker = PulsarStandalone(Path(workdir), extra_conf=conf, extra_classpath=classpath)
        broker.start()
        return broker
    if kind == "lite":
        from .lite import PulsarLite as cls
    elif kind == "standalone":
        from .standalone import PulsarStandalone as cls
    elif kind == "container":
        from .container import PulsarContainer as cls
    else:
        raise ValueError(f"unknown broker kind {kind!r}: expected one of {', '.join(BROKERS)}")
    broker = cls(Path(workdir))
    broker.start()
    return broker


class Services:
    """Start Redis + a broker on loopback; stop both on exit, also after a failure."""

    def __init__(self, broker: str | None = None, workdir: str | Path | None = None,
                 appendfsync: str = "always", keep: bool = False,
                 broker_plugin: Path | None = None, namespace: str = "ptxn") -> None:
        """``broker_plugin``: the plugin's source directory (``broker-plugin/`` of the
        repository): the broker (standalone) then enforces READ_COMMITTED for plain
        consumers of public/default, governed by pulsar-txn ``namespace``, which is
        created first (the operator's ``pulsar-txn init``)."""
        self.kind = broker or broker_kind()
        self.broker_plugin = broker_plugin
        self.namespace = namespace
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="pulsar-txn-"))
        self.appendfsync = appendfsync
        self.keep = keep
        self.redis: RedisServer | None = None
        self.broker = None

    @property
    def metastore_url(self) -> str:
        return self.redis.url

    @property
    def service_url(self) -> str:
        return self.broker.service_url

    def start(self) -> Services:
        try:
            self.redis = RedisServer(self.workdir / "redis", appendfsync=self.appendfsync).start()
            plugin = None
            if self.broker_plugin is not None:
                open_store(self.redis.url, namespace=self.namespace, create=True).close()
                plugin = Governing(self.redis.url, self.namespace, Path(self.broker_plugin))
            self.broker = start_broker(self.kind, self.workdir / self.kind, plugin=plugin)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            if self.broker is not None:
                self.broker.stop()
                self.broker = None
        finally:
            if self.redis is not None:
                self.redis.stop()
                self.redis = None
            if self._own_dir and not self.keep:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Services:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
