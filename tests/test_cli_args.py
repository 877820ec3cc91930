"""The CLI's global options work before and after the subcommand (no store needed)."""

from __future__ import annotations

import json

import pytest

from pulsar_txn import cli


class _EmptyStore:
    """Just enough of a MetadataStore for ``list`` on a deployment with no txns."""

    def __init__(self) -> None:
        self.opened: tuple[str, str] | None = None

    def server_time_ms(self) -> int:
        return 1_000_000

    def open_txns(self) -> list:
        return []

    def get_headers(self, ids) -> dict:
        return {}


@pytest.fixture
def store(monkeypatch) -> _EmptyStore:
    s = _EmptyStore()

    def open_store(url, namespace, create=True):
        s.opened = (url, namespace)
        assert not create  # list never creates a namespace (issue 26, hole 13)
        return s

    monkeypatch.setattr(cli, "open_store", open_store)
    return s


@pytest.mark.parametrize("argv", [
    ["--metastore", "redis://h:1", "--namespace", "ns", "--json", "list"],
    ["list", "--metastore", "redis://h:1", "--namespace", "ns", "--json"],
    ["--metastore", "redis://h:1", "list", "--json", "--namespace", "ns"],
])
def test_global_options_are_accepted_before_or_after_the_subcommand(store, capsys, argv):
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert store.opened == ("redis://h:1", "ns")


def test_options_given_before_the_subcommand_are_not_reset_by_its_defaults(store, capsys):
    assert cli.main(["--json", "--namespace", "ns", "--metastore", "redis://h:1", "list"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert store.opened == ("redis://h:1", "ns")


def test_topic_subcommands_take_the_global_and_topic_options_after_them():
    args = cli.build_parser().parse_args(
        ["topic", "describe", "topic://t/n/x", "--json", "--service-url", "pulsar://b:1",
         "--metastore", "redis://h:1"])
    assert (args.json, args.service_url, args.metastore) == (True, "pulsar://b:1", "redis://h:1")


def test_wire_format_shows_and_upgrades_an_earlier_namespace(capsys):
    """An operator switches an earlier build's namespace to the one-property form once
    every reader is upgraded; a new namespace already has it."""
    import uuid

    from pulsar_txn.metastore import MemoryMetadataStore
    from pulsar_txn.records import WIRE_ONE, WIRE_THREE

    name = f"cli-wire-{uuid.uuid4().hex[:8]}"
    earlier = MemoryMetadataStore(name, wire_format=WIRE_THREE)
    url = f"memory://{name}"
    assert cli.main(["--metastore", url, "wire-format", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["wire_format"] == "three-property"
    assert cli.main(["wire-format", "--upgrade", "--metastore", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["wire_format"] == "one-property"
    assert not earlier.still_current()
    assert MemoryMetadataStore(name).wire_format == WIRE_ONE
    assert cli.main(["wire-format", "--downgrade", "--metastore", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["wire_format"] == "three-property"
    assert MemoryMetadataStore(name).wire_format == WIRE_THREE


def test_a_wire_format_switch_fails_while_a_run_of_the_other_form_is_open(capsys):
    """Hole 6: a run registered before the switch may still append the other form, so
    the switch reports success only once its transaction ended, and names it until then."""
    import uuid

    from pulsar_txn.coordinator import TransactionCoordinator
    from pulsar_txn.metastore import MemoryMetadataStore
    from pulsar_txn.records import WIRE_THREE

    name = f"cli-wire-{uuid.uuid4().hex[:8]}"
    store = MemoryMetadataStore(name)  # one-property
    coord = TransactionCoordinator(store)
    running = coord.new_transaction().txn_id
    store.register_write(running, "seg", "w")
    argv = ["--metastore", f"memory://{name}", "wire-format", "--downgrade", "--json",
            "--wait-s", "0.3"]
    assert cli.main(argv) == 1
    out = capsys.readouterr()
    assert json.loads(out.out)[0]["open_with_other_form"] == [str(running)]
    assert str(running) in out.err and "one-property" in out.err
    assert store.register_write(coord.new_transaction().txn_id, "seg", "w") == WIRE_THREE
    coord.commit(running)
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)[0] == {
        "namespace": "ptxn", "wire_format": "three-property", "open_with_other_form": []}
