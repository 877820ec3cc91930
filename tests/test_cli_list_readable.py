"""``pulsar-txn list`` reads as an operator reads: times in ISO 8601 UTC, ages and
deadlines as durations, winners as a list, and a hint on an OPEN transaction past its
deadline; ``--json`` keeps the machine fields (issue 30, The CLI)."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from pulsar_txn import cli
from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.metastore import MemoryMetadataStore

ISO = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\b")


@pytest.fixture
def deployment():
    """A memory store with an expired OPEN txn, a running one and a committed one."""
    name = f"cli-list-{uuid.uuid4().hex[:8]}"
    store = MemoryMetadataStore(name)
    coord = TransactionCoordinator(store)
    expired = coord.new_transaction(timeout_ms=1).txn_id
    running = coord.new_transaction(timeout_ms=3_600_000).txn_id
    done = coord.new_transaction().txn_id
    for w in ("writer-b", "writer-a"):
        store.register_write(done, "persistent://public/default/s", w)
    coord.commit(done, winners=["writer-a", "writer-b"])
    time.sleep(0.05)
    return f"memory://{name}", expired, running, done


def _lines(out: str, txn) -> str:
    return next(line for line in out.splitlines() if str(txn) in line)


def test_list_shows_iso_times_and_durations(deployment, capsys):
    url, expired, running, _ = deployment
    assert cli.main(["--metastore", url, "list"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    assert "age_s" not in header and "deadline_in_s" not in header, out
    row = _lines(out, running)
    assert ISO.search(row), out
    assert re.search(r"\b\d+(\.\d)?s\b", row), out           # its age, e.g. 0.1s
    assert re.search(r"\b59m5\ds\b", row), out                # its deadline, ~1 h away
    assert not re.search(r"\b\d{13}\b", row), row             # no epoch milliseconds


def test_an_open_transaction_past_its_deadline_says_the_sweep_aborts_it(deployment, capsys):
    url, expired, running, _ = deployment
    assert cli.main(["--metastore", url, "list"]) == 0
    out = capsys.readouterr().out
    assert "sweep" in _lines(out, expired), out
    assert "sweep" not in _lines(out, running), out


def test_winners_are_a_comma_list_not_a_python_repr(deployment, capsys):
    url, *_, done = deployment
    assert cli.main(["--metastore", url, "list", "--state", "finalized"]) == 0
    row = _lines(capsys.readouterr().out, done)
    assert "writer-a,writer-b" in row and "[" not in row and "'" not in row, row
    assert len(ISO.findall(row)) == 2, row                    # created and finalized


def test_json_keeps_the_machine_fields_and_adds_iso_times(deployment, capsys):
    url, expired, running, _ = deployment
    assert cli.main(["--metastore", url, "--json", "list"]) == 0
    rows = {r["txn"]: r for r in json.loads(capsys.readouterr().out)}
    r = rows[str(running)]
    assert isinstance(r["age_s"], float) and 3500 < r["deadline_in_s"] <= 3600
    assert r["finalized_ms"] is None and r["winners"] == []
    assert ISO.fullmatch(r["created"]) and ISO.fullmatch(r["deadline"])
    assert rows[str(expired)]["deadline_in_s"] < 0 and rows[str(expired)]["past_deadline"]
    assert not r["past_deadline"]
