"""The lingering-transaction tool, against the real metastore."""

from __future__ import annotations

import json

from pulsar_txn.cli import main
from pulsar_txn.state import TxnState


def test_cli_lists_and_aborts_a_lingering_txn(client, redis_server, namespace, capsys):
    txn = client.new_transaction(timeout_ms=3_600_000)
    base = ["--metastore", redis_server.url, "--namespace", namespace, "--json"]
    assert main(base + ["list"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["txn"] for r in rows] == [str(txn.id)] and rows[0]["state"] == "OPEN"
    assert main(base + ["abort", str(txn.id)]) == 0
    capsys.readouterr()
    assert client.coordinator.get(txn.id).state is TxnState.ABORTED
    assert main(base + ["list"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(base + ["abort", "(1,2)"]) == 2  # a v4 id is refused, clearly
    assert "v5" in capsys.readouterr().err


def test_cli_finds_the_txn_of_an_owner(client, redis_server, namespace, capsys):
    h = client.coordinator.new_transaction(owner="sink-a:7")
    assert main(["--metastore", redis_server.url, "--namespace", namespace, "--json",
                 "find", "sink-a:7"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["txn"] == str(h.txn_id)
