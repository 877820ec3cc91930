"""Options as Spark, Kafka and pulsar-spark users spell them: durations in Spark's
syntax, other connectors' names answered with ours, values checked when parsed."""

from __future__ import annotations

import pytest

from pulsar_txn.errors import ConfigError
from pulsar_txn.spark.options import SinkOptions, SourceOptions

BASE = {"service.url": "pulsar://localhost:6650", "metastore.url": "redis://localhost:6379",
        "topic": "t"}


def _source(**extra) -> SourceOptions:
    return SourceOptions.from_options({k.lower(): v for k, v in {**BASE, **extra}.items()})


def _sink(**extra) -> SinkOptions:
    return SinkOptions.from_options({k.lower(): v for k, v in {**BASE, **extra}.items()})


@pytest.mark.parametrize("raw,ms", [
    ("1h", 3_600_000), ("30 seconds", 30_000), ("30s", 30_000), ("2 minutes", 120_000),
    ("10min", 600_000), ("500ms", 500), ("500 milliseconds", 500), ("1d", 86_400_000),
    ("1 hour", 3_600_000), ("15m", 900_000), ("0", 0), ("250", 250), ("3 SECONDS", 3000),
])
def test_max_trigger_delay_takes_sparks_duration_syntax(raw, ms):
    assert _source(maxTriggerDelay=raw, minRecordsPerTrigger="5").max_trigger_delay_ms == ms


@pytest.mark.parametrize("raw", ["soon", "1 fortnight", "-5s", "1.5h", "s"])
def test_a_bad_max_trigger_delay_names_the_option_and_the_forms(raw):
    with pytest.raises(ConfigError, match=r"'maxTriggerDelay'.*'1h'.*'30 seconds'"):
        _source(maxTriggerDelay=raw)


@pytest.mark.parametrize("given,ours", [
    ("maxOffsetsPerTrigger", "maxRecordsPerTrigger"),
    ("minOffsetsPerTrigger", "minRecordsPerTrigger"),
    ("maxEntriesPerTrigger", "maxRecordsPerTrigger"),
    ("startingTime", "startingTimestamp"),
    ("startingOffsetsByTimestamp", "startingTimestamp"),
    ("subscribePattern", "topicsPattern"),
    ("kafka.bootstrap.servers", "service.url"),
    ("includeHeaders", "properties"),
    ("predefinedSubscription", "subscription"),
    ("maxRecordPerTrigger", "maxRecordsPerTrigger"),  # a typo of ours
    ("pulsar.client.operationTimeoutMs", "pulsar.client.operation_timeout_seconds"),
    ("pulsar.client.numIoThreads", "pulsar.client.io_threads"),
    ("pulsar.client.connectionTimeoutMs", "pulsar.client.connection_timeout_ms"),
])
def test_another_connectors_option_name_is_answered_with_ours(given, ours):
    with pytest.raises(ConfigError) as err:
        _source(**{given: "1"})
    msg = str(err.value)
    # Spark lower-cases keys: a name we do not know can only be shown as Spark passed it
    assert repr(given).lower() in msg.lower() and "did you mean" in msg and ours in msg, msg


def test_a_kafka_sink_option_is_answered_with_ours():
    with pytest.raises(ConfigError, match=r"'kafka.bootstrap.servers'.*did you mean.*service.url"):
        _sink(**{"kafka.bootstrap.servers": "localhost:9092"})


@pytest.mark.parametrize("key,value,expects", [
    ("pulsar.client.operation_timeout_seconds", "abc", "an integer"),
    ("pulsar.producer.batching_max_messages", "lots", "an integer"),
    ("pulsar.producer.block_if_queue_full", "1", "true or false"),
    ("pulsar.client.io_threads", "two", "an integer"),
    ("pulsar.client.io_threads", "1.5", "an integer"),
    ("pulsar.client.use_tls", "yes", "true or false"),
    ("pulsar.client.connection_timeout_ms", "10s", "an integer"),
])
def test_a_pulsar_client_setting_of_the_wrong_type_is_refused_when_parsed(key, value, expects):
    for parse in (_source, _sink) if key.startswith("pulsar.client.") else (_sink,):
        with pytest.raises(ConfigError) as err:
            parse(**{key: value})
        assert repr(key) in str(err.value) and expects in str(err.value), str(err.value)


def test_pulsar_client_settings_of_the_right_type_keep_their_type():
    opts = _source(**{"pulsar.client.operation_timeout_seconds": "45",
                      "pulsar.client.io_threads": "4", "pulsar.client.use_tls": "false"})
    assert opts.client == {"operation_timeout_seconds": 45, "io_threads": 4, "use_tls": False}


def test_auth_params_without_a_plugin_are_refused_when_parsed_without_showing_them():
    for parse in (_source, _sink):
        with pytest.raises(ConfigError) as err:
            parse(**{"pulsar.client.authParams": "token:s3cr3t-value"})
        msg = str(err.value)
        assert "pulsar.client.authParams" in msg and "pulsar.client.authPluginClassName" in msg
        assert "s3cr3t" not in msg


def test_an_unsupported_auth_plugin_is_refused_when_parsed_without_showing_it():
    with pytest.raises(ConfigError) as err:
        _source(**{"pulsar.client.authPluginClassName": "s3cr3t-by-mistake",
                   "pulsar.client.authParams": "x"})
    assert "pulsar.client.authPluginClassName" in str(err.value)
    assert "s3cr3t" not in str(err.value)


def test_min_records_above_max_records_is_refused():
    with pytest.raises(ConfigError, match=r"'minRecordsPerTrigger' \(50\).*'maxRecordsPerTrigger' "
                                          r"\(10\)"):
        _source(minRecordsPerTrigger="50", maxRecordsPerTrigger="10")
    opts = _source(minRecordsPerTrigger="10", maxRecordsPerTrigger="50")
    assert (opts.min_records, opts.max_records) == (10, 50)
