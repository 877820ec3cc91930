"""docs/configuration.md lists exactly the options the code accepts."""

import re
from pathlib import Path

from pulsar_txn.spark.options import SINK, SOURCE, SPARK

DOC = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()


def _documented(section: str) -> set[str]:
    body = DOC.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in body.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            names.update(n.lower() for n in re.findall(r"`([^`]+)`", first_cell))
    return {n for n in names if not n.endswith(".<name>")}


def test_sink_options_are_documented_and_only_those():
    assert _documented("Sink") == SINK | SPARK


def test_source_options_are_documented_and_only_those():
    assert _documented("Source") == SOURCE | SPARK
