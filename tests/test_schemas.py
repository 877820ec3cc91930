"""The schema codec (issue 29) against fastavro and pulsar-client's own schema classes:
what the sink encodes a typed pulsar-client consumer decodes, what Java's primitive
schemas write the source decodes, a field added with a default reads from old
payloads, and a payload or column the schema cannot take is named, never guessed."""

from __future__ import annotations

import datetime as dt
import io
import json
import struct

import fastavro
import pyarrow as pa
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from pulsar_txn.schema_codec import (
    check_writable,
    decode_column,
    encode_column,
)
from pulsar_txn.schema_key_value import decode_key_values, encode_key_values
from pulsar_txn.schemas import (
    BYTES,
    Kind,
    SchemaError,
    TopicSchema,
    arrow_to_avro,
    from_admin_body,
    lookup_admin,
)


class Order(Record):
    id = Integer()
    name = String()


V0 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "int"}, {"name": "name", "type": ["null", "string"]}]}
V1 = {"type": "record", "name": "Order", "fields": V0["fields"] + [
    {"name": "qty", "type": "long", "default": 7}]}


def _schemas(kind: Kind) -> dict[int, TopicSchema]:
    return {0: TopicSchema(kind, json.dumps(V0)), 1: TopicSchema(kind, json.dumps(V1))}


def _ids(n: int) -> list[str]:
    return [f"1:{i}:-1" for i in range(n)]


@pytest.mark.parametrize("kind", [Kind.AVRO, Kind.JSON])
def test_a_field_added_with_a_default_reads_from_old_payloads(kind):
    versions = _schemas(kind)
    old = encode_column(pa.array([{"id": 1, "name": "a"}]), versions[0])
    new = encode_column(pa.array([{"id": 2, "name": None, "qty": 3}]), versions[1])
    col = decode_column(old + new, [0, 1], versions[1], versions.__getitem__, "t", _ids(2))
    assert col.to_pylist() == [{"id": 1, "name": "a", "qty": 7},
                               {"id": 2, "name": None, "qty": 3}]


def test_what_the_sink_encodes_pulsar_clients_typed_schemas_decode():
    avro = TopicSchema(Kind.AVRO, json.dumps(AvroSchema(Order).schema_info().schema()
                                             and json.loads(AvroSchema(Order)
                                                            .schema_info().schema())))
    rows = pa.array([{"id": 5, "name": "x"}, {"id": 6, "name": None}])
    for payload, want in zip(encode_column(rows, avro), [(5, "x"), (6, None)]):
        got = AvroSchema(Order).decode(payload)
        assert (got.id, got.name) == want
    js = TopicSchema(Kind.JSON, avro.definition)
    got = JsonSchema(Order).decode(encode_column(rows, js)[0])
    assert (got.id, got.name) == (5, "x")


def test_what_pulsar_clients_typed_schemas_encode_the_source_decodes():
    planned = TopicSchema(Kind.AVRO, AvroSchema(Order).schema_info().schema())
    payloads = [AvroSchema(Order).encode(Order(id=i, name=f"n{i}")) for i in range(3)]
    col = decode_column(payloads, [0] * 3, planned, lambda v: planned, "t", _ids(3))
    assert col.to_pylist() == [{"id": i, "name": f"n{i}"} for i in range(3)]
    planned = TopicSchema(Kind.JSON, planned.definition)
    payloads = [JsonSchema(Order).encode(Order(id=i, name="j")) for i in range(2)]
    col = decode_column(payloads, [0, 0], planned, lambda v: planned, "t", _ids(2))
    assert col.to_pylist() == [{"id": 0, "name": "j"}, {"id": 1, "name": "j"}]


JAVA = [  # (kind, values, Java's encoding of the first value)
    (Kind.INT32, [1, -2, 2**31 - 1], struct.pack(">i", 1)),
    (Kind.INT64, [1, -2, 2**62], struct.pack(">q", 1)),
    (Kind.INT16, [1, -2, 300], struct.pack(">h", 1)),
    (Kind.INT8, [1, -2, 100], struct.pack(">b", 1)),
    (Kind.DOUBLE, [1.5, -2.25, 1e300], struct.pack(">d", 1.5)),
    (Kind.FLOAT, [1.5, -2.25, 3.0], struct.pack(">f", 1.5)),
    (Kind.BOOLEAN, [True, False, True], b"\x01"),
    (Kind.STRING, ["héllo", "", "x"], "héllo".encode()),
    (Kind.TIMESTAMP, [dt.datetime(2026, 11, 27, 1, 2, 3, 4000, tzinfo=dt.timezone.utc)] * 3,
     struct.pack(">q", 1795741323004)),
    (Kind.DATE, [dt.date(2026, 11, 27)] * 3, struct.pack(">q", 20784 * 86_400_000)),
]


@pytest.mark.parametrize("kind,values,first", JAVA, ids=[k.name for k, *_ in JAVA])
def test_primitive_schemas_round_trip_in_javas_encoding(kind, values, first):
    schema = TopicSchema(kind)
    col = pa.array(values, schema.arrow_type())
    payloads = encode_column(col, schema)
    assert payloads[0] == first
    back = decode_column(payloads, [0] * 3, schema, lambda v: schema, "t", _ids(3))
    assert back.to_pylist() == col.to_pylist()


def test_a_payload_that_does_not_decode_is_named_with_its_version():
    schema = _schemas(Kind.AVRO)[0]
    good = encode_column(pa.array([{"id": 1, "name": "a"}]), schema)
    with pytest.raises(SchemaError, match=r"message 1:1:-1 .* version 0"):
        decode_column(good + [b"\xff\xff\xff"], [0, 0], schema, lambda v: schema, "t",
                      _ids(2))
    with pytest.raises(SchemaError, match=r"message 1:1:-1 has 3 bytes, a INT32"):
        decode_column([b"\0\0\0\1", b"abc"], [0, 0], TopicSchema(Kind.INT32),
                      lambda v: TopicSchema(Kind.INT32), "t", _ids(2))


def test_a_version_of_another_schema_type_fails_the_query_named():
    planned = _schemas(Kind.AVRO)[0]
    with pytest.raises(SchemaError, match="version 3 is STRING"):
        decode_column([b"x"], [3], planned, lambda v: TopicSchema(Kind.STRING), "t", _ids(1))


def test_an_incompatible_dataframe_is_refused_naming_the_field():
    schema = _schemas(Kind.AVRO)[0]
    with pytest.raises(SchemaError, match="lacks field 'id'"):
        check_writable(pa.struct([("name", pa.string())]), schema, "t")
    with pytest.raises(SchemaError, match=r"field\(s\) \['extra'\]"):
        check_writable(pa.struct([("id", pa.int32()), ("extra", pa.string())]), schema, "t")
    with pytest.raises(SchemaError, match="field 'id' is string"):
        check_writable(pa.struct([("id", pa.string())]), schema, "t")
    with pytest.raises(SchemaError, match="write a struct"):
        check_writable(pa.binary(), schema, "t")
    check_writable(pa.struct([("id", pa.int16())]), schema, "t")  # name: nullable, absent


def test_a_derived_schema_encodes_every_column_type_and_reads_back():
    t = pa.struct([("i", pa.int32()), ("l", pa.int64()), ("s", pa.string()),
                   ("b", pa.binary()), ("d", pa.float64()), ("ok", pa.bool_()),
                   ("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
                   ("tags", pa.list_(pa.string())), ("m", pa.map_(pa.string(), pa.int64())),
                   ("inner", pa.struct([("x", pa.int32())]))])
    rows = [{"i": 1, "l": 2, "s": "s", "b": b"\0", "d": 0.5, "ok": True,
             "day": dt.date(2026, 1, 2),
             "ts": dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc),
             "tags": ["a", None], "m": [("k", 1)], "inner": {"x": 9}},
            {k: None for k in t.names}]
    col = pa.array(rows, t)
    schema = TopicSchema(Kind.AVRO, json.dumps(arrow_to_avro(t)))
    check_writable(t, schema, "t")
    back = decode_column(encode_column(col, schema), [0, 0], schema, lambda v: schema, "t",
                         _ids(2))
    assert back.type == col.type
    assert back.to_pylist() == col.to_pylist()


def test_unions_other_than_with_null_are_refused_at_planning():
    schema = TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "U", "fields": [
        {"name": "u", "type": ["string", "int"]}]}))
    with pytest.raises(SchemaError, match=r"field 'value.u': a union"):
        schema.arrow_type()


def test_schemaless_topics_keep_bytes():
    assert BYTES.arrow_type() == pa.binary()
    assert encode_column(pa.array(["a"]), BYTES) == [b"a"]
    assert decode_column([b"\xff"], [-1], BYTES, None, "t", _ids(1)).to_pylist() == [b"\xff"]


# ---- found by review (each failed on the codec before its fix) ----

def test_json_logical_types_read_as_jackson_writes_them_and_write_back_so():
    definition = {"type": "record", "name": "E", "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "b", "type": "bytes"}]}
    schema = TopicSchema(Kind.JSON, json.dumps(definition))
    jackson = b'{"ts":1700000000000,"day":19000,"b":"AQID"}'
    col = decode_column([jackson], [0], schema, lambda v: schema, "t", _ids(1))
    row = col.to_pylist()[0]
    assert row["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)
    assert row["day"] == dt.date(2022, 1, 8) and row["b"] == b"\x01\x02\x03"
    assert json.loads(encode_column(col, schema)[0]) == json.loads(jackson)


def test_an_avro_payload_with_bytes_left_over_is_not_a_record():
    schema = _schemas(Kind.AVRO)[0]
    good = encode_column(pa.array([{"id": 1, "name": None}]), schema)[0]
    with pytest.raises(SchemaError, match="bytes left after the record"):
        decode_column([good + b"trailing garbage"], [-1], schema, None, "t", _ids(1))


def test_a_timestamp_with_microseconds_is_written_truncated_to_javas_milliseconds():
    schema = TopicSchema(Kind.TIMESTAMP)
    ts = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.timezone.utc)
    payload, = encode_column(pa.array([ts], pa.timestamp("us", tz="UTC")), schema)
    assert struct.unpack(">q", payload)[0] == int(ts.timestamp() * 1000)


def test_a_value_the_schema_cannot_take_names_the_column_and_topic():
    schema = TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}}]}))
    with pytest.raises(SchemaError, match=r"column 'value' .* topic 'orders'"):
        encode_column(pa.array([{"e": "C"}]), schema, "orders")


def test_nested_types_compare_without_nullability_and_decimals_by_scale():
    schema = TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "items", "type": {"type": "array", "items": {
            "type": "record", "name": "I", "fields": [{"name": "x", "type": "int"}]}}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal",
                                   "precision": 10, "scale": 2}}]}))
    ok = pa.struct([("items", pa.list_(pa.struct([("x", pa.int32())]))),
                    ("price", pa.decimal128(10, 2))])
    check_writable(ok, schema, "t")
    bad = pa.struct([("items", ok.field(0).type), ("price", pa.decimal128(10, 1))])
    with pytest.raises(SchemaError, match="field 'price'"):
        check_writable(bad, schema, "t")


def test_uuid_strings_read_as_strings_and_time_of_day_is_refused_at_planning():
    schema = TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}}]}))
    u = "0f8fad5b-d9cb-469f-a165-70867728950e"
    payload = encode_column(pa.array([{"u": u}]), schema)
    assert decode_column(payload, [0], schema, lambda v: schema, "t", _ids(1)).to_pylist() == [
        {"u": u}]
    timed = TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}}]}))
    with pytest.raises(SchemaError, match="time-millis has no Spark type"):
        timed.arrow_type()


def test_the_sink_derives_avro_for_a_struct_and_refuses_to_invent_a_primitive_schema():
    from pulsar_txn.errors import ConfigError
    from pulsar_txn.spark.sink_schema import derived

    got = derived(pa.struct([("id", pa.int32())]), "t")
    assert got.kind is Kind.AVRO and json.loads(got.definition)["name"] == "topLevelRecord"
    with pytest.raises(ConfigError, match=r"cannot register a INT64 schema .*pulsar-admin"):
        derived(pa.int64(), "persistent://public/default/t")


def test_avro_timestamps_in_millis_and_dates_cross_arrow_as_integers_in_their_unit():
    schema = TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "ms", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}}]}))
    at = dt.datetime(2026, 11, 27, 1, 2, 3, 456789, tzinfo=dt.timezone.utc)
    col = pa.array([{"ms": at, "local": at.replace(tzinfo=None), "day": at.date()},
                    {"ms": None, "local": at.replace(tzinfo=None), "day": at.date()}],
                   schema.arrow_type())
    payloads = encode_column(col, schema)
    ms, = struct.unpack(">q", fastavro_long(payloads[0][1:]))  # after the union index
    assert ms == 1795741323456  # truncated to the schema's milliseconds, as Java writes
    back = decode_column(payloads, [0, 0], schema, lambda v: schema, "t", _ids(2)).to_pylist()
    assert back[0]["ms"] == at.replace(microsecond=456000)
    assert back[0]["local"] == at.replace(tzinfo=None) and back[0]["day"] == at.date()
    assert back[1]["ms"] is None


def fastavro_long(data: bytes) -> bytes:
    """The zig-zag varint at the front of ``data``, as 8 big-endian bytes."""
    n, shift = 0, 0
    for b in data:
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    return struct.pack(">q", (n >> 1) ^ -(n & 1))


# ---- found by review of the Spark part (helper-21; each failed on the codec before) ----

@pytest.mark.parametrize("planned, written, payload", [
    (TopicSchema(Kind.INT64), TopicSchema(Kind.DOUBLE), struct.pack(">d", 12.5)),
    (TopicSchema(Kind.STRING), TopicSchema(Kind.JSON, json.dumps(V0)), b'{"id":1}'),
])
def test_a_primitive_topics_version_of_another_type_fails_the_query_named(planned, written,
                                                                          payload):
    """An 8-byte DOUBLE read as an INT64 is a wrong number, not an error, unless the
    version it was written with is looked at."""
    with pytest.raises(SchemaError, match=f"version 1 is {written.kind.name}"):
        decode_column([payload], [1], planned, lambda v: written, "t", _ids(1))


def test_a_json_payload_is_read_with_its_writers_definition_and_resolved_as_avro():
    """Version 1 retyped a field int -> double; the query planned version 0: Avro's
    resolution refuses that, and so must JSON's (2.7 is no int)."""
    v1 = {"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "double"}, {"name": "name", "type": ["null", "string"]}]}
    planned, writer = TopicSchema(Kind.JSON, json.dumps(V0)), TopicSchema(Kind.JSON,
                                                                          json.dumps(v1))
    with pytest.raises(SchemaError, match=r"message 1:0:-1 does not decode .* version 1"):
        decode_column([b'{"id":2.7,"name":"x"}'], [1], planned, lambda v: writer, "t",
                      _ids(1))


def test_a_json_decimal_reads_exactly():
    definition = {"type": "record", "name": "D", "fields": [{"name": "x", "type": {
        "type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 2}}]}
    schema = TopicSchema(Kind.JSON, json.dumps(definition))
    col = decode_column([b'{"x":12345678901234567.89}'], [0], schema, lambda v: schema, "t",
                        _ids(1))
    assert str(col.to_pylist()[0]["x"]) == "12345678901234567.89"


def test_the_json_sink_refuses_what_javas_jackson_would_misread_and_fills_defaults():
    definition = {"type": "record", "name": "J", "fields": [
        {"name": "a", "type": "int"},
        {"name": "c", "type": ["null", {"type": "enum", "name": "C", "symbols": ["RED"]}]},
        {"name": "d", "type": "int", "default": 1}]}
    schema = TopicSchema(Kind.JSON, json.dumps(definition))
    t = pa.struct([("a", pa.int32()), ("c", pa.string())])
    with pytest.raises(SchemaError, match=r"topic 't'.*a.*None"):
        encode_column(pa.array([{"a": None, "c": "RED"}], t), schema, "t")
    with pytest.raises(SchemaError, match=r"topic 't'.*PURPLE"):
        encode_column(pa.array([{"a": 1, "c": "PURPLE"}], t), schema, "t")
    out = encode_column(pa.array([{"a": 1, "c": None}], t), schema, "t")
    assert json.loads(out[0]) == {"a": 1, "c": None, "d": 1}  # as Avro's default fills it


def test_an_old_versions_timestamp_unit_is_converted_not_reinterpreted():
    """Pulsar's compatibility check ignores logical types: millis -> micros passes it. An
    old payload's milliseconds must not be read as microseconds (1970-01-20)."""
    def version(logical):
        return TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "T", "fields": [
            {"name": "t", "type": {"type": "long", "logicalType": logical}}]}))
    v0, v1 = version("timestamp-millis"), version("timestamp-micros")
    at = dt.datetime(2024, 1, 1, 12, 0, 0, 123000, tzinfo=dt.timezone.utc)
    t = pa.struct([("t", pa.timestamp("us", tz="UTC"))])
    old = encode_column(pa.array([{"t": at}], t), v0)
    new = encode_column(pa.array([{"t": at}], t), v1)
    got = decode_column(old + new, [0, 1], v1, {0: v0, 1: v1}.__getitem__, "t", _ids(2))
    assert [r["t"] for r in got.to_pylist()] == [at, at]


def test_timestamps_are_floored_to_javas_milliseconds_at_any_depth():
    """Java's toEpochMilli floors: -1500 us is -2 ms, as a field, inside an array, and
    as a TIMESTAMP topic's value; a naive timestamp in an array is not read in the
    executor's local zone."""
    ms = {"type": "long", "logicalType": "timestamp-millis"}
    schema = TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "T", "fields": [
        {"name": "t", "type": ms}, {"name": "ts", "type": {"type": "array", "items": ms}}]}))
    before = dt.datetime(1969, 12, 31, 23, 59, 59, 998500, tzinfo=dt.timezone.utc)
    t = pa.struct([("t", pa.timestamp("us", tz="UTC")),
                   ("ts", pa.list_(pa.timestamp("us", tz="UTC")))])
    payload = encode_column(pa.array([{"t": before, "ts": [before]}], t), schema)[0]
    as_longs = {"type": "record", "name": "T", "fields": [
        {"name": "t", "type": "long"}, {"name": "ts", "type": {"type": "array",
                                                               "items": "long"}}]}
    got = fastavro.schemaless_reader(io.BytesIO(payload), fastavro.parse_schema(as_longs), None)
    assert got == {"t": -2, "ts": [-2]}
    assert encode_column(pa.array([before]), TopicSchema(Kind.TIMESTAMP)) == [
        struct.pack(">q", -2)]


def test_named_types_resolve_by_full_name_and_oversized_decimals_are_named():
    """Java's ReflectData names a nested enum in its class's namespace and refers to it
    again by full name."""
    color = {"type": "enum", "name": "Color", "namespace": "com.example.Order",
             "symbols": ["RED"]}
    definition = {"type": "record", "name": "Order", "namespace": "com.example", "fields": [
        {"name": "a", "type": color}, {"name": "b", "type": "com.example.Order.Color"}]}
    schema = TopicSchema(Kind.AVRO, json.dumps(definition))
    assert schema.arrow_type("t") == pa.struct([pa.field("a", pa.string(), False),
                                                pa.field("b", pa.string(), False)])
    wide = TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "W", "fields": [
        {"name": "x", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40,
                               "scale": 2}}]}))
    with pytest.raises(SchemaError, match=r"field '\S*x'.*precision 40"):
        wide.arrow_type("t")


def test_a_sink_refused_a_schema_type_is_told_what_the_sink_can_write():
    kv = TopicSchema(Kind.KEY_VALUE, "")
    with pytest.raises(SchemaError) as err:
        check_writable(pa.struct([("a", pa.int32())]), kv, "t")
    assert "the sink writes it from a binary value column" in str(err.value)


def test_a_value_too_wide_for_the_planned_column_names_its_message():
    def dec(precision):
        return TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "D", "fields": [
            {"name": "x", "type": {"type": "bytes", "logicalType": "decimal",
                                   "precision": precision, "scale": 2}}]}))
    import decimal
    wide, narrow = dec(10), dec(4)
    payloads = encode_column(pa.array([{"x": decimal.Decimal("1.25")},
                                       {"x": decimal.Decimal("12345.67")}],
                                      pa.struct([("x", pa.decimal128(10, 2))])), wide)
    with pytest.raises(SchemaError, match=r"message 1:1:-1 \(schema version 0\)"):
        decode_column(payloads, [0, 0], narrow, lambda v: narrow, "t", _ids(2))


# ---- found by the second review (helper-22) of the fixes above ----
TSM = {"type": "long", "logicalType": "timestamp-millis"}


def test_a_json_record_named_again_by_its_full_name_is_converted_as_the_first():
    d = {"type": "record", "name": "Trip", "namespace": "com.ex", "fields": [
        {"name": "src", "type": {"type": "record", "name": "Point", "fields": [
            {"name": "at", "type": TSM}, {"name": "raw", "type": "bytes"},
            {"name": "x", "type": "double"}]}},
        {"name": "dst", "type": "com.ex.Point"}]}
    schema = TopicSchema(Kind.JSON, json.dumps(d))
    point = b'{"at":1700000000000,"raw":"AAE=","x":2.5}'
    col = decode_column([b'{"src":' + point + b',"dst":' + point + b'}'], [0], schema,
                        lambda v: schema, "t", _ids(1))
    row = col.to_pylist()[0]
    assert row["src"] == row["dst"] and row["dst"]["raw"] == b"\x00\x01"
    assert row["dst"]["at"].year == 2023


def test_a_sliced_batch_with_arrays_encodes():
    s = TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "X", "fields": [
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "ts", "type": {"type": "array", "items": TSM}}]}))
    at = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    col = pa.array([{"tags": ["a"], "ts": [at]}, {"tags": ["b", "c"], "ts": [at, at]}],
                   pa.struct([("tags", pa.list_(pa.string())),
                              ("ts", pa.list_(pa.timestamp("us", tz="UTC")))]))
    out = encode_column(col.slice(1), s, "t")
    back = decode_column(out, [0], s, lambda v: s, "t", _ids(1)).to_pylist()
    assert back == [{"tags": ["b", "c"], "ts": [at, at]}]


def test_the_json_sink_writes_a_missing_bytes_fields_default():
    d = {"type": "record", "name": "X", "fields": [
        {"name": "a", "type": "int"}, {"name": "b", "type": "bytes", "default": "hi"}]}
    schema = TopicSchema(Kind.JSON, json.dumps(d))
    out = encode_column(pa.array([{"a": 1}], pa.struct([("a", pa.int32())])), schema, "t")
    back = decode_column(out, [0], schema, lambda v: schema, "t", _ids(1)).to_pylist()
    assert back == [{"a": 1, "b": b"hi"}]


def test_a_date_column_writes_to_a_timestamp_topic():
    day = pa.array([dt.date(2024, 1, 2)], pa.date32())
    assert encode_column(day, TopicSchema(Kind.TIMESTAMP), "t") == [
        struct.pack(">q", 1704153600000)]


def test_an_old_version_with_a_logical_type_the_planned_one_dropped_reads_its_long():
    def version(t):
        return TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "T", "fields": [
            {"name": "t", "type": t}]}))
    v0, v1 = version(TSM), version("long")
    at = dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc)
    old = encode_column(pa.array([{"t": at}], pa.struct([("t", pa.timestamp("us", "UTC"))])),
                        v0)
    got = decode_column(old, [0], v1, {0: v0, 1: v1}.__getitem__, "t", _ids(1))
    assert got.to_pylist() == [{"t": 1704164645678}]


def test_json_numbers_with_a_point_read_for_long_logical_types():
    d = {"type": "record", "name": "E", "fields": [{"name": "t", "type": TSM}]}
    schema = TopicSchema(Kind.JSON, json.dumps(d))
    got = decode_column([b'{"t":1.7e12}'], [0], schema, lambda v: schema, "t", _ids(1))
    assert got.to_pylist()[0]["t"].year == 2023


def test_a_primitive_version_of_another_type_names_the_topic_and_message():
    with pytest.raises(SchemaError, match=r"topic 'persistent://t/n/x': message 1:0:-1"):
        decode_column([struct.pack(">d", 1.5)], [1], TopicSchema(Kind.INT64),
                      lambda v: TopicSchema(Kind.DOUBLE), "persistent://t/n/x", _ids(1))


def test_a_record_type_used_twice_by_short_name_is_writable():
    inner = {"type": "record", "name": "Inner", "fields": [{"name": "v", "type": "int"}]}
    s = TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "O", "fields": [
        {"name": "a", "type": inner}, {"name": "b", "type": "Inner"}]}))
    t = pa.struct([("a", pa.struct([("v", pa.int32())])), ("b", pa.struct([("v", pa.int32())]))])
    check_writable(t, s, "t")
    out = encode_column(pa.array([{"a": {"v": 1}, "b": {"v": 2}}], t), s, "t")
    assert decode_column(out, [0], s, lambda v: s, "t", _ids(1)).to_pylist() == [
        {"a": {"v": 1}, "b": {"v": 2}}]


def test_a_maps_naive_timestamps_do_not_depend_on_the_executors_zone(monkeypatch):
    import time
    s = TopicSchema(Kind.AVRO, json.dumps({"type": "record", "name": "M", "fields": [
        {"name": "m", "type": {"type": "map", "values": TSM}}]}))
    t = pa.struct([("m", pa.map_(pa.string(), pa.timestamp("us")))])
    col = pa.array([{"m": [("k", dt.datetime(2024, 1, 1, 3, 4))]}], t)
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        out = encode_column(col, s, "t")
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    raw = fastavro.schemaless_reader(io.BytesIO(out[0]), fastavro.parse_schema(
        {"type": "record", "name": "M", "fields": [{"name": "m", "type": {
            "type": "map", "values": "long"}}]}), None)
    assert raw == {"m": {"k": 1704078240000}}  # 2024-01-01T03:04 as UTC, like a field


# ---- found by the third review (helper-23) ----

def test_a_list_of_a_record_named_earlier_floors_its_naive_timestamps_as_a_field(
        monkeypatch):
    import time
    d = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": {"type": "record", "name": "P", "fields": [
            {"name": "at", "type": TSM}]}},
        {"name": "b", "type": {"type": "array", "items": "P"}}]}
    p = pa.struct([("at", pa.timestamp("us"))])
    x = dt.datetime(2024, 1, 1, 3, 4)
    col = pa.array([{"a": {"at": x}, "b": [{"at": x}]}],
                   pa.struct([("a", p), ("b", pa.list_(p))]))
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        out = encode_column(col, TopicSchema(Kind.AVRO, json.dumps(d)), "t")
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    longs = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": {"type": "record", "name": "P", "fields": [
            {"name": "at", "type": "long"}]}},
        {"name": "b", "type": {"type": "array", "items": "P"}}]}
    raw = fastavro.schemaless_reader(io.BytesIO(out[0]), fastavro.parse_schema(longs), None)
    assert raw == {"a": {"at": 1704078240000}, "b": [{"at": 1704078240000}]}


def test_two_types_of_one_short_name_decode_right_or_fail_named_never_wrong():
    """com.x.Item and com.x.Order.Item, then a field of type "Item": the short name's
    lookup may pick the other one; the payload must then fail, named, not read {qty:
    None} with "b" lost."""
    d = {"type": "record", "name": "Order", "namespace": "com.x", "fields": [
        {"name": "first", "type": {"type": "record", "name": "Item", "fields": [
            {"name": "sku", "type": "string"}]}},
        {"name": "line", "type": {"type": "record", "name": "Item",
                                  "namespace": "com.x.Order", "fields": [
                                      {"name": "qty", "type": "int"}]}},
        {"name": "second", "type": "Item"}]}
    schema = TopicSchema(Kind.AVRO, json.dumps(d))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(d), {
        "first": {"sku": "a"}, "line": {"qty": 2}, "second": {"sku": "b"}})
    try:
        got = decode_column([buf.getvalue()], [0], schema, lambda v: schema, "t", _ids(1))
    except SchemaError as e:
        assert "message 1:0:-1" in str(e)
    else:
        assert got.to_pylist() == [{"first": {"sku": "a"}, "line": {"qty": 2},
                                    "second": {"sku": "b"}}]


def test_json_fractional_timestamps_are_refused_named():
    d = {"type": "record", "name": "E", "fields": [{"name": "t", "type": TSM}]}
    schema = TopicSchema(Kind.JSON, json.dumps(d))
    with pytest.raises(SchemaError, match=r"message 1:0:-1 .*value.t"):
        decode_column([b'{"t":1700000000000.7}'], [0], schema, lambda v: schema, "t", _ids(1))


# ---- KEY_VALUE (as the REST admin API describes it and Java's KeyValueSchema writes) ----

_JAVA_ORDER = {"type": "record", "name": "Order", "namespace": "io.github.pulsartxn.peer",
               "fields": [{"name": "id", "type": "int"},
                          {"name": "name", "type": ["null", "string"], "default": None}]}


def _kv_body(encoding: str, version: int = 0) -> dict:
    """A GetSchemaResponse as Apache Pulsar 4.0.7 answers it for a Java producer's
    Schema.KeyValue(Schema.INT32, Schema.AVRO(Order.class), encoding)."""
    return {"version": version, "type": "KEY_VALUE",
            "data": json.dumps({"key": "", "value": _JAVA_ORDER}),
            "properties": {"key.schema.type": "INT32", "key.schema.name": "INT32",
                           "value.schema.type": "AVRO", "value.schema.name": "",
                           "key.schema.properties": "{}", "value.schema.properties": "{}",
                           "kv.encoding.type": encoding}}


def _java_order(i: int) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(_JAVA_ORDER),
                               {"id": i, "name": f"java-{i}"})
    return buf.getvalue()


def test_key_value_schema_is_read_from_the_admin_apis_properties():
    kv = from_admin_body(_kv_body("SEPARATED"), "t")
    assert kv.kind is Kind.KEY_VALUE and kv.separated
    assert kv.key == TopicSchema(Kind.INT32) and kv.value.kind is Kind.AVRO
    assert kv.key_arrow_type("t") == pa.int32()
    assert kv.arrow_type("t") == pa.struct([pa.field("id", pa.int32(), nullable=False),
                                            pa.field("name", pa.string())])
    assert not from_admin_body(_kv_body("INLINE"), "t").separated


def test_inline_key_values_decode_as_javas_keyvalue_schema_wrote_them():
    kv = from_admin_body(_kv_body("INLINE"), "t")
    java = [struct.pack(">i", 4) + struct.pack(">i", i) + struct.pack(">i", len(v)) + v
            for i, v in ((i, _java_order(i)) for i in range(3))]
    null_value = struct.pack(">i", 4) + struct.pack(">i", 9) + struct.pack(">i", -1)
    keys, values = decode_key_values(java + [null_value], [None] * 4, [0] * 4, kv,
                                     {0: kv}.__getitem__, "t", _ids(4))
    assert keys.to_pylist() == [0, 1, 2, 9]
    assert values.to_pylist() == [{"id": i, "name": f"java-{i}"} for i in range(3)] + [None]


def test_separated_keys_are_read_from_the_base64_message_key():
    kv = from_admin_body(_kv_body("SEPARATED"), "t")
    keys, values = decode_key_values([_java_order(0), _java_order(1)], ["AAAAAA==", "AAAAAQ=="],
                                     [0, 0], kv, {0: kv}.__getitem__, "t", _ids(2))
    assert keys.to_pylist() == [0, 1]
    assert [v["name"] for v in values.to_pylist()] == ["java-0", "java-1"]
    with pytest.raises(SchemaError, match=r"message 1:0:-1's key is not the base64"):
        decode_key_values([_java_order(0)], ["not base64!"], [0], kv, {0: kv}.__getitem__,
                          "t", _ids(1))


def test_a_key_value_payload_that_is_not_one_is_named_never_sliced_wrongly():
    kv = from_admin_body(_kv_body("INLINE"), "t")
    for bad in (b"", b"\x00\x00\x00\x04ab", struct.pack(">ii", 0, 5) + b"abc",
                struct.pack(">i", 4) + struct.pack(">i", 1) + struct.pack(">i", 1) + b"xy"):
        with pytest.raises(SchemaError, match=r"topic 't': message 1:0:-1 is not an INLINE"):
            decode_key_values([bad], [None], [0], kv, {0: kv}.__getitem__, "t", _ids(1))


def test_a_version_that_is_not_the_planned_key_value_fails_named():
    inline, separated = (from_admin_body(_kv_body(e), "t") for e in ("INLINE", "SEPARATED"))
    payload = struct.pack(">i", 4) + struct.pack(">i", 1) + struct.pack(">i", 0)
    with pytest.raises(SchemaError, match=r"schema version 1 is KEY_VALUE\(SEPARATED\).*"
                                          r"incompatible change"):
        decode_key_values([payload], [None], [1], inline, {1: separated}.__getitem__, "t",
                          _ids(1))


def test_inline_key_values_encode_as_javas_keyvalue_schema_writes_them():
    kv = from_admin_body(_kv_body("INLINE"), "t")
    keys = pa.array([0, 1, None], pa.int32())
    values = pa.array([{"id": 0, "name": "java-0"}, None, {"id": 2, "name": None}],
                      kv.arrow_type("t"))
    wire = encode_key_values(keys, values, kv, "t")
    assert wire[0] == (struct.pack(">i", 4) + struct.pack(">i", 0)
                       + struct.pack(">i", len(_java_order(0))) + _java_order(0))
    assert wire[1] == struct.pack(">ii", 4, 1) + struct.pack(">i", -1)
    assert wire[2][:4] == struct.pack(">i", -1)
    k, v = decode_key_values(wire, [None] * 3, [-1] * 3, kv, {}.__getitem__, "t", _ids(3))
    assert k.to_pylist() == [0, 1, None] and v.to_pylist() == values.to_pylist()


def test_a_key_value_schema_without_admin_url_is_refused_naming_the_option():
    with pytest.raises(SchemaError, match=r"topic 't' has a schema .*KEY_VALUE.*'admin.url'"):
        lookup_admin(None, "t", -1)


def test_a_key_value_version_of_another_encoding_is_named_even_with_bytes_halves():
    both_bytes = {"key.schema.type": "BYTES", "value.schema.type": "BYTES"}
    inline = from_admin_body({**_kv_body("INLINE"), "properties": {
        **both_bytes, "kv.encoding.type": "INLINE"}}, "t")
    separated = from_admin_body({**_kv_body("SEPARATED"), "properties": {
        **both_bytes, "kv.encoding.type": "SEPARATED"}}, "t")
    # a SEPARATED payload is not an INLINE one: the version is named, not the layout
    with pytest.raises(SchemaError, match=r"message 1:0:-1's schema version 3 is "
                                          r"KEY_VALUE\(SEPARATED\).*incompatible change"):
        decode_key_values([b"just the value"], ["AAAA"], [3], inline,
                          {3: separated}.__getitem__, "t", _ids(1))


def test_an_inline_length_below_minus_one_is_refused_as_java_refuses_it():
    kv = from_admin_body(_kv_body("INLINE"), "t")
    bad = struct.pack(">i", -2) + struct.pack(">i", 1) + b"v"
    with pytest.raises(SchemaError, match=r"is not an INLINE KEY_VALUE payload"):
        decode_key_values([bad], [None], [0], kv, {0: kv}.__getitem__, "t", _ids(1))


def test_a_null_value_java_sent_reads_as_null_not_as_an_empty_payload():
    kv = from_admin_body(_kv_body("SEPARATED"), "t")
    keys, values = decode_key_values([_java_order(0), None], ["AAAAAA==", "AAAAAQ=="],
                                     [0, 0], kv, {0: kv}.__getitem__, "t", _ids(2))
    assert keys.to_pylist() == [0, 1] and values.to_pylist()[1] is None
    inline = from_admin_body(_kv_body("INLINE"), "t")
    keys, values = decode_key_values([None], [None], [0], inline, {0: inline}.__getitem__,
                                     "t", _ids(1))
    assert keys.to_pylist() == [None] and values.to_pylist() == [None]


def test_a_key_that_does_not_encode_names_the_key_column():
    kv = TopicSchema(Kind.KEY_VALUE, "", TopicSchema(Kind.AVRO, json.dumps(
        {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]})),
        TopicSchema(Kind.STRING))
    keys = pa.array([{"id": None}], pa.struct([pa.field("id", pa.int64())]))
    with pytest.raises(SchemaError, match=r"column 'key' does not encode under topic 't'"):
        encode_key_values(keys, pa.array(["v"]), kv, "t")


def test_string_halves_encode_inline_as_javas_string_schema_writes_them():
    kv = TopicSchema(Kind.KEY_VALUE, "", TopicSchema(Kind.STRING), TopicSchema(Kind.STRING))
    assert encode_key_values(pa.array(["k", None]), pa.array(["vé", ""]), kv, "t") == [
        b"\x00\x00\x00\x01k\x00\x00\x00\x03v\xc3\xa9", b"\xff\xff\xff\xff\x00\x00\x00\x00"]
