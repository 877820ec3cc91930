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

from .redis_server import RedisServer

BROKERS = ("lite", "standalone", "container")


def broker_kind(default: str = "lite") -> str:
    kind = os.environ.get("PULSAR_TXN_BROKER", default)
    if kind not in BROKERS:
        raise ValueError(f"PULSAR_TXN_BROKER={kind!r}: expected one of {', '.join(BROKERS)}")
    return kind


def start_broker(kind: str, workdir: Path):
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
                 appendfsync: str = "always", keep: bool = False) -> None:
        self.kind = broker or broker_kind()
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
            self.broker = start_broker(self.kind, self.workdir / self.kind)
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
