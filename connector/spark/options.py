"""Options of the ``pulsar-txn`` data source, parsed once into frozen dataclasses.

Spark hands options over lower-cased, as strings. Every unknown key is an error
that names it, and every malformed value names the option and what it expects.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

import pulsar

from pulsar_txn.admin import check_admin_url
from pulsar_txn.connection import (
    authentication,
    check_service_url,
    is_supported_auth,
    quiet_logger,
)
from pulsar_txn.errors import ConfigError
from pulsar_txn.metastore.redis_url import redact_url
from pulsar_txn.records import Position
from pulsar_txn.spark.option_values import (
    FOREIGN_LOWER,
    JAVA_CLIENT_NAMES,
    bool_option,
    did_you_mean,
    duration_ms,
    int_option,
    shown,
    typed_value,
)
from pulsar_txn.topics import is_scalable, normalize_any, normalize_scalable, normalize_topic

# Spark's own options reach the source too; accepted and interpreted by Spark.
if TYPE_CHECKING:  # the CLI imports this module without the spark extra (no pyarrow)
    from pulsar_txn.schemas import TopicSchema

SPARK = {"path", "checkpointlocation", "queryname"}
COMMON = {"service.url", "metastore.url", "metastore.namespace",
          "pulsar.client.authpluginclassname", "pulsar.client.authparams"} | SPARK
SINK = COMMON | {"topic", "transaction.timeout.ms", "sink.id", "sink.id.rebind", "sink.fault",
                 "transactional", "transaction.retention.ms", "schemalookuptimeoutms",
                 "admin.url"}
SOURCE = COMMON | {"transaction.retention.ms",
                   "topic", "topics", "topicspattern", "startingoffsets", "endingoffsets",
                   "maxrecordspertrigger", "maxbytespertrigger", "minrecordspertrigger",
                   "maxtriggerdelay", "startingtimestamp", "failondataloss", "datatimeoutms",
                   "minpartitions", "subscription", "admin.url", "read.foreigndeployments",
                   "valueschema", "schemalookuptimeoutms"}


# Authentication, as pulsar-spark names it (values are secrets: never shown).
AUTH_PLUGIN, AUTH_PARAMS = "pulsar.client.authpluginclassname", "pulsar.client.authparams"

_JAVA_ALIASES = {k.lower(): v for k, v in JAVA_CLIENT_NAMES.items()}



def client_kwargs(opts) -> dict:
    """pulsar.Client keyword arguments of source or sink options, with the
    authentication object built here (options travel to executors as strings)."""
    kw = {"logger": quiet_logger(), **opts.client}
    auth = authentication(opts.auth_plugin, opts.auth_params)
    if auth is not None:
        kw["authentication"] = auth
    return kw


def query_id_of_checkpoint(location: str) -> str:
    """The Spark query id recorded in a (local) checkpoint's ``metadata`` file.

    Spark writes it when a query first starts at a checkpoint and keeps it across
    restarts; a deleted and re-created checkpoint gets a new one. Every spelling of
    the location (``file:`` URLs, relative paths, ``//``, ``..``) reads the same file.
    """
    path = location
    if location.startswith("file:"):
        path = unquote(urlparse(location).path)
    elif "://" in location:
        raise ConfigError(f"checkpoint location {location!r}: only local paths and file: URLs "
                          "can be read here; pass the sink id ('query-<query id>') instead")
    meta = os.path.join(os.path.realpath(os.path.abspath(path)), "metadata")
    try:
        with open(meta) as f:
            return str(json.loads(f.readline())["id"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"checkpoint location {location!r}: no Spark query metadata at {meta} "
                          f"({e.__class__.__name__}); has a query run there?") from None


def sink_id_for_checkpoint(location: str) -> str:
    """The default sink id of the query that owns a checkpoint: ``query-<query id>``."""
    return default_sink_id(query_id_of_checkpoint(location))


def default_sink_id(query_id: str) -> str:
    """The default sink id follows Spark's query identity: it changes exactly when the
    query does (a new checkpoint), never with how the checkpoint path is spelled."""
    return f"query-{query_id}"


def _passthrough(opts: dict[str, str], prefix: str, target) -> dict:
    """``pulsar.producer.batching_max_messages=500`` → ``{"batching_max_messages": 500}``.

    Settings whose default is one of pulsar-client's enums take the member's name
    (``pulsar.producer.compression_type=LZ4``, any case).
    """
    sig = inspect.signature(target).parameters
    params = set(sig) - {"self", "topic", "service_url", "authentication"}
    out = {}
    for key, value in opts.items():
        if key in (AUTH_PLUGIN, AUTH_PARAMS):
            continue  # built into an authentication object where a client is made
        if key.startswith(prefix):
            name = key[len(prefix):]
            if prefix == "pulsar.client.":
                name = _JAVA_ALIASES.get(name, name)
            if name in out:
                raise ConfigError(f"option {shown(key)!r} is given twice (also as "
                                  f"'{prefix}{name}')")
            if name not in params:
                raise ConfigError(
                    f"option {shown(key)!r}: {name!r} is not a pulsar-client setting"
                    f"{did_you_mean(key, {prefix + p for p in params})}; "
                    f"known: {', '.join(sorted(params))}")
            out[name] = typed_value(key, value, sig[name].default)
    return out


def _required(opts: dict[str, str], key: str) -> str:
    value = opts.get(key)
    if not value:
        raise ConfigError(f"option {shown(key)!r} is required")
    return value


def _checked(options, role: str, known: set[str], prefixes: tuple[str, ...]
             ) -> tuple[dict[str, str], str, str]:
    """Lower-case the options, refuse unknown ones, validate the two endpoints."""
    opts = _lower(options)
    unknown = [k for k in opts if k not in known and not k.startswith(prefixes)]
    unknown += [k for k in opts if k.startswith("pulsar.client.") and k in FOREIGN_LOWER]
    if unknown:
        named = ", ".join(f"{shown(k)!r}{did_you_mean(k, known)}" for k in unknown)
        raise ConfigError(f"unknown option(s) for the pulsar-txn {role}: {named}; "
                          f"known: {', '.join(sorted(shown(k) for k in known))}, "
                          f"{', '.join(p + '*' for p in prefixes)}")
    _check_auth(opts)
    service = check_service_url(_required(opts, "service.url"))
    metastore = _required(opts, "metastore.url")
    if not metastore.startswith(("redis://", "rediss://", "unix://", "redis+cluster://",
                                 "rediss+cluster://")):
        raise ConfigError(f"option 'metastore.url' must be redis://, rediss://, unix:// or "
                          f"redis+cluster:// (rediss+cluster://), got {redact_url(metastore)!r}")
    return opts, service, metastore


def _check_auth(opts: dict[str, str]) -> None:
    """Authentication options checked when parsed (names only: the values are secrets)."""
    plugin, params = opts.get(AUTH_PLUGIN), opts.get(AUTH_PARAMS)
    if params and not plugin:
        raise ConfigError(f"option {shown(AUTH_PARAMS)!r} is set but "
                          f"{shown(AUTH_PLUGIN)!r} is not; set both (the plugin: token, tls, "
                          "oauth2 or their Java class names)")
    if plugin and not is_supported_auth(plugin):
        raise ConfigError(f"option {shown(AUTH_PLUGIN)!r} names an unsupported plugin; "
                          "supported: token, tls, oauth2 or their Java class names")


def _lower(options) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


@dataclass(frozen=True)
class SinkOptions:
    service_url: str = field(repr=False)  # may hold a token (?token=): never shown
    metastore_url: str = field(repr=False)  # may hold a password: never shown
    namespace: str = "ptxn"
    topic: str | None = None
    timeout_ms: int = 60_000
    sink_id: str | None = None
    producer: dict = field(default_factory=dict)
    client: dict = field(default_factory=dict)
    auth_plugin: str | None = field(default=None, repr=False)
    auth_params: str | None = field(default=None, repr=False)  # a secret: never shown
    rebind: bool = False  # sink.id.rebind: move an explicit sink.id to this query
    retention_ms: int = 3_600_000  # transaction.retention.ms: GC of finalized txns
    transactional: bool = True  # false: plain at-least-once appends (a benchmark baseline)
    value_schema: TopicSchema | None = None  # a typed value's (sink_schema.py); None: bytes
    schema_lookup_timeout_ms: int = 2_000
    admin_url: str | None = field(default=None, repr=False)  # may hold credentials
    fault: str = ""  # test seam: "crash-after-commit:<batchId>" / "crash-before-commit:<batchId>"

    @classmethod
    def from_options(cls, options) -> SinkOptions:
        opts, service, metastore = _checked(options, "sink", SINK,
                                            ("pulsar.producer.", "pulsar.client."))
        topic = opts.get("topic") or opts.get("path") or None
        if topic is not None:  # refused before anything is written
            try:
                normalize_any(topic)
            except ConfigError as e:
                raise ConfigError(f"option 'topic': {e}") from None
        sink_id = opts.get("sink.id") or None
        if sink_id is not None and ("|" in sink_id or "\n" in sink_id):
            raise ConfigError(f"option 'sink.id' must not contain '|' or newlines: {sink_id!r}")
        return cls(
            service_url=service, metastore_url=metastore,
            namespace=opts.get("metastore.namespace") or "ptxn",
            topic=topic,
            timeout_ms=int_option(opts, "transaction.timeout.ms", 60_000, minimum=1),
            sink_id=sink_id,
            producer=_passthrough(opts, "pulsar.producer.", pulsar.Client.create_producer),
            client=_passthrough(opts, "pulsar.client.", pulsar.Client.__init__),
            auth_plugin=opts.get(AUTH_PLUGIN) or None, auth_params=opts.get(AUTH_PARAMS) or None,
            fault=opts.get("sink.fault", ""),
            schema_lookup_timeout_ms=int_option(opts, "schemalookuptimeoutms", 2_000,
                                                minimum=1),
            admin_url=check_admin_url(opts.get("admin.url"), "option 'admin.url'"),
            rebind=bool_option(opts, "sink.id.rebind", False),
            retention_ms=int_option(opts, "transaction.retention.ms", 3_600_000),
            transactional=bool_option(opts, "transactional", True),
        )


def _position(raw: str, key: str) -> Position:
    try:
        return Position.parse(str(raw))
    except ValueError:
        raise ConfigError(f"option {shown(key)!r}: position {raw!r} must be "
                          "'ledgerId:entryId[:batch]'") from None


def _offsets(opts: dict[str, str], key: str) -> str | dict[str, Position] | None:
    """'earliest' | 'latest' | JSON {"topic": "ledgerId:entryId[:batch]"} (last entry read)."""
    raw = opts.get(key)
    if raw is None or raw == "":
        return None
    if raw.lower() in ("earliest", "latest"):
        return raw.lower()
    try:
        parsed = json.loads(raw)
    except ValueError:
        raise ConfigError(f"option {shown(key)!r} must be 'earliest', 'latest' or JSON "
                          f'{{"<topic>": "<ledgerId>:<entryId>"}}, got {raw!r}') from None
    if not isinstance(parsed, dict):
        raise ConfigError(f"option {shown(key)!r}: JSON must be an object of topic -> position")
    return {normalize_topic(t): _position(v, key) for t, v in parsed.items()}


def _default(value: int | None, default: int) -> int:
    """``0`` is a value, not "unset"."""
    return default if value is None else value


@dataclass(frozen=True)
class SourceOptions:
    service_url: str = field(repr=False)  # may hold a token (?token=): never shown
    metastore_url: str = field(repr=False)  # may hold a password: never shown
    namespace: str
    topics: tuple[str, ...]
    starting: str | dict = "latest"
    ending: str | dict | None = None
    max_records: int | None = None
    min_records: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    starting_timestamp_ms: int | None = None
    fail_on_data_loss: bool = True
    data_timeout_ms: int = 30_000  # how long a planned entry may take to arrive
    min_partitions: int | None = None  # None: one per core (offsets.plan_partitions)
    client: dict = field(default_factory=dict)
    auth_plugin: str | None = field(default=None, repr=False)
    auth_params: str | None = field(default=None, repr=False)  # a secret: never shown
    reader: dict = field(default_factory=dict)
    max_bytes: int | None = None
    pattern: str | None = None  # topicsPattern: re-resolved at every trigger
    subscription: str | None = None
    admin_url: str | None = field(default=None, repr=False)  # may hold credentials
    retention_ms: int = 3_600_000  # transaction.retention.ms: the driver's GC
    skip_foreign: bool = False  # read.foreignDeployments=skip (deployments.py)
    value_schema: str = "auto"  # valueSchema: the registry's schema, or 'bytes'
    schema_lookup_timeout_ms: int = 2_000
    planned: TopicSchema | None = None  # the value's schema, fixed when the query is defined

    @classmethod
    def from_options(cls, options, batch: bool = False) -> SourceOptions:


        opts, service, metastore = _checked(options, "source", SOURCE,
                                            ("pulsar.client.", "pulsar.reader."))
        given = [k for k in ("topic", "topics", "topicspattern", "path") if opts.get(k)]
        if len(given) != 1:
            raise ConfigError("set exactly one of the options 'topic', 'topics' or "
                              f"'topicsPattern' (got {given or 'none'})")
        pattern = None
        if given[0] == "topicspattern":
            pattern = opts["topicspattern"]
            try:
                re.compile(pattern)
            except re.error as e:
                raise ConfigError(f"option 'topicsPattern' is not a regular expression: "
                                  f"{pattern!r} ({e})") from None
            raw_topics = []
        else:
            raw_topics = (opts[given[0]].split(",") if given[0] == "topics"
                          else [opts[given[0]]])

        def norm(t: str) -> str:
            try:
                return ("topic://" + normalize_scalable(t) if is_scalable(t)
                        else normalize_topic(t))
            except ConfigError as e:
                raise ConfigError(f"option {shown(given[0])!r}: {e}") from None

        topics = tuple(sorted({norm(t.strip()) for t in raw_topics if t.strip()}))
        subscription = opts.get("subscription") or None
        if subscription is not None and (batch or not re.match(r"^[A-Za-z0-9_.\-]{1,200}$",
                                                                subscription)):
            raise ConfigError("option 'subscription' must be a Pulsar subscription name "
                              "(letters, digits, '_', '-', '.') and applies to streaming "
                              f"queries only, got {subscription!r}")
        starting = _offsets(opts, "startingoffsets") or ("earliest" if batch else "latest")
        ts = int_option(opts, "startingtimestamp", None)
        if ts is not None and opts.get("startingoffsets"):
            raise ConfigError("set only one of the options 'startingOffsets' and "
                              "'startingTimestamp'")
        ending = _offsets(opts, "endingoffsets")
        if not batch and ending is not None:
            raise ConfigError("option 'endingOffsets' applies to batch queries only")
        if ending == "earliest":
            raise ConfigError("option 'endingOffsets' cannot be 'earliest'")
        for offs, key in ((starting, "startingOffsets"), (ending, "endingOffsets")):
            unread = {t for t in offs if re.sub(r"-partition-\d+$", "", t) not in topics
                      } if isinstance(offs, dict) else set()
            if pattern is None and not any(t.startswith("topic://") for t in topics) and unread:
                raise ConfigError(f"option {shown(key)!r} names topics that are not read: "
                                  f"{sorted(unread)}")
        max_records = int_option(opts, "maxrecordspertrigger", None, minimum=1)
        min_records = int_option(opts, "minrecordspertrigger", None, minimum=1)
        if None not in (max_records, min_records) and min_records > max_records:
            raise ConfigError(f"option 'minRecordsPerTrigger' ({min_records}) is above "
                              f"'maxRecordsPerTrigger' ({max_records}): no batch could hold it")
        return cls(
            service_url=service, metastore_url=metastore,
            namespace=opts.get("metastore.namespace") or "ptxn", topics=topics,
            retention_ms=int_option(opts, "transaction.retention.ms", 3_600_000),
            starting=starting, ending=ending,
            max_records=max_records, min_records=min_records,
            max_trigger_delay_ms=_default(duration_ms(opts, "maxtriggerdelay"), 15 * 60_000),
            starting_timestamp_ms=ts,
            fail_on_data_loss=bool_option(opts, "failondataloss", True),
            data_timeout_ms=int_option(opts, "datatimeoutms", 30_000, minimum=100),
            min_partitions=int_option(opts, "minpartitions", None, minimum=1),
            client=_passthrough(opts, "pulsar.client.", pulsar.Client.__init__),
            auth_plugin=opts.get(AUTH_PLUGIN) or None, auth_params=opts.get(AUTH_PARAMS) or None,
            reader=_passthrough(opts, "pulsar.reader.", _reader_settings),
            max_bytes=int_option(opts, "maxbytespertrigger", None, minimum=1),
            pattern=pattern, subscription=subscription,
            admin_url=check_admin_url(opts.get("admin.url"), "option 'admin.url'"),
            skip_foreign=_foreign_deployments(opts),
            value_schema=_value_schema(opts),
            schema_lookup_timeout_ms=int_option(opts, "schemalookuptimeoutms", 2_000,
                                                minimum=1),
        )


def _value_schema(opts: dict[str, str]) -> str:
    """``valueSchema``: ``auto`` (the topic's registered schema) or ``bytes``."""
    raw = (opts.get("valueschema") or "auto").strip().lower()
    if raw not in ("auto", "bytes"):
        raise ConfigError(f"option 'valueSchema' must be 'auto' or 'bytes', got {raw!r}")
    return raw


def _foreign_deployments(opts: dict[str, str]) -> bool:
    """``read.foreignDeployments``: ``fail`` (default) or ``skip`` (see deployments.py)."""
    raw = (opts.get("read.foreigndeployments") or "fail").strip().lower()
    if raw not in ("fail", "skip"):
        raise ConfigError(f"option 'read.foreignDeployments' must be 'fail' or 'skip', "
                          f"got {raw!r}")
    return raw == "skip"


def _reader_settings(receiver_queue_size=None, reader_name=None, subscription_role_prefix=None):
    """The ``pulsar.reader.*`` settings the source passes to ``Client.create_reader``.

    The start position, listener and schema are the source's own; compacted reads
    are refused because they would break stable replay (invariant 3).
    """
