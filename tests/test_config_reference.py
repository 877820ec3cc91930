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
