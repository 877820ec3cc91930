"""``--help`` of every command: each argument explained, defaults shown (never a value
taken from the environment, which may hold a password), no reStructuredText markup;
transactions and topics are inspected with one verb (issue 30, The CLI)."""

from __future__ import annotations

import argparse
import json
import re
import uuid

import pytest

from pulsar_txn import cli

SECRET = "S3CR3T-help-77"


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("pulsar-txn",)):
    """(command path, parser) for the top-level parser and every subcommand's."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_argument_of_every_command_has_help():
    missing = []
    for path, parser in _parsers(cli.build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue  # its commands are walked; their one-line help is checked below
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{' '.join(path)}: {action.option_strings or action.dest}")
    assert missing == []


def test_every_listed_command_has_a_one_line_help():
    for path, parser in _parsers(cli.build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    assert choice.help, (path, choice.dest)


def test_help_has_no_markup_and_no_empty_defaults():
    for path, parser in _parsers(cli.build_parser()):
        text = parser.format_help()
        assert "``" not in text, (path, text)
        assert "default: None" not in text and "default: False" not in text, (path, text)


@pytest.mark.parametrize("path,flag,default", [
    (("metrics", "serve"), "--port", "9464"),
    (("topic", "create"), "--segments", "1"),
    (("sweep",), "--retention-ms", "3600000"),
    (("list",), "--state", "open"),
])
def test_defaults_are_shown(path, flag, default):
    parser = dict(_parsers(cli.build_parser()))[("pulsar-txn", *path)]
    text = " ".join(parser.format_help().split())
    line = text[text.rindex(flag):]  # its help, not the usage line
    assert f"default: {default})" in line[:600], text


def test_a_default_from_the_environment_is_never_shown(monkeypatch):
    """The URL options' defaults come from PULSAR_TXN_* variables and may hold a password."""
    monkeypatch.setenv("PULSAR_TXN_METASTORE", f"redis://:{SECRET}@h:1/0")
    monkeypatch.setenv("PULSAR_TXN_ADMIN_URL", f"http://app:{SECRET}@h:8080")
    monkeypatch.setenv("PULSAR_TXN_AUTH_PARAMS", f"token:{SECRET}")
    for _, parser in _parsers(cli.build_parser()):
        assert SECRET not in parser.format_help()


def test_describe_is_the_verb_for_a_transaction_and_show_still_works(capsys):
    """``show`` (one transaction) and ``topic describe`` were two verbs for one thing;
    ``describe`` is the one listed, ``show`` stays as a hidden alias."""
    from pulsar_txn.coordinator import TransactionCoordinator
    from pulsar_txn.metastore import MemoryMetadataStore

    name = f"cli-verb-{uuid.uuid4().hex[:8]}"
    txn = TransactionCoordinator(MemoryMetadataStore(name)).new_transaction().txn_id
    url = f"memory://{name}"
    assert cli.main(["--metastore", url, "describe", str(txn)]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["txn"] == str(txn) and described["writes"] == []
    assert cli.main(["--metastore", url, "show", str(txn)]) == 0
    assert json.loads(capsys.readouterr().out)["txn"] == str(txn)
    top = cli.build_parser().format_help()
    assert re.search(r"^ +describe +one transaction", top, re.M), top
    assert not re.search(r"^ +show\b", top, re.M) and ",show" not in top, top
