"""The docs and the CLI name the same flags (issue 30, Docs that stay true): every
``--flag`` the docs give ``pulsar-txn`` exists in its parser, and every flag of the
parser is documented. Parsed from the Markdown, no command runs.

A flag is the CLI's where the docs show it with the command: on a code-block line that
runs ``pulsar-txn`` (and its ``\\``-continued lines), in an inline code span holding
``pulsar-txn``, or as a bare ``--flag`` code span in a paragraph about ``pulsar-txn``
or the CLI (other tools' flags, like the benchmarks', sit in other paragraphs)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pulsar_txn import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
SPAN = re.compile(r"`([^`\n]+)`")


def _code_block_flags(lines: list[str]) -> list[tuple[int, str]]:
    found, fenced, continued = [], False, False
    for i, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced, continued = not fenced, False
            continue
        if not fenced:
            continue
        command = line.strip().removeprefix("$ ")
        if continued or command.startswith("pulsar-txn ") or command == "pulsar-txn":
            code = command.split("  #")[0].split(" # ")[0]
            found += [(i, f) for f in FLAG.findall(code)]
            continued = code.rstrip().endswith("\\")
    return found


def _prose_flags(lines: list[str]) -> list[tuple[int, str]]:
    found, fenced, paragraph = [], False, []

    def flush():
        text = " ".join(t for _, t in paragraph)
        about_cli = "pulsar-txn" in text or "CLI" in text
        for n, t in paragraph:
            for span in SPAN.findall(t):
                if "pulsar-txn" in span or (about_cli and span.startswith("--")):
                    found.extend((n, f) for f in FLAG.findall(span))
        paragraph.clear()

    for i, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            flush()
            continue
        if fenced:
            continue
        if not line.strip():
            flush()
        else:
            paragraph.append((i, line))
    flush()
    return found


def documented() -> dict[str, list[str]]:
    """flag -> where the docs give it to pulsar-txn."""
    out: dict[str, list[str]] = {}
    for page in PAGES:
        lines = page.read_text().splitlines()
        for n, flag in _code_block_flags(lines) + _prose_flags(lines):
            out.setdefault(flag, []).append(f"{page.relative_to(ROOT)}:{n}")
    return out


def parser_flags() -> set[str]:
    flags: set[str] = set()

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            flags.update(o for o in action.option_strings if o.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)

    walk(cli.build_parser())
    return flags - {"--help"}


def test_every_flag_the_docs_give_pulsar_txn_exists():
    known = parser_flags() | {"--help"}  # argparse's own: every command has it
    unknown = {f: where for f, where in documented().items() if f not in known}
    assert unknown == {}


def test_every_flag_of_the_cli_is_documented():
    assert sorted(parser_flags() - set(documented())) == []


def test_the_extraction_sees_the_known_places():
    """Guards the parser of this test: flags known to be documented are found."""
    found = documented()
    assert any(w.startswith("docs/operations.md") for w in found["--older-than"])
    assert any(w.startswith("docs/scalable-topics.md") for w in found["--segments"])
    assert any(w.startswith("README.md") for w in found["--metastore"])
    assert "--cluster" not in found  # redis-cli's, in the README
    assert "--smoke" not in found and "--rows" not in found  # the benchmarks'
