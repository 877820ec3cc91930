"""The schema codec (issue 29) against fastavro and pulsar-client's own schema classes:
what the sink encodes a typed pulsar-client consumer decodes, what Java's primitive
schemas write the source decodes, a field added with a default reads from old
payloads, and a payload or column the schema cannot take is named, never guessed."""

from __future__ import annotations

import datetime as dt
import json
import struct

import pyarrow as pa
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from pulsar_txn.schema_codec import check_writable, decode_column, encode_column
from pulsar_txn.schemas import BYTES, Kind, SchemaError, TopicSchema, arrow_to_avro


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
