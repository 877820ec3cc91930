"""``pulsar-txn init``: the one explicit way to create a namespace from a shell, the
operator's step before a broker plugin governs its topics (docs/broker-plugin.md).
Read-only commands never create one; ``init`` does, once, and then only reports it."""

from __future__ import annotations

import json
import uuid

from pulsar_txn import cli


def test_init_creates_the_namespace_once_and_reports_the_same_deployment(capsys):
    url = f"memory://cli-init-{uuid.uuid4().hex[:8]}"
    assert cli.main(["--metastore", url, "--namespace", "orders", "list"]) == 2
    assert "orders" in capsys.readouterr().err  # a read names it, never creates it
    assert cli.main(["--metastore", url, "--namespace", "orders", "--json", "init",
                     "--partitions", "4"]) == 0
    first = json.loads(capsys.readouterr().out)[0]
    assert first["namespace"] == "orders" and first["partitions"] == 4
    assert cli.main(["--metastore", url, "--namespace", "orders", "--json", "init"]) == 0
    assert json.loads(capsys.readouterr().out)[0] == first  # the same deployment id
    assert cli.main(["--metastore", url, "--namespace", "orders", "--json", "list"]) == 0
    assert json.loads(capsys.readouterr().out) == []
