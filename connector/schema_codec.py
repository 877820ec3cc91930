"""Columns to payloads and back under a topic's schema (schemas.py): each payload decoded
with the version it was written with and resolved into the one the query planned,
each column encoded the way Pulsar's Java and Python producers encode it, so a typed
consumer downstream reads what the sink wrote. Avro is fastavro's, fixed-width
primitives numpy's: nothing here hand-writes a codec, and the only per-row Python work
is fastavro's own call per record (and JSON's).
"""

from __future__ import annotations

import decimal
import io
import json
from collections.abc import Callable, Sequence

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pulsar.schema import Schema

from pulsar_txn.schema_json import from_json, to_json, with_defaults
from pulsar_txn.schemas import (
    FIXED_WIDTH,
    MS_PER_DAY,
    TIMESTAMPS,
    Kind,
    SchemaError,
    TopicSchema,
    avro_field_type,
    recall,
    remember,
)

# ---- decoding ----

Fetch = Callable[[int], TopicSchema]  # a schema version of the topic being read


def decode_column(values: Sequence[bytes], versions: Sequence[int], planned: TopicSchema,
                  fetch: Fetch, topic: str, ids: Sequence[str]) -> pa.Array:
    """The ``value`` column of a run of payloads, each decoded with the schema version it
    was written with (``fetch``) and resolved into ``planned``. A payload that does not
    decode fails with its topic, message id and version named."""
    if planned.is_bytes:
        return pa.array(values, pa.binary())
    if planned.kind is Kind.STRING or planned.kind in FIXED_WIDTH:
        for version in set(versions):  # no per-row work here: each version's type checked
            _writer(fetch, version, planned, topic, ids[list(versions).index(version)])
    if planned.kind is Kind.STRING:
        try:
            return pa.array(values, pa.binary()).cast(pa.string())
        except pa.ArrowInvalid as e:
            raise _bad(topic, ids, values, versions, lambda v: v.decode(), e) from e
    if planned.kind in FIXED_WIDTH:
        return _fixed(values, planned.kind, topic, ids)
    target = planned.arrow_type(topic)
    decode = _avro_decoder if planned.kind is Kind.AVRO else _json_decoder
    by_version: dict[int, Callable[[bytes], object]] = {}
    rows: list = []
    if versions and all(v == versions[0] for v in versions):  # the usual run: no lookups
        dec = by_version[versions[0]] = decode(
            _writer(fetch, versions[0], planned, topic, ids[0]), planned)
        try:
            rows = [dec(p) for p in values]
        except Exception:  # noqa: BLE001 - found and named one by one below
            rows = []
    for i, (payload, version) in enumerate(zip(values[len(rows):], versions[len(rows):])):
        dec = by_version.get(version)
        if dec is None:
            dec = by_version[version] = decode(
                _writer(fetch, version, planned, topic, ids[len(rows)]), planned)
        try:
            rows.append(dec(payload))
        except Exception as e:  # noqa: BLE001 - named below
            raise SchemaError(
                f"topic {topic!r}: message {ids[i]} does not decode with its schema "
                f"version {version} ({planned.kind.name}): {type(e).__name__}: {e}; "
                "read it with valueSchema=bytes to see it") from e
    types = _column_types(planned, target, topic)
    try:
        return _column(rows, types)
    except _ARROW_ERRORS as e:
        bad = next((i for i in range(len(rows)) if not _fits(rows[i:i + 1], types)), None)
        which = (f"message {ids[bad]} (schema version {versions[bad]})" if bad is not None
                 else "a message")
        raise SchemaError(f"topic {topic!r}: {which} decoded to a value the planned column "
                          f"type {target} cannot hold: {e}; read it with valueSchema=bytes "
                          "to see it") from e


def decode_nullable(values: Sequence[bytes | None], versions: Sequence[int],
                    planned: TopicSchema, fetch: Fetch, topic: str, ids: Sequence[str]
                    ) -> pa.Array:
    """``decode_column`` where a payload may be None (a message Java sent with a null
    value): the others decoded together, the nulls put back in place."""
    where = [i for i, v in enumerate(values) if v is not None]
    if len(where) == len(values):
        return decode_column(values, versions, planned, fetch, topic, ids)
    dense = decode_column([values[i] for i in where], [versions[i] for i in where],
                          planned, fetch, topic, [ids[i] for i in where])
    at = dict(zip(where, range(len(where))))
    return dense.take(pa.array([at.get(i) for i in range(len(values))], pa.int32()))


_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError)


def _column_types(planned: TopicSchema, target: pa.DataType, topic: str) -> tuple:
    """(built as, cast through, target): Avro's rows are built from the integers it
    stores, then cast through the schema's own units; the cast also refuses a null in a
    non-nullable field, which building alone lets through."""
    if planned.kind is not Kind.AVRO:
        return target, None, target
    definition = json.loads(planned.definition)
    return (avro_field_type(definition, topic, view="physical")[0],
            avro_field_type(definition, topic, view="units")[0], target)


def _column(rows: list, types: tuple) -> pa.Array:
    built, units, target = types
    column = pa.array(rows, type=built)
    if units is None:
        return column
    return column.cast(units).cast(target) if units != target else column.cast(target)


def _fits(rows: list, types: tuple) -> bool:
    try:
        _column(rows, types)
        return True
    except _ARROW_ERRORS:
        return False


def _writer(fetch: Fetch, version: int, planned: TopicSchema, topic: str,
            message: str) -> TopicSchema:
    if version < 0:
        return planned  # written without a registry (or by a schemaless producer)
    got = fetch(version)
    if got.kind is not planned.kind:
        raise SchemaError(f"topic {topic!r}: message {message}'s schema version {version} "
                          f"is {got.kind.name}, the query planned {planned.kind.name}: an "
                          "incompatible change of the topic's schema; restart the query to "
                          "plan the new one")
    return got


def _avro_decoder(writer: TopicSchema, planned: TopicSchema):
    # timestamps and dates come out as the integers Avro stores; Arrow casts them
    w, reader = writer.parsed_physical(), planned.parsed_physical()

    def dec(payload: bytes):
        fo = io.BytesIO(payload)
        got = fastavro.schemaless_reader(fo, w, reader)
        if fo.tell() != len(payload):  # a record's prefix is not a record
            raise ValueError(f"{len(payload) - fo.tell()} bytes left after the record")
        return got
    if writer.definition == planned.definition or "logicalType" not in writer.definition or (
            "logicalType" not in planned.definition):  # no unit to convert into: Avro's ints
        return dec
    # another version with logical types: its integers may be in another unit (Pulsar's
    # compatibility check ignores logical types: millis -> micros passes it), so it is
    # resolved as values, then given the planned version's integers
    w_logical, r_logical = writer.parsed(), planned.parsed()

    def dec_other(payload: bytes):
        fo = io.BytesIO(payload)
        value = fastavro.schemaless_reader(fo, w_logical, r_logical)
        if fo.tell() != len(payload):
            raise ValueError(f"{len(payload) - fo.tell()} bytes left after the record")
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, r_logical, value)
        buf.seek(0)
        return fastavro.schemaless_reader(buf, reader, None)
    return dec_other


def _json_decoder(writer: TopicSchema, planned: TopicSchema):
    """JSON read with the definition it was written under; another version's record is
    then resolved into the planned one by Avro's rules (fastavro's), as an Avro payload
    would be: a field retyped int -> double fails, named, rather than truncate."""
    reader_def = json.loads(planned.definition)
    # a decimal's digits are kept by parsing every float as Decimal, which costs: only then
    loads = _json_loads if '"decimal"' in writer.definition else json.loads
    if writer.definition == planned.definition:
        return lambda payload: from_json(loads(payload), reader_def)
    writer_def = json.loads(writer.definition)
    w, r = writer.parsed(), planned.parsed()

    def dec(payload: bytes):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, w, from_json(loads(payload), writer_def))
        buf.seek(0)
        return fastavro.schemaless_reader(buf, w, r)
    return dec


def _json_loads(payload: bytes):
    return json.loads(payload, parse_float=decimal.Decimal)  # a decimal's digits kept


def _fixed(values: Sequence[bytes], kind: Kind, topic: str, ids: Sequence[str]) -> pa.Array:
    dtype, arrow_t = FIXED_WIDTH[kind]
    width = np.dtype(dtype).itemsize
    joined = b"".join(values)
    if len(joined) != width * len(values):
        bad = next(i for i, v in enumerate(values) if len(v) != width)
        raise SchemaError(f"topic {topic!r}: message {ids[bad]} has {len(values[bad])} bytes, "
                          f"a {kind.name} value has {width}; read it with valueSchema=bytes")
    arr = np.frombuffer(joined, dtype=dtype)
    if kind is Kind.BOOLEAN:
        return pa.array(arr != 0)
    if kind is Kind.DATE:
        return pa.array((arr // MS_PER_DAY).astype("int32"), pa.int32()).cast(pa.date32())
    if kind is Kind.LOCAL_DATE:
        return pa.array(arr.astype("int32"), pa.int32()).cast(pa.date32())
    if kind is Kind.TIMESTAMP:
        return pa.array(arr.astype("int64"), pa.int64()).cast(
            pa.timestamp("ms", tz="UTC")).cast(arrow_t)
    return pa.array(arr.astype(arr.dtype.newbyteorder("=")), arrow_t)


def _bad(topic, ids, values, versions, dec, cause) -> SchemaError:
    for i, v in enumerate(values):
        try:
            dec(v)
        except Exception:  # noqa: BLE001
            return SchemaError(f"topic {topic!r}: message {ids[i]} (schema version "
                               f"{versions[i]}) is not valid STRING (UTF-8); read it with "
                               "valueSchema=bytes to see it")
    return SchemaError(f"topic {topic!r}: {cause}")


# ---- encoding ----

def encode_column(column: pa.Array, schema: TopicSchema, topic: str = "",
                  name: str = "value") -> list[bytes]:
    """The payloads of a ``value`` column under the topic's schema; a value the schema
    cannot take fails the write naming the column and the topic."""
    try:
        return _encode(column, schema)
    except (ValueError, TypeError, KeyError, pa.ArrowInvalid, fastavro.validation.ValidationError
            ) as e:
        why = ("; ".join(map(str, e.errors)) if isinstance(e, fastavro.validation.ValidationError)
               else e)
        raise SchemaError(f"column {name!r} does not encode under topic {topic!r}'s "
                          f"{schema.kind.name} schema: {type(e).__name__}: {why}") from e


def _encode(column: pa.Array, schema: TopicSchema) -> list[bytes]:
    if schema.is_bytes:
        col = column if pa.types.is_binary(column.type) else column.cast(pa.binary())
        return col.to_pylist()
    if schema.kind is Kind.STRING:
        return column.cast(pa.string()).cast(pa.binary()).to_pylist()
    if schema.kind in FIXED_WIDTH:
        return _encode_fixed(column, schema.kind)
    if schema.kind is Kind.AVRO:  # no datetime object per value: Avro takes the integers
        column = _avro_ready(column, json.loads(schema.definition), {})
    rows = column.to_pylist()
    if _has_map(column.type):  # Arrow lists a map's pairs; Avro and JSON take a dict
        rows = [_dicts(r, column.type) for r in rows]
    if schema.kind is Kind.JSON:  # checked as Avro's writer checks: Jackson would misread
        definition, parsed = json.loads(schema.definition), schema.parsed()
        rows = [with_defaults(r, definition) for r in rows]
        for r in rows:
            fastavro.validation.validate(r, parsed, raise_errors=True)
        return [json.dumps(to_json(r, definition), separators=(",", ":")).encode()
                for r in rows]
    parsed = schema.parsed()
    out = []
    buf = io.BytesIO()
    write = fastavro.schemaless_writer
    for r in rows:
        buf.seek(0)
        buf.truncate()
        write(buf, parsed, r)
        out.append(buf.getvalue())
    return out


def _avro_ready(column: pa.Array, avro, named: dict) -> pa.Array:
    """The column with its timestamps and dates as the integers the Avro schema stores
    (in its unit, truncated as Java's writer does), structs followed field by field."""
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        avro = branches[0] if len(branches) == 1 else None
    if isinstance(avro, str):
        avro = recall(named, avro)
    if not isinstance(avro, dict):
        return column
    t = column.type
    if avro.get("type") == "record":
        remember(named, avro, avro)
        if not pa.types.is_struct(t):
            return column
        kinds = {f["name"]: f["type"] for f in avro["fields"]}
        children = column.flatten()
        fields = [t.field(i) for i in range(t.num_fields)]
        ready = [_avro_ready(c, kinds.get(f.name), named) for c, f in zip(children, fields)]
        return pa.StructArray.from_arrays(
            ready, fields=[pa.field(f.name, c.type, f.nullable) for f, c in zip(fields, ready)],
            mask=column.is_null())
    if avro.get("type") in ("enum", "fixed"):
        remember(named, avro, avro)
    if avro.get("type") in ("array", "map"):
        # timestamps in a list or a map take a field's path (fastavro's own conversion
        # reads a naive one in the executor's zone), whether the items' type is spelled
        # out or named; a slice is copied to offset 0 first
        if pa.types.is_list(t):
            column = pa.concat_arrays([column]) if column.offset else column
            items = _avro_ready(column.values, avro["items"], named)
            return pa.ListArray.from_arrays(column.offsets, items, mask=column.is_null())
        if pa.types.is_map(t):
            column = pa.concat_arrays([column]) if column.offset else column
            items = _avro_ready(column.items, avro["values"], named)
            return pa.MapArray.from_arrays(column.offsets, column.keys, items,
                                           mask=column.is_null())
    logical = avro.get("logicalType")
    if pa.types.is_timestamp(t) and logical in TIMESTAMPS:
        return _epoch(column, "ms" if logical.endswith("millis") else "us")
    if pa.types.is_date32(t) and logical == "date":
        return column.cast(pa.int32())
    return column


def _epoch(column: pa.Array, unit: str) -> pa.Array:
    """A timestamp column as integers since the epoch in ``unit``, floored as Java's
    ``toEpochMilli`` and ``Timestamp.getTime`` floor (-1500 us is -2 ms)."""
    if pa.types.is_date32(column.type) or pa.types.is_date64(column.type):
        column = column.cast(pa.timestamp("us"))  # a day is its midnight, UTC
    us = pc.cast(column, pa.timestamp("us", tz=column.type.tz), safe=False).cast(pa.int64())
    if unit == "us":
        return us
    q = pc.divide(us, 1000)  # integer division: toward zero
    return pc.if_else(pc.less(pc.subtract(us, pc.multiply(q, 1000)), 0), pc.subtract(q, 1), q)


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_map(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_map(t.value_type)
    return False


def _dicts(value, t: pa.DataType):
    if value is None:
        return None
    if pa.types.is_map(t):
        return {k: _dicts(v, t.item_type) for k, v in value}
    if pa.types.is_struct(t):
        return {t.field(i).name: _dicts(value[t.field(i).name], t.field(i).type)
                for i in range(t.num_fields)}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_dicts(v, t.value_type) for v in value]
    return value


def _encode_fixed(column: pa.Array, kind: Kind) -> list[bytes]:
    dtype, arrow_t = FIXED_WIDTH[kind]
    if kind in (Kind.DATE, Kind.LOCAL_DATE):
        days = column.cast(pa.date32()).cast(pa.int32()).to_numpy(zero_copy_only=False)
        arr = days.astype("int64") * (MS_PER_DAY if kind is Kind.DATE else 1)
    elif kind is Kind.TIMESTAMP:  # to milliseconds, floored as Java's Timestamp keeps it
        arr = _epoch(column, "ms").to_numpy(zero_copy_only=False)
    elif kind is Kind.BOOLEAN:
        arr = column.to_numpy(zero_copy_only=False).astype("u1")
    else:
        arr = column.cast(arrow_t).to_numpy(zero_copy_only=False)
    raw = np.ascontiguousarray(arr.astype(dtype)).tobytes()
    width = np.dtype(dtype).itemsize
    return [raw[i:i + width] for i in range(0, len(raw), width)]


def check_writable(column_type: pa.DataType, schema: TopicSchema, topic: str,
                   column: str = "value") -> None:
    """Refuse a ``value`` column the topic's schema cannot take, before anything is
    written: a field the schema needs (no default) that the column lacks, or a field
    whose type cannot be converted. Named: the column, the field, the topic. A
    KEY_VALUE schema's value is checked here, its key by the caller (``column='key'``)."""
    if schema.is_key_value and schema.value is not None:
        check_writable(column_type, schema.value, topic, column)
        return
    if schema.is_bytes:
        if not (pa.types.is_binary(column_type) or pa.types.is_string(column_type)):
            raise SchemaError(f"column {column!r} is {column_type}, topic {topic!r} has no "
                              "schema: write binary or string, or a struct (an Avro schema "
                              "is derived and registered)")
        return
    if schema.is_record:
        if not pa.types.is_struct(column_type):
            raise SchemaError(f"column {column!r} is {column_type}, topic {topic!r} has a "
                              f"{schema.kind.name} schema: write a struct of its fields")
        _check_record(column_type, json.loads(schema.definition), column, topic, {})
        return
    want = schema.arrow_type(topic)
    if not _convertible(column_type, want):
        raise SchemaError(f"column {column!r} is {column_type}, topic {topic!r} has a "
                          f"{schema.kind.name} schema ({want})")


def _check_record(t: pa.StructType, avro: dict, where: str, topic: str, named: dict
                  ) -> None:
    have = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
    names = {f["name"] for f in avro["fields"]}
    extra = sorted(set(have) - names)
    if extra:
        raise SchemaError(f"column {where!r}: field(s) {extra} are not in topic {topic!r}'s "
                          "schema; drop them or evolve the schema")
    for f in avro["fields"]:
        name = f["name"]
        ftype = f["type"]
        nullable = isinstance(ftype, list) and "null" in ftype
        if name not in have:
            if "default" not in f and not nullable:
                raise SchemaError(f"column {where!r} lacks field {name!r}, which topic "
                                  f"{topic!r}'s schema needs (no default)")
            continue
        want, _ = avro_field_type(ftype, f"{where}.{name}", named)
        got = have[name]
        if pa.types.is_struct(want) and pa.types.is_struct(got):
            branch = ftype if not isinstance(ftype, list) else next(
                b for b in ftype if b != "null")
            if isinstance(branch, dict) and branch.get("type") == "record":
                _check_record(got, branch, f"{where}.{name}", topic, named)
                continue
        if not _convertible(got, want):
            raise SchemaError(f"column {where!r}: field {name!r} is {got}, topic {topic!r}'s "
                              f"schema has {want}")


def _convertible(got: pa.DataType, want: pa.DataType) -> bool:
    """Whether values of ``got`` encode as ``want`` (nullability aside: a null where the
    schema has none fails the write, named)."""
    if got == want or pa.types.is_null(got):
        return True
    if pa.types.is_struct(want):
        if not pa.types.is_struct(got):
            return False
        names = {want.field(i).name: want.field(i) for i in range(want.num_fields)}
        have = {got.field(i).name: got.field(i).type for i in range(got.num_fields)}
        return set(have) <= set(names) and all(
            _convertible(t, names[n].type) for n, t in have.items()) and all(
            names[n].nullable for n in set(names) - set(have))
    if pa.types.is_integer(want):
        return pa.types.is_integer(got) and got.bit_width <= want.bit_width
    if pa.types.is_floating(want):
        return pa.types.is_floating(got) or pa.types.is_integer(got)
    if pa.types.is_timestamp(want):
        return pa.types.is_timestamp(got) or pa.types.is_date(got)
    if pa.types.is_date(want):
        return pa.types.is_date(got)
    if pa.types.is_string(want):
        return pa.types.is_string(got) or pa.types.is_large_string(got)
    if pa.types.is_binary(want):
        return pa.types.is_binary(got) or pa.types.is_large_binary(got)
    if pa.types.is_decimal(want):  # Avro's decimal scale is exact: cast to it first
        return pa.types.is_decimal(got) and got.scale == want.scale and (
            got.precision <= want.precision)
    if pa.types.is_list(want):
        return pa.types.is_list(got) and _convertible(got.value_type, want.value_type)
    if pa.types.is_map(want):
        return pa.types.is_map(got) and _convertible(got.item_type, want.item_type)
    return False


# What pulsar-client's C++ core attaches to a producer (others are sent as no schema).
REGISTERED_BY_PRODUCERS = (Kind.STRING, Kind.JSON, Kind.AVRO)


class EncodedSchema(Schema):
    """A schema object for pulsar-client's producer: it registers ``schema`` with the
    broker (the producer's SchemaInfo) and sends the payloads it is given as they are
    (the sink encoded them, a column at a time)."""

    def __init__(self, schema: TopicSchema) -> None:  # noqa: D107 - no Schema.__init__:
        if schema.kind not in REGISTERED_BY_PRODUCERS:  # it would serialise a text again
            raise SchemaError(f"a producer cannot register a {schema.kind.name} schema "
                              "(pulsar-client's core registers only STRING, JSON and AVRO)")
        self.topic_schema = schema
        self._record_cls = bytes
        self._schema_info = schema.info()
        self._client = None

    def encode(self, payload: bytes) -> bytes:
        return payload

    def decode(self, data: bytes) -> bytes:
        return data

    def decode_message(self, msg) -> bytes:
        return msg.data()

    def __repr__(self) -> str:  # a producer's settings are told apart by their repr
        return f"EncodedSchema({self.topic_schema.describe()})"
