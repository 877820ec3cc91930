"""Hole 6: a wire-format switch reaches every running writer before the command
reports success (real Redis + Pulsar, the client API, the operator's command)."""

from __future__ import annotations

import json
import threading

from helpers import raw_entries

from pulsar_txn import cli
from pulsar_txn.records import PROP_DEPLOYMENT, PROP_TXN, PROP_WRITER, TAG_SEP


def _form(props: dict) -> str:
    """The form an append carries; an earlier build's reader delivers only "three"."""
    tag = props[PROP_TXN]
    if TAG_SEP in tag and PROP_WRITER not in props and PROP_DEPLOYMENT not in props:
        return "one"
    if TAG_SEP not in tag and PROP_WRITER in props and PROP_DEPLOYMENT in props:
        return "three"
    return f"malformed {props}"


def _forms(plain_pulsar, topic: str) -> dict[bytes, str]:
    return {m.data(): _form(m.properties()) for m in raw_entries(plain_pulsar, topic)}


class _Command:
    """``pulsar-txn wire-format --<switch>`` running in the background, as an operator
    runs it while the clients keep working."""

    def __init__(self, redis_server, namespace: str, switch: str, capsys) -> None:
        self.rc: int | None = None
        self._capsys = capsys
        argv = ["--metastore", redis_server.url, "--namespace", namespace, "wire-format",
                f"--{switch}", "--json", "--wait-s", "30"]
        self._thread = threading.Thread(target=self._run, args=(argv,), daemon=True)
        self._thread.start()

    def _run(self, argv: list[str]) -> None:
        self.rc = cli.main(argv)

    def finished_within(self, seconds: float) -> bool:
        self._thread.join(seconds)
        return not self._thread.is_alive()

    def reported(self) -> dict:
        return json.loads(self._capsys.readouterr().out)[0]


def test_an_earlier_namespace_keeps_the_three_property_form_until_upgraded(
        make_client, plain_pulsar, redis_server, namespace, topic_name, capsys):
    """Readers of an earlier build deliver only the three-property form. A running
    client-API producer (opened before the switch, mid-transaction) follows a downgrade
    and an upgrade: the command reports success only once no open transaction has a
    run of the other form, and from then on every append is in the new form."""
    client = make_client()  # a new namespace: the one-property form
    topic = topic_name("wire")
    producer = client.create_producer(topic)
    with client.transaction() as t:
        producer.send(b"before", txn=t)

    downgrade = _Command(redis_server, namespace, "downgrade", capsys)
    assert downgrade.finished_within(30) and downgrade.rc == 0
    assert downgrade.reported()["wire_format"] == "three-property"
    with client.transaction() as t:  # the same producer and client, opened before
        producer.send(b"after downgrade", txn=t)
    assert _forms(plain_pulsar, topic) == {b"before": "one", b"after downgrade": "three"}

    running = client.new_transaction()  # a run of the three-property form, still open
    producer.send(b"open across upgrade 1", txn=running)
    upgrade = _Command(redis_server, namespace, "upgrade", capsys)
    assert not upgrade.finished_within(2.0), "reported while a three-property run was open"
    producer.send(b"open across upgrade 2", txn=running)  # its run keeps its form
    running.commit()
    assert upgrade.finished_within(30) and upgrade.rc == 0
    assert upgrade.reported()["wire_format"] == "one-property"
    with client.transaction() as t:
        producer.send(b"after upgrade", txn=t)
    assert _forms(plain_pulsar, topic) == {
        b"before": "one", b"after downgrade": "three", b"open across upgrade 1": "three",
        b"open across upgrade 2": "three", b"after upgrade": "one"}
