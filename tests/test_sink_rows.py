"""Rows the sink refuses before anything is appended: the protocol's properties."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.errors import ConfigError
from pulsar_txn.metastore import MemoryMetadataStore
from pulsar_txn.producer import user_props
from pulsar_txn.spark.options import SinkOptions
from pulsar_txn.spark.sink_task import refuse_reserved, write_rows

# nothing listens here: a refused batch must fail before any connection is tried
OPTS = {"service.url": "pulsar://127.0.0.1:9", "metastore.url": "redis://127.0.0.1:9",
        "topic": "t"}


@pytest.mark.parametrize("transactional", [False, True])
@pytest.mark.parametrize("key", ["__ptxn.txn", "__ptxn.t", "__ptxn.anything"])
def test_a_row_carrying_a_protocol_property_is_refused_by_column_and_name(key, transactional):
    """A user property named like the protocol's would make a plain row look
    transactional, or a transactional one malformed (never delivered): refused."""
    store = MemoryMetadataStore()
    txn = TransactionCoordinator(store).new_transaction().txn_id if transactional else None
    props = pa.array([[("a", "1")], [(key, "v5:0:1")]], pa.map_(pa.string(), pa.string()))
    batch = pa.RecordBatch.from_arrays([pa.array([b"x", b"y"]), props],
                                       names=["value", "props"])
    opts = SinkOptions.from_options(OPTS)
    with pytest.raises(ConfigError, match=rf"column 'props'.*'{key}'.*reserved"):
        write_rows(opts, {"value": "value", "properties": "props"}, [batch], txn, "w", store)


def test_only_the_batchs_own_rows_are_checked_for_protocol_properties():
    """A slice, or a null map over stored keys, holds no protocol property: not refused."""
    props = pa.array([[("__ptxn.txn", "x")], [("a", "1")]], pa.map_(pa.string(), pa.string()))
    batch = pa.RecordBatch.from_arrays([pa.array([b"x", b"y"]), props],
                                       names=["value", "props"]).slice(1, 1)
    refuse_reserved(batch, {"value": "value", "properties": "props"})
    masked = pa.MapArray.from_arrays(props.offsets, props.keys, props.items,
                                     mask=pa.array([True, False]))
    refuse_reserved(pa.RecordBatch.from_arrays([pa.array([b"x", b"y"]), masked],
                                               names=["value", "props"]),
                    {"value": "value", "properties": "props"})
    # a slice with a null map, after rows that hold one: checked, not crashed on
    mixed = pa.array([[("a", "1")], [("__ptxn.txn", "x")], None, [("b", "2")]],
                     pa.map_(pa.string(), pa.string()))
    roles = {"value": "value", "properties": "props"}
    values = pa.array([b"w", b"x", b"y", b"z"])
    whole = pa.RecordBatch.from_arrays([values, mixed], names=["value", "props"])
    for start, length in ((2, 2), (2, 1), (3, 1)):
        refuse_reserved(whole.slice(start, length), roles)
    with pytest.raises(ConfigError, match="'__ptxn.txn'"):
        refuse_reserved(whole.slice(1, 2), roles)


def test_the_client_producer_refuses_a_protocol_property_by_name():
    with pytest.raises(ConfigError, match="'__ptxn.x'.*reserved"):
        user_props({"a": 1, "__ptxn.x": "1"})
    assert user_props({"a": 1}) == {"a": "1"}


def _schema(ddl: str):
    """A Spark schema from 'name type, …' (the few types the sink reads; no session)."""
    from pyspark.sql import types as T

    kinds = {"string": T.StringType(), "binary": T.BinaryType(), "int": T.IntegerType(),
             "timestamp": T.TimestampType(),
             "map<string,string>": T.MapType(T.StringType(), T.StringType())}
    return T.StructType([T.StructField(n, kinds[k]) for n, k in
                         (f.strip().split(" ", 1) for f in ddl.split(", "))])


def test_the_sink_ignores_the_sources_columns_but_refuses_a_misspelled_or_kafka_one():
    """Columns the sink does not use are ignored (Kafka's convention: a source's output
    is written back as read), but a column that looks meant for it is refused: a
    misspelled 'key' or Kafka's 'headers'/'partition' would otherwise be dropped
    silently (messages without their key or properties)."""
    import pytest

    from pulsar_txn.errors import ConfigError
    from pulsar_txn.spark.options import SinkOptions
    from pulsar_txn.spark.sink_task import check_sink_schema

    opts = SinkOptions.from_options({"service.url": "pulsar://localhost:6650",
                                     "metastore.url": "redis://localhost:1", "topic": "t"})
    source_row = ("key string, value binary, topic string, segment string, messageId string, "
                  "publishTime timestamp, eventTime timestamp, properties map<string,string>, "
                  "txnId string")
    assert set(check_sink_schema(_schema(source_row), opts)) == {
        "key", "value", "topic", "eventtime", "properties"}
    for ddl, named, hint in [("value binary, kye string", "kye", "'key'"),
                             ("value binary, headers map<string,string>", "headers",
                              "'properties'"),
                             ("value binary, partition int", "partition", "'key'"),
                             ("value binary, proprties map<string,string>", "proprties",
                              "'properties'")]:
        with pytest.raises(ConfigError) as err:
            check_sink_schema(_schema(ddl), opts)
        assert repr(named) in str(err.value) and hint in str(err.value), str(err.value)
    with pytest.raises(ConfigError, match=r"'value'.*columns: payload, key"):
        check_sink_schema(_schema("payload binary, key string"), opts)
