"""``pulsar-txn dev``: the embedded services for trying the CLI and the client without
infrastructure, until Ctrl-C (issue 30, Try it without infrastructure). Starts a real
Valkey/Redis server and pulsar-lite (small processes; one test)."""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pulsar_lite") is None,
                                reason="pulsar-lite is not installed")


def _read_until_ready(proc: subprocess.Popen, timeout: float) -> list[str]:
    """stdout lines up to the one saying how to stop (the services are up then)."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        seen.append(line.rstrip("\n"))
        if "Ctrl-C" in line:
            return seen
    raise AssertionError(f"pulsar-txn dev printed no ready line: {seen}")


def _exports(lines: list[str]) -> dict[str, str]:
    env = {}
    for line in lines:
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = value
    return env


def _open(url: str) -> bool:
    p = urlparse(url)
    try:
        with socket.create_connection((p.hostname, p.port), timeout=0.5):
            return True
    except OSError:
        return False


def test_dev_prints_urls_and_exports_that_the_cli_uses_and_stops_on_ctrl_c():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSAR_TXN_")}
    proc = subprocess.Popen([sys.executable, "-m", "pulsar_txn.cli", "dev", "--broker", "lite"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = _read_until_ready(proc, 90)
        exported = _exports(lines)
        metastore, service = exported["PULSAR_TXN_METASTORE"], exported["PULSAR_TXN_SERVICE_URL"]
        assert metastore.startswith("redis://") and service.startswith("pulsar://"), lines
        assert any(metastore in line and service in line for line in lines
                   if not line.startswith("export")), lines  # the two URLs, said once
        cli_env = {**env, **exported}
        done = subprocess.run([sys.executable, "-m", "pulsar_txn.cli", "list", "--json"],
                              env=cli_env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and json.loads(done.stdout) == [], done.stderr
        done = subprocess.run([sys.executable, "-m", "pulsar_txn.cli", "--json", "topic",
                               "create", "topic://public/default/dev-try"],
                              env=cli_env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["segments"][0]["entries"] == 0
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, proc.stderr.read()
        assert "Traceback" not in proc.stderr.read()
        assert not _open(metastore) and not _open(service)
    finally:
        if proc.poll() is None:  # stopped as a user would, so its services stop too
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@pytest.mark.parametrize("when", ["running", "starting"])
def test_a_closed_terminal_or_a_stop_while_starting_leaves_no_service_running(when):
    """SIGHUP (the terminal closed) stops the services as Ctrl-C does; a SIGTERM while
    they start ends the start and stops what was started (handlers installed first)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSAR_TXN_")}
    proc = subprocess.Popen([sys.executable, "-m", "pulsar_txn.cli", "dev", "--broker", "lite"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        children = _children_once_started(proc)
        if when == "running":
            exported = _exports(_read_until_ready(proc, 90))
            children = _children_once_started(proc)
            proc.send_signal(signal.SIGHUP)
            assert proc.wait(60) == 0, proc.stderr.read()
            assert not _open(exported["PULSAR_TXN_METASTORE"])
            assert not _open(exported["PULSAR_TXN_SERVICE_URL"])
        else:
            proc.send_signal(signal.SIGTERM)  # its first service is up, the rest starting
            assert proc.wait(60) in (0, 130), proc.stderr.read()
        assert children and not [pid for pid in children if _alive(pid)], children
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _children_once_started(proc: subprocess.Popen, timeout: float = 60) -> list[int]:
    """The processes ``proc`` started so far, once there is at least one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                               text=True).stdout.split()
        if found:
            return [int(p) for p in found]
        time.sleep(0.05)
    raise AssertionError("pulsar-txn dev started no service")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie has ended
    except OSError:
        return False


def test_the_broker_plugin_is_refused_on_a_broker_that_cannot_host_it(capsys, tmp_path):
    """The harness's plugin switch names what is wrong before anything starts: pulsar-lite
    is not an Apache Pulsar broker and has no plugin points."""
    from pulsar_txn.harness import broker_plugin
    from pulsar_txn.harness.dev import run
    from pulsar_txn.harness.services import start_broker

    with pytest.raises(ValueError, match="standalone.*pulsar-lite cannot host it"):
        start_broker("lite", tmp_path, plugin=broker_plugin.Governing(
            "redis://127.0.0.1:1", "ptxn", tmp_path))
    assert run(broker="lite", broker_plugin=str(tmp_path)) == 2
    assert "--broker-plugin runs in the reference broker" in capsys.readouterr().err
