"""Long work shows progress on a terminal, on stderr only; piped, nothing is added
(issue 30, The CLI: counting a segment's entries, a sweep over many transactions)."""

from __future__ import annotations

import io
import json
import sys
import time
import uuid

import pytest

from pulsar_txn import cli, cli_topics
from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.metastore import MemoryMetadataStore
from pulsar_txn.scalable import admin as scalable_admin


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


class _Producer:
    def close(self) -> None:
        pass


class _FakePulsar:
    """What ScalableTopics needs of a pulsar.Client when no entry is counted for real."""

    def create_producer(self, topic: str) -> _Producer:
        return _Producer()

    def close(self) -> None:
        pass


def _expired_txns(n: int) -> str:
    name = f"cli-progress-{uuid.uuid4().hex[:8]}"
    coord = TransactionCoordinator(MemoryMetadataStore(name))
    for _ in range(n):
        coord.new_transaction(timeout_ms=1)
    time.sleep(0.05)
    return f"memory://{name}"


@pytest.mark.parametrize("stream,shown", [(_Terminal, True), (_Pipe, False)])
def test_a_sweep_shows_its_progress_on_a_terminal_only(monkeypatch, capsys, stream, shown):
    url = _expired_txns(120)
    err = stream()
    monkeypatch.setattr(sys, "stderr", err)
    assert cli.main(["--metastore", url, "--json", "sweep"]) == 0
    out = json.loads(capsys.readouterr().out)  # stdout: the result only
    assert out[0]["aborted"] == 120
    if shown:
        assert "aborting expired transactions" in err.getvalue()
        assert "120 expired aborted" in err.getvalue()
        assert "120" in err.getvalue()
    else:
        assert err.getvalue() == ""


@pytest.mark.parametrize("stream,shown", [(_Terminal, True), (_Pipe, False)])
def test_topic_describe_shows_counting_progress_on_a_terminal_only(monkeypatch, capsys,
                                                                   stream, shown):
    name = f"cli-progress-{uuid.uuid4().hex[:8]}"
    store = MemoryMetadataStore(name)
    scalable_admin.ScalableTopics(store, _FakePulsar()).create("topic://public/default/p", 2)

    def count(client, backing, on_count=None):
        for n in (1000, 2000):
            on_count(n)
        return 2345

    monkeypatch.setattr(scalable_admin, "count_backing_entries", count)
    monkeypatch.setattr(cli_topics, "pulsar_client", lambda args, *a, **kw: (_FakePulsar(), {}))
    err = stream()
    monkeypatch.setattr(sys, "stderr", err)
    assert cli.main(["--metastore", f"memory://{name}", "topic", "describe",
                     "topic://public/default/p", "--service-url", "pulsar://127.0.0.1:1"]) == 0
    out = capsys.readouterr().out
    assert out.count("2345") == 2 and "counting" not in out
    if shown:
        assert "counting entries of segment 1 (2/2)" in err.getvalue()
        assert "2,000" in err.getvalue()
    else:
        assert err.getvalue() == ""
