"""Option values as users write them: integers, booleans, Spark durations, pulsar-client
settings typed as its defaults, and names as the docs spell them (Spark lower-cases keys),
with other connectors' names answered by ours."""

from __future__ import annotations

import difflib
import re

from pulsar_txn.errors import ConfigError

# TLS settings under the Java client's names (pulsar-spark's users know these),
# accepted next to pulsar-client's own (``pulsar.client.tls_trust_certs_file_path``).
JAVA_CLIENT_NAMES = {
    "tlsTrustCertsFilePath": "tls_trust_certs_file_path",
    "tlsAllowInsecureConnection": "tls_allow_insecure_connection",
    "tlsHostnameVerificationEnable": "tls_validate_hostname",
    "useTls": "use_tls",
    "tlsCertificateFilePath": "tls_certificate_file_path",
    "tlsKeyFilePath": "tls_private_key_file_path",
}

# Other connectors' option names (Kafka's, pulsar-spark's, the Java client's), answered
# with ours: close enough to be meant, different enough that guessing would be wrong
# (pulsar-spark counts entries, the Java client milliseconds where ours takes seconds).
FOREIGN = {
    "maxOffsetsPerTrigger": "maxRecordsPerTrigger",
    "minOffsetsPerTrigger": "minRecordsPerTrigger",
    "maxEntriesPerTrigger": "maxRecordsPerTrigger (messages, not entries)",
    "startingTime": "startingTimestamp",
    "startingOffsetsByTimestamp": "startingTimestamp",
    "startingOffsetsByTimestampStrategy": "startingTimestamp",
    "subscribe": "topics", "assign": "topics",
    "subscribePattern": "topicsPattern",
    "kafka.bootstrap.servers": "service.url", "serviceUrl": "service.url",
    "adminUrl": "admin.url",
    "includeHeaders": "the 'properties' column (always read; no option needed)",
    "predefinedSubscription": "subscription",
    "pollTimeoutMs": "dataTimeoutMs",
    "pulsar.client.serviceUrl": "service.url",
    "pulsar.client.operationTimeoutMs": "pulsar.client.operation_timeout_seconds (seconds)",
    "pulsar.client.numIoThreads": "pulsar.client.io_threads",
    "pulsar.client.numListenerThreads": "pulsar.client.message_listener_threads",
    "pulsar.client.concurrentLookupRequest": "pulsar.client.concurrent_lookup_requests",
    "pulsar.client.connectionTimeoutMs": "pulsar.client.connection_timeout_ms",
    "pulsar.client.statsIntervalSeconds": "pulsar.client.stats_interval_in_seconds",
    "pulsar.client.listenerName": "pulsar.client.listener_name",
}
FOREIGN_LOWER = {k.lower(): v for k, v in FOREIGN.items()}

# Spark lower-cases option keys; errors name them as the docs spell them.
DOCUMENTED = {n.lower(): n for n in (
    *FOREIGN,
    *(f"pulsar.client.{k}" for k in JAVA_CLIENT_NAMES),
    "pulsar.client.authPluginClassName", "pulsar.client.authParams",
    "startingOffsets", "endingOffsets", "maxRecordsPerTrigger", "maxBytesPerTrigger",
    "minRecordsPerTrigger", "maxTriggerDelay", "startingTimestamp", "failOnDataLoss",
    "dataTimeoutMs", "minPartitions", "topicsPattern", "checkpointLocation", "queryName",
    "read.foreignDeployments")}



def shown(key: str) -> str:
    """An option key as documented (``startingoffsets`` → ``startingOffsets``)."""
    return DOCUMENTED.get(key, key)


def int_option(opts: dict[str, str], key: str, default: int | None, minimum: int = 0) -> int | None:
    raw = opts.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"option {shown(key)!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"option {shown(key)!r} must be >= {minimum}, got {value}")
    return value


def bool_option(opts: dict[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None or raw == "":
        return default
    if raw.lower() not in ("true", "false"):
        raise ConfigError(f"option {shown(key)!r} must be true or false, got {raw!r}")
    return raw.lower() == "true"


def _coerce(value: str):
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def typed_value(key: str, value: str, default):
    """A pass-through value as the type of pulsar-client's default: checked here, so a
    wrong one is refused when the query starts, not when an executor makes a client."""
    members = getattr(type(default), "__members__", None)
    if members:
        by_name = {m.lower(): v for m, v in members.items()}
        if value.lower() not in by_name:
            raise ConfigError(f"option {shown(key)!r} must be one of {', '.join(members)}, "
                              f"got {value!r}")
        return by_name[value.lower()]
    if isinstance(default, bool):
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"option {shown(key)!r} must be true or false, got {value!r}")
        return value.lower() == "true"
    if isinstance(default, int):
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"option {shown(key)!r} must be an integer, got {value!r}") from None
    if isinstance(default, float):
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"option {shown(key)!r} must be a number, got {value!r}") from None
    return _coerce(value)


def did_you_mean(key: str, known: set[str]) -> str:
    """`` (did you mean '<ours>'?)`` for another connector's name or a near miss of ours."""
    if key in FOREIGN_LOWER:
        return f" (did you mean {FOREIGN_LOWER[key]}?)"
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
    return f" (did you mean {shown(close[0])!r}?)" if close else ""


_MS = {"": 1, "ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1,
       "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
       "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
       "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
       "d": 86_400_000, "day": 86_400_000, "days": 86_400_000}
_DURATION = re.compile(r"\s*(\d+)\s*([a-z]*)\s*")


def duration_ms(opts: dict[str, str], key: str) -> int | None:
    """Spark's duration forms: its config syntax (``15m``, ``1h``, ``500ms``) and its
    trigger syntax (``30 seconds``, ``1 hour``); a plain number is milliseconds."""
    raw = opts.get(key)
    if raw is None or raw == "":
        return None
    m = _DURATION.fullmatch(raw.lower())
    if m is None or m.group(2) not in _MS:
        raise ConfigError(f"option {shown(key)!r} must be a duration like '1h', '30 seconds', "
                          f"'500ms', '5m' or '1d' (a plain number is milliseconds), got {raw!r}")
    return int(m.group(1)) * _MS[m.group(2)]
