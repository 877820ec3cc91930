"""docs/configuration.md lists exactly the options the code accepts."""

import inspect
import re
from pathlib import Path

from pulsar_txn.spark.options import SINK, SOURCE, SPARK

DOC = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()


def _table(section: str) -> dict[str, str]:
    """Option name (lower-cased) -> its default, from the docs' table of ``section``."""
    body = DOC.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in body.splitlines():
        if line.startswith("| `"):
            cells = line.split("|")
            for n in re.findall(r"`([^`]+)`", cells[1]):
                out[n.lower()] = _plain(cells[2])
    return out


def _plain(text: str) -> str:
    """Markdown and reStructuredText spell code differently; compare the words."""
    return " ".join(text.replace("`", "").split())


def _documented(section: str) -> set[str]:
    return {n for n in _table(section) if not n.endswith(".<name>")}


def _manual(section: str) -> dict[str, str]:
    """Option name (lower-cased) -> its default, from the ``<section> options`` part of
    the user manual, ``PulsarTxnDataSource``'s docstring (what ``help()`` shows)."""
    from pulsar_txn.spark import PulsarTxnDataSource

    doc = inspect.getdoc(PulsarTxnDataSource)
    parts = re.split(r"^(.+)\n-{3,}$", doc, flags=re.M)
    body = dict(zip(parts[1::2], parts[2::2]))[f"{section} options"]
    out = {}
    for line in body.splitlines():
        if line[:1].strip() and " : " in line:  # an option's line; its meaning is indented
            names, default = line.split(" : ", 1)
            for n in re.split(r"\s*[,/]\s*", names.strip()):
                out[n.lower()] = _plain(default)
    return out


def test_sink_options_are_documented_and_only_those():
    assert _documented("Sink") == SINK | SPARK


def test_source_options_are_documented_and_only_those():
    assert _documented("Source") == SOURCE | SPARK


def test_the_manual_lists_every_documented_sink_option_and_only_those_with_their_defaults():
    assert _manual("Sink") == _table("Sink")


def test_the_manual_lists_every_documented_source_option_and_only_those_with_their_defaults():
    assert _manual("Source") == _table("Source")


def test_enum_settings_pass_through_by_member_name_and_bad_ones_name_the_option():
    import pulsar
    import pytest

    from pulsar_txn.errors import ConfigError
    from pulsar_txn.spark.options import SinkOptions

    base = {"service.url": "pulsar://127.0.0.1:6650", "metastore.url": "redis://127.0.0.1:6379",
            "topic": "t"}
    opts = SinkOptions.from_options({**base, "pulsar.producer.compression_type": "lz4",
                                     "pulsar.producer.batching_max_messages": "10"})
    assert opts.producer == {"compression_type": pulsar.CompressionType.LZ4,
                             "batching_max_messages": 10}
    with pytest.raises(ConfigError, match="'pulsar.producer.compression_type' must be one of"):
        SinkOptions.from_options({**base, "pulsar.producer.compression_type": "gzip"})
