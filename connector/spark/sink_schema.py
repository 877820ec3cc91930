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

log = logging.getLogger("pulsar_txn.spark.sink")

BYTES_TYPES = ("binary", "string")
TYPED = ("struct", "int", "bigint", "smallint", "tinyint", "float", "double", "boolean",
         "date", "timestamp")
_PRIMITIVE = [(pa.types.is_boolean, Kind.BOOLEAN), (pa.types.is_int8, Kind.INT8),
              (pa.types.is_int16, Kind.INT16), (pa.types.is_int32, Kind.INT32),
              (pa.types.is_int64, Kind.INT64), (pa.types.is_float32, Kind.FLOAT),
              (pa.types.is_float64, Kind.DOUBLE), (pa.types.is_date32, Kind.DATE),
              (pa.types.is_timestamp, Kind.TIMESTAMP)]
_PLANS: dict[tuple, tuple[float, TopicSchema]] = {}  # Spark makes a writer per micro-batch
_PLAN_TTL_S = 30.0
_lock = threading.Lock()


def is_typed(type_name: str) -> bool:
    return type_name.split("<", 1)[0] in TYPED


def with_sink_schema(opts: SinkOptions, schema, roles: dict[str, str]) -> SinkOptions:
    """Options carrying the value's schema to the tasks (None: bytes, today's path)."""
    field = schema[roles["value"]]
    if not is_typed(field.dataType.simpleString()):
        return opts
    if not opts.topic or opts.topic.startswith("topic://") or "topic" in roles:
        raise ConfigError("a typed 'value' column (struct or primitive) needs option 'topic' "
                          "naming one plain or partitioned topic (not a 'topic' column or a "
                          "topic:// topic yet); write binary to route rows")
    arrow_t = to_arrow_type(field.dataType, timezone="UTC")  # instants: any zone reads
    key = (opts.service_url, opts.topic, str(arrow_t))
    with _lock:
        cached = _PLANS.get(key)
    if cached is not None and time.monotonic() - cached[0] < _PLAN_TTL_S:
        return replace(opts, value_schema=cached[1])
    planned = plan(opts, arrow_t)
    with _lock:
        _PLANS[key] = (time.monotonic(), planned)
    return replace(opts, value_schema=planned)


def plan(opts: SinkOptions, arrow_t: pa.DataType) -> TopicSchema:
    """The topic's schema if it has one (the column checked against it, named), else
    one derived from the column."""
    client = pulsar.Client(opts.service_url, **client_kwargs(opts))
    try:
        with naming(opts.service_url, what=f"looking up the schema of {opts.topic}"):
            topic_schema = lookup(client._client, opts.topic,
                                  timeout_s=opts.schema_lookup_timeout_ms / 1000)
    except RegistrySilent as e:
        log.warning("%s; the sink derives the value's schema from the DataFrame", e)
        topic_schema = None
    finally:
        client.close()
    if topic_schema is not None and not topic_schema.is_bytes:
        check_writable(arrow_t, topic_schema, opts.topic)
        return topic_schema
    return derived(arrow_t, opts.topic)


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
