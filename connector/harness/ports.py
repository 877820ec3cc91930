"""Free loopback ports, readiness probes and stopping child processes."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (all held open together, so no repeats).

    Another process may still grab one before its server binds it: callers retry with
    new ports when that happens.
    """
    with contextlib.ExitStack() as stack:
        socks = []
        for _ in range(n):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]


def wait_tcp(port: int, timeout: float, proc=None, what: str = "server") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.25):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f}s")


def stop_process(proc: subprocess.Popen | None, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; a no-op for a process already gone."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
