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


def test_cli_creates_splits_merges_and_describes_a_scalable_topic(
        client, broker, redis_server, namespace, capsys):
    import uuid

    name = f"topic://public/default/cli-{uuid.uuid4().hex[:8]}"
    base = ["--metastore", redis_server.url, "--namespace", namespace, "--json", "topic",
            "--service-url", broker.service_url]
    if getattr(broker, "admin_url", ""):
        base += ["--admin-url", broker.admin_url]
    assert main(base + ["create", name, "--segments", "2"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["epoch"] == 1 and [s["state"] for s in info["segments"]] == ["ACTIVE"] * 2
    p = client.create_producer(name)
    for i in range(10):
        p.send(b"v%d" % i, key=f"k{i}")
    assert main(base + ["split", name, "0"]) == 0
    info = json.loads(capsys.readouterr().out)
    seg = {s["id"]: s for s in info["segments"]}
    assert seg[0]["state"] == "SEALED" and seg[0]["children"] == [2, 3]
    assert seg[0]["end"] is not None and seg[2]["parents"] == [0]
    assert seg[0]["entries"] + seg[1]["entries"] == 10
    assert main(base + ["merge", name, "3", "1"]) == 0
    info = json.loads(capsys.readouterr().out)
    seg = {s["id"]: s for s in info["segments"]}
    assert info["epoch"] == 3 and seg[4]["parents"] == [3, 1] and seg[4]["range"] == \
        f"{seg[3]['range'].split('-')[0]}-0xffff"
    assert main(base + ["merge", name, "2", "1"]) == 2       # 1 is sealed: a clear error
    assert "not ACTIVE" in capsys.readouterr().err
    assert main(["--metastore", redis_server.url, "--namespace", namespace, "topic",
                 "list"]) == 0
    assert name in capsys.readouterr().out
