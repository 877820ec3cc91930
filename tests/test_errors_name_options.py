"""Errors a user can act on: options named as documented, bad topics refused at parse."""

from __future__ import annotations

import pytest

from pulsar_txn.errors import ConfigError
from pulsar_txn.spark.options import SinkOptions, SourceOptions

BASE = {"service.url": "pulsar://localhost:6650", "metastore.url": "redis://localhost:6379"}


def _lower(d: dict) -> dict:
    return {k.lower(): v for k, v in d.items()}  # what Spark hands over


@pytest.mark.parametrize("key,value,named", [
    ("startingOffsets", "yesterday", "startingOffsets"),
    ("maxRecordsPerTrigger", "many", "maxRecordsPerTrigger"),
    ("failOnDataLoss", "perhaps", "failOnDataLoss"),
    ("maxTriggerDelay", "soon", "maxTriggerDelay"),
    ("dataTimeoutMs", "10", "dataTimeoutMs"),
    ("minPartitions", "-1", "minPartitions"),
])
def test_source_errors_name_the_option_as_documented(key, value, named):
    with pytest.raises(ConfigError) as err:
        SourceOptions.from_options(_lower({**BASE, "topic": "t", key: value}))
    assert repr(named) in str(err.value), str(err.value)


def test_max_trigger_delay_zero_means_zero_not_the_default():
    opts = SourceOptions.from_options(_lower({**BASE, "topic": "t", "maxTriggerDelay": "0",
                                              "minRecordsPerTrigger": "10"}))
    assert opts.max_trigger_delay_ms == 0


@pytest.mark.parametrize("topic", ["a b", "persistent://public/default/x y",
                                   "persistent://pub lic/default/x", "tab\there"])
def test_invalid_topic_names_are_refused_when_options_are_parsed(topic):
    with pytest.raises(ConfigError, match="option 'topic'"):
        SourceOptions.from_options(_lower({**BASE, "topic": topic}))
    with pytest.raises(ConfigError, match="option 'topic'"):
        SinkOptions.from_options(_lower({**BASE, "topic": topic}))
    with pytest.raises(ConfigError, match="option 'topics'"):
        SourceOptions.from_options(_lower({**BASE, "topics": f"ok,{topic}"}))
