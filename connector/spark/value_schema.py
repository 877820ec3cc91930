"""The source's ``value`` column type, fixed once when a query is defined: Spark needs a
stable schema, so the topic's latest registered schema is looked up then and every
payload is later resolved into it (schema_codec.decode_column). A topic without a
schema, and a broker that keeps no registry, give today's binary ``value``.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pulsar
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import DataType, StructField, StructType

from pulsar_txn.connection import naming
from pulsar_txn.errors import ConfigError
from pulsar_txn.schemas import BYTES, RegistrySilent, TopicSchema, lookup

from .options import SourceOptions, client_kwargs
from .partition_reader import ARROW_SCHEMA, schema_admin

log = logging.getLogger("pulsar_txn.spark.source")


def plan_value_schema(opts: SourceOptions, strict: bool = False) -> TopicSchema:
    """The schema every topic of the query has (they must agree), BYTES for
    ``valueSchema=bytes``, a ``topicsPattern`` or scalable topic (their topics are not
    fixed when the query is defined), or a broker that answers no lookup in time."""
    if opts.value_schema == "bytes" or opts.pattern or any(
            t.startswith("topic://") for t in opts.topics):
        return BYTES
    client = pulsar.Client(opts.service_url, **client_kwargs(opts))
    try:
        found: dict[str, TopicSchema] = {}
        for topic in opts.topics:
            try:
                with naming(opts.service_url, what=f"looking up the schema of {topic}"):
                    found[topic] = lookup(client._client, topic,
                                          timeout_s=opts.schema_lookup_timeout_ms / 1000,
                                          admin=schema_admin(opts))
            except RegistrySilent as e:
                if strict:  # it answered when the query was defined: not a lite broker
                    raise RegistrySilent(f"{e} while the reader was made (it answered when "
                                         "the query was defined); start the query again"
                                         ) from None
                log.warning("%s; the value is read as bytes (option 'valueSchema=bytes' "
                            "says so without waiting)", e)
                return BYTES
    finally:
        client.close()
    if len(set(found.values())) > 1:
        shown = "; ".join(f"{t}: {s.describe()[:200]}" for t, s in sorted(found.items()))
        raise ConfigError(f"the topics of the query have different schemas ({shown}): read "
                          "them in separate queries, or set option 'valueSchema' to 'bytes'")
    planned = next(iter(found.values()))
    planned.arrow_type(opts.topics[0])  # a schema with no column type fails here, named
    return planned


# The key column's metadata when the topic has a KEY_VALUE schema: KEY_VALUE<STRING,
# BYTES> has the columns of a topic without a schema (key string, value binary), which
# with_planned would otherwise take for bytes without looking the schema up. Spark
# hands the reader the schema it planned, metadata included (and Spark runs the
# planning and the reader in different Python workers: nothing else carries over).
KEY_VALUE_MARK = {"pulsar.schema": "KEY_VALUE"}


def spark_schema(planned: TopicSchema, topic: str) -> StructType:
    """The source's output schema with ``value`` typed by ``planned`` (and ``key``, by a
    KEY_VALUE schema's key)."""
    mark = KEY_VALUE_MARK if planned.is_key_value else None
    return StructType([StructField(f.name, value_type(planned, topic) if f.name == "value"
                                   else key_type(planned, topic) if f.name == "key"
                                   else from_arrow_type(f.type), True,
                                   mark if f.name == "key" else None)
                       for f in ARROW_SCHEMA])


def value_type(planned: TopicSchema, topic: str) -> DataType:
    return from_arrow_type(planned.arrow_type(topic), prefer_timestamp_ntz=True)


def key_type(planned: TopicSchema, topic: str) -> DataType:
    return from_arrow_type(planned.key_arrow_type(topic), prefer_timestamp_ntz=True)


def with_planned(opts: SourceOptions, schema: StructType | None) -> SourceOptions:
    """Options carrying the value's planned schema to the executors. Spark hands the
    reader the schema ``DataSource.schema`` returned; a topic whose schema changed in
    between (or since, for a restarted reader) fails here rather than decode wrongly."""
    want = None if schema is None else schema["value"].dataType
    if want is None or (want.typeName() == "binary"
                        and schema["key"].dataType.typeName() == "string"
                        and schema["key"].metadata != KEY_VALUE_MARK):
        return replace(opts, planned=BYTES)
    planned = plan_value_schema(opts, strict=True)
    if planned.is_bytes or value_type(planned, opts.topics[0]) != want or (
            key_type(planned, opts.topics[0]) != schema["key"].dataType):
        raise ConfigError(f"topic(s) {', '.join(opts.topics)}: the value's schema changed "
                          f"while the query was being defined (it planned "
                          f"{want.simpleString()}, the registry now has "
                          f"{planned.describe()[:300]}); define the query again")
    return replace(opts, planned=planned)
