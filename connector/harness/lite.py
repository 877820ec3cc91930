"""The embedded pulsar-lite broker (PyPI), started as our own child process.

Known gaps we never depend on: duplicate deliveries on unbatched topics, no
working seek, no terminate/delete/list, has_message_available raising on an
empty topic; the subscription of every reader ever closed stays (see ``log_level``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .ports import free_port, stop_process, wait_tcp


class PulsarLite:
    kind = "lite"

    def __init__(self, workdir: Path, log_level: str = "error") -> None:
        # not "warn": pulsar-lite 0.2 keeps every closed reader's subscription and warns
        # about each one on every message it dispatches (gigabytes of log in minutes,
        # and most of its CPU, in a streaming query that opens readers as it goes)
        self.log_level = log_level
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.service_url = f"pulsar://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        try:
            from pulsar_lite.binary_finder import find_pulsar_lite_binary
        except ImportError as e:
            raise RuntimeError("pulsar-lite is not installed: pip install 'pulsar-txn[embedded]'"
                               ) from e
        log = open(self.workdir / "pulsar-lite.log", "ab")
        self.proc = subprocess.Popen(
            [find_pulsar_lite_binary(), "--addr", f"127.0.0.1:{self.port}",
             "--db-path", str(self.workdir / "data"), "--log-level", self.log_level],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, start_new_session=True)
        log.close()
        wait_tcp(self.port, timeout, self.proc, "pulsar-lite")

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None

    def restart(self, timeout: float = 30.0) -> None:
        """Stop and start again on the same port and data directory."""
        self.stop()
        self.start(timeout)

    def terminate_topic(self, topic: str) -> bool:
        return False  # not supported by pulsar-lite

    def delete_topic(self, topic: str) -> bool:
        return False  # not supported by pulsar-lite
