"""The sink's typed ``value`` (issue 29): a struct or primitive column is written under
the topic's schema, so a typed consumer (Java's ``Schema.AVRO(…)``, pulsar-client's
``AvroSchema(…)``) reads the output. The schema is the topic's registered one, or one
derived from the DataFrame (Avro for a struct), which the sink's producers register
with the broker as any Pulsar producer does. Binary and string columns keep today's
path: no lookup, no encoding.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import replace

import pulsar
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_type

from pulsar_txn.connection import naming
from pulsar_txn.errors import ConfigError
from pulsar_txn.schema_codec import check_writable
from pulsar_txn.schemas import Kind, RegistrySilent, TopicSchema, arrow_to_avro, lookup

from .options import SinkOptions, client_kwargs
from .partition_reader import schema_admin

log = logging.getLogger("pulsar_txn.spark.sink")

BYTES_TYPES = ("binary", "string")
TYPED = ("struct", "int", "bigint", "smallint", "tinyint", "float", "double", "boolean",
         "date", "timestamp")
_PRIMITIVE = [(pa.types.is_boolean, Kind.BOOLEAN), (pa.types.is_int8, Kind.INT8),
              (pa.types.is_int16, Kind.INT16), (pa.types.is_int32, Kind.INT32),
              (pa.types.is_int64, Kind.INT64), (pa.types.is_float32, Kind.FLOAT),
              (pa.types.is_float64, Kind.DOUBLE), (pa.types.is_date32, Kind.DATE),
              (pa.types.is_timestamp, Kind.TIMESTAMP)]
_PLANS: dict[tuple, tuple[float, TopicSchema | None]] = {}  # Spark makes a writer per micro-batch
_PLAN_TTL_S = 30.0
_lock = threading.Lock()


def is_typed(type_name: str) -> bool:
    return type_name.split("<", 1)[0] in TYPED


def with_sink_schema(opts: SinkOptions, schema, roles: dict[str, str]) -> SinkOptions:
    """Options carrying the value's schema to the tasks (None: bytes, today's path).
    String and binary columns are looked up only with option 'admin.url' (then a
    KEY_VALUE topic's STRING or BYTES halves are written as Java lays them out):
    without it they keep today's path, no lookup, written as given."""
    field = schema[roles["value"]]
    typed = is_typed(field.dataType.simpleString()) or (
        "key" in roles and is_typed(schema[roles["key"]].dataType.simpleString()))
    if not typed and not opts.admin_url:
        return opts
    if not opts.topic or opts.topic.startswith("topic://") or "topic" in roles:
        if not typed:
            return opts  # rows routed by a column: bytes as given
        raise ConfigError("a typed 'value' or 'key' column (struct or primitive) needs option "
                          "'topic' naming one plain or partitioned topic (not a 'topic' "
                          "column or a topic:// topic yet); write binary to route rows")
    arrow_t = to_arrow_type(field.dataType, timezone="UTC")  # instants: any zone reads
    key_t = (to_arrow_type(schema[roles["key"]].dataType, timezone="UTC") if "key" in roles
             else None)
    key = (opts.service_url, opts.topic, str(arrow_t), str(key_t))
    with _lock:
        cached = _PLANS.get(key)
    if cached is not None and time.monotonic() - cached[0] < _PLAN_TTL_S:
        return replace(opts, value_schema=cached[1])
    planned = plan(opts, arrow_t, key_t, typed)
    with _lock:
        _PLANS[key] = (time.monotonic(), planned)
    return replace(opts, value_schema=planned)


def plan(opts: SinkOptions, arrow_t: pa.DataType, key_t: pa.DataType | None = None,
         typed: bool = True) -> TopicSchema | None:
    """The topic's schema if it has one (the column checked against it, named), else
    one derived from the column. Untyped (string or binary) columns: the KEY_VALUE
    schema of a KEY_VALUE topic, else None (written as given)."""
    client = pulsar.Client(opts.service_url, **client_kwargs(opts))
    try:
        with naming(opts.service_url, what=f"looking up the schema of {opts.topic}"):
            topic_schema = lookup(client._client, opts.topic,
                                  timeout_s=opts.schema_lookup_timeout_ms / 1000,
                                  admin=schema_admin(opts))
    except RegistrySilent as e:
        log.warning("%s; the sink derives the value's schema from the DataFrame", e)
        topic_schema = None
    finally:
        client.close()
    if topic_schema is not None and topic_schema.is_key_value:
        check_key_value(topic_schema, arrow_t, key_t, opts.topic)
        return topic_schema
    if not typed:
        return None
    if key_t is not None and not (pa.types.is_string(key_t) or pa.types.is_binary(key_t)):
        has = ("no" if topic_schema is None or topic_schema.is_bytes
               else f"a {topic_schema.kind.name}")
        raise ConfigError(f"column 'key' is {key_t} and topic {opts.topic!r} has {has} "
                          "schema: only a KEY_VALUE topic takes a typed key; write the key "
                          "as string or binary")
    if topic_schema is not None and not topic_schema.is_bytes:
        check_writable(arrow_t, topic_schema, opts.topic)
        return topic_schema
    return derived(arrow_t, opts.topic)


def check_key_value(topic_schema: TopicSchema, arrow_t: pa.DataType,
                    key_t: pa.DataType | None, topic: str) -> None:
    """A KEY_VALUE topic takes the ``key`` column under the key's schema and the
    ``value`` column under the value's, INLINE (both in the payload, as Java's
    KeyValueSchema writes them). SEPARATED is refused: Java reads such a key only from
    a message key marked base64, a mark pulsar-client's Python producer cannot set."""
    if topic_schema.separated:
        raise ConfigError(
            f"topic {topic!r} has a SEPARATED KEY_VALUE schema: the sink cannot write it "
            "(Java's consumer reads the key from a message key marked base64, which "
            "pulsar-client's Python producer cannot mark); use an INLINE KEY_VALUE topic, "
            "or write a binary value column you encode yourself")
    if key_t is None:
        raise ConfigError(f"topic {topic!r} has a KEY_VALUE schema "
                          f"({topic_schema.describe()[:300]}): the DataFrame needs a 'key' "
                          f"column of its key's type ({topic_schema.key_arrow_type(topic)})")
    check_writable(key_t, topic_schema.key, topic, "key")
    check_writable(arrow_t, topic_schema, topic)


def derived(arrow_t: pa.DataType, topic: str) -> TopicSchema:
    """The schema a struct column is written with on a topic that has none. A primitive
    column needs the topic's schema registered first: pulsar-client's core registers
    only STRING, JSON, AVRO, PROTOBUF and KEY_VALUE schemas through a producer."""
    if pa.types.is_struct(arrow_t):
        return TopicSchema(Kind.AVRO, json.dumps(arrow_to_avro(arrow_t)))
    kind = next((k.name for test, k in _PRIMITIVE if test(arrow_t)), str(arrow_t))
    raise ConfigError(f"column 'value' is {arrow_t} and topic {topic!r} has no schema: the "
                      f"sink cannot register a {kind} schema (pulsar-client registers only "
                      "STRING, JSON and AVRO ones through a producer). Register it first "
                      f"(pulsar-admin schemas upload, or a Java producer with Schema.{kind}), "
                      "or write a struct (an Avro schema is derived and registered)")
