"""Pulsar schemas as columns: a topic's registered schema mapped to an Arrow type (and so
to Spark's), payloads decoded with the version they were written with and resolved
into the one a query planned, and columns encoded the way Pulsar's Java and Python
producers encode them, so a typed consumer downstream reads what the sink wrote.

The registry is read over the binary protocol (pulsar-client's schema lookup), which
every Apache Pulsar broker answers; pulsar-lite keeps no registry and never answers,
so a lookup is bounded and its silence is reported as such (``RegistrySilent``).
The codec is schema_codec.py.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import _pulsar
import fastavro
import pyarrow as pa

from pulsar_txn.admin import admin_request
from pulsar_txn.errors import AdminError, ConfigError


class Kind(IntEnum):
    """Pulsar's schema types (the protocol's numbers)."""

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    DATE = 12
    TIME = 13
    TIMESTAMP = 14
    KEY_VALUE = 15
    INSTANT = 16
    LOCAL_DATE = 17
    LOCAL_TIME = 18
    LOCAL_DATE_TIME = 19
    PROTOBUF_NATIVE = 20
    BYTES = -1


class SchemaError(ConfigError):
    """A schema or payload this query cannot represent: named, never decoded wrongly."""


class RegistrySilent(SchemaError):
    """The broker did not answer a schema lookup in time (pulsar-lite keeps no registry)."""


# Fixed-width primitives as Java's Schema.INT32 & co. write them: big-endian.
FIXED_WIDTH: dict[Kind, tuple[str, pa.DataType]] = {
    Kind.BOOLEAN: ("u1", pa.bool_()),
    Kind.INT8: (">i1", pa.int8()),
    Kind.INT16: (">i2", pa.int16()),
    Kind.INT32: (">i4", pa.int32()),
    Kind.INT64: (">i8", pa.int64()),
    Kind.FLOAT: (">f4", pa.float32()),
    Kind.DOUBLE: (">f8", pa.float64()),
    Kind.DATE: (">i8", pa.date32()),  # java.util.Date: epoch ms; a Spark date
    Kind.TIMESTAMP: (">i8", pa.timestamp("us", tz="UTC")),  # java.sql.Timestamp: epoch ms
    Kind.LOCAL_DATE: (">i8", pa.date32()),  # epoch day
}
MS_PER_DAY = 86_400_000
RECORD_KINDS = (Kind.AVRO, Kind.JSON)
TIMESTAMPS = ("timestamp-millis", "timestamp-micros", "local-timestamp-millis",
              "local-timestamp-micros")
TEMPORAL = TIMESTAMPS + ("date",)


@dataclass(frozen=True)
class TopicSchema:
    """One version of a topic's schema: its type and, for Avro and JSON, the Avro
    definition (JSON text) the registry holds. A KEY_VALUE schema holds the key's and
    the value's schemas and whether the key travels apart (SEPARATED: in the message
    key, base64) or inside the payload (INLINE: both, each after its int32 length)."""

    kind: Kind
    definition: str = ""
    key: TopicSchema | None = None
    value: TopicSchema | None = None
    separated: bool = False

    @property
    def is_bytes(self) -> bool:
        return self.kind in (Kind.BYTES, Kind.NONE)

    @property
    def is_record(self) -> bool:
        return self.kind in RECORD_KINDS

    @property
    def is_key_value(self) -> bool:
        return self.kind is Kind.KEY_VALUE

    @property
    def value_schema(self) -> TopicSchema:
        """The schema of the ``value`` column: a KEY_VALUE schema's value, else itself."""
        return self.value if self.value is not None else self

    def parsed(self):
        """The Avro schema, parsed by fastavro (records only)."""
        return _parse(self.definition)

    def parsed_physical(self):
        """Parsed with timestamps and dates left as the integers Avro stores."""
        return _parse(self.definition, physical=True)

    def arrow_type(self, topic: str = "") -> pa.DataType:
        """The column type of this schema's values."""
        if self.is_bytes:
            return pa.binary()
        if self.kind is Kind.STRING:
            return pa.string()
        if self.kind in FIXED_WIDTH:
            return FIXED_WIDTH[self.kind][1]
        if self.is_record:
            return avro_toavro_field_type(json.loads(self.definition), topic or "value")
        if self.is_key_value and self.key is not None and self.value is not None:
            self.key.arrow_type(topic)  # a key with no column type fails here, named
            return self.value.arrow_type(topic)
        raise SchemaError(f"topic {topic!r} has a {self.kind.name} schema, which "
                          "pulsar-txn maps to no column type yet: the source reads it with "
                          "valueSchema=bytes, the sink writes it from a binary value column "
                          "you encode yourself")

    def info(self, name: str = "pulsar-txn") -> _pulsar.SchemaInfo:
        """The SchemaInfo a producer registers with (pulsar-client's)."""
        return _pulsar.SchemaInfo(_pulsar.SchemaType(int(self.kind)), name,
                                  self.definition)

    def key_arrow_type(self, topic: str = "") -> pa.DataType:
        """The ``key`` column's type: a KEY_VALUE schema's key, else the message key."""
        return self.key.arrow_type(topic) if self.key is not None else pa.string()

    def describe(self) -> str:
        if self.is_key_value and self.key is not None and self.value is not None:
            return (f"KEY_VALUE({'SEPARATED' if self.separated else 'INLINE'}) "
                    f"key {self.key.describe()}, value {self.value.describe()}")
        return self.kind.name if not self.is_record else f"{self.kind.name} {self.definition}"


BYTES = TopicSchema(Kind.BYTES)

_PARSED: dict[tuple[str, bool], object] = {}


def _parse(definition: str, physical: bool = False):
    got = _PARSED.get((definition, physical))
    if got is None:
        if len(_PARSED) > 256:
            _PARSED.clear()
        drop = ("uuid",) + (TEMPORAL if physical else ())
        got = _PARSED[(definition, physical)] = fastavro.parse_schema(
            _without_logical(json.loads(definition), drop))
    return got


def _without_logical(avro, drop: tuple[str, ...]):
    """The definition without the logical types ``drop``: ``uuid`` strings stay strings
    (fastavro would hand out ``uuid.UUID`` objects, which no column takes), and with
    TEMPORAL, timestamps and dates stay the integers Avro stores."""
    if isinstance(avro, list):
        return [_without_logical(a, drop) for a in avro]
    if isinstance(avro, dict):
        return {k: _without_logical(v, drop) for k, v in avro.items()
                if not (k == "logicalType" and v in drop)}
    return avro


# ---- the registry ----

AdminGet = Callable[[str], Any]  # a GET on the broker's REST admin API: path -> JSON


def lookup(native_client: _pulsar.Client, topic: str, version: int = -1,
           timeout_s: float = 5.0, admin: AdminGet | None = None) -> TopicSchema:
    """A topic's schema (``version`` -1: the latest) from the broker's registry; BYTES
    when the topic has none (the broker answers TopicNotFound then). A broker that does
    not answer in ``timeout_s`` raises RegistrySilent (the lookup itself ends with the
    client's operation timeout, in the background).

    pulsar-client's lookup drops a schema's properties, which alone say a KEY_VALUE
    schema's key and value types and encoding, and fails on a binary definition (a
    KEY_VALUE one's lengths); those are read from the REST admin API (``admin``), and
    without one refused, named."""
    out: list = []

    def ask() -> None:
        try:
            out.append(native_client.get_schema_info(topic, version))
        except Exception as e:  # noqa: BLE001 - handed to the caller's thread
            out.append(e)

    t = threading.Thread(target=ask, name="ptxn-schema-lookup", daemon=True)
    t.start()
    t.join(timeout_s)
    if not out:
        raise RegistrySilent(f"topic {topic!r}: the broker did not answer a schema lookup in "
                             f"{timeout_s:g} s (pulsar-lite keeps no schema registry)")
    got = out[0]
    if isinstance(got, UnicodeDecodeError) or (
            not isinstance(got, Exception) and int(got.schema_type()) == Kind.KEY_VALUE):
        return lookup_admin(admin, topic, version)
    if isinstance(got, _pulsar.TopicNotFound):
        if version >= 0:
            raise SchemaError(f"topic {topic!r}: the registry has no schema version {version}")
        return BYTES
    if isinstance(got, Exception):
        raise got  # the caller names the broker (connection.naming)
    kind = int(got.schema_type())
    try:
        kind = Kind(kind)
    except ValueError:
        raise SchemaError(f"topic {topic!r}: schema type {kind} is unknown to this "
                          "version") from None
    text = got.schema() if kind in RECORD_KINDS else ""
    return TopicSchema(kind, text)


def admin_get(admin_url: str | None, auth=None, timeout_s: float = 10.0) -> AdminGet | None:
    """The REST lookups ``lookup`` needs for KEY_VALUE schemas; None without a URL."""
    if not admin_url:
        return None
    def get(path: str):
        return admin_request(admin_url, "GET", path, timeout=timeout_s, auth=auth)
    return get


def lookup_admin(admin: AdminGet | None, topic: str, version: int) -> TopicSchema:
    if admin is None:
        raise SchemaError(
            f"topic {topic!r} has a schema pulsar-client's lookup cannot read whole (a "
            "KEY_VALUE schema: its key and value types are in properties the lookup drops); "
            "set option 'admin.url' (the broker's REST admin API) to read or write it "
            "typed, or read it with valueSchema=bytes")
    domain, _, rest = topic.rpartition("://")
    parts = rest.split("/")
    if len(parts) == 1:
        parts = ["public", "default", parts[0]]
    path = "/admin/v2/schemas/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)
    path += "/schema" + (f"/{version}" if version >= 0 else "")
    try:
        body = admin(path)
    except AdminError as e:
        if e.status == 404 and version >= 0:
            raise SchemaError(f"topic {topic!r}: the registry has no schema version "
                              f"{version}") from None
        raise SchemaError(f"topic {topic!r}: the schema could not be read from the REST "
                          f"admin API (option 'admin.url'): {e}") from None
    return from_admin_body(body, topic)


def from_admin_body(body: dict, topic: str) -> TopicSchema:
    """A schema as the REST admin API returns it (``GetSchemaResponse``): a KEY_VALUE
    schema's data is ``{"key": ..., "value": ...}``, its types in the properties."""
    try:
        kind = Kind[body["type"]]
    except KeyError:
        raise SchemaError(f"topic {topic!r}: schema type {body.get('type')!r} is unknown "
                          "to this version") from None
    if kind is not Kind.KEY_VALUE:
        return TopicSchema(kind, body.get("data", "") if kind in RECORD_KINDS else "")
    props = body.get("properties") or {}
    data = json.loads(body.get("data") or "{}")

    def part(which: str) -> TopicSchema:
        name = props.get(f"{which}.schema.type", "BYTES")
        try:
            k = Kind[name]
        except KeyError:
            raise SchemaError(f"topic {topic!r}: the KEY_VALUE schema's {which} has type "
                              f"{name!r}, unknown to this version") from None
        if k is Kind.KEY_VALUE:
            raise SchemaError(f"topic {topic!r}: a KEY_VALUE schema nested in a KEY_VALUE "
                              f"schema's {which} has no column type here")
        d = data.get(which, "")
        return TopicSchema(k, (d if isinstance(d, str) else json.dumps(d))
                           if k in RECORD_KINDS else "")
    return TopicSchema(Kind.KEY_VALUE, "", part("key"), part("value"),
                       props.get("kv.encoding.type", "INLINE").upper() == "SEPARATED")


# ---- Avro -> Arrow ----

def avro_toavro_field_type(avro, where: str) -> pa.DataType:
    """The Arrow type of an Avro type (pulsar-spark's mapping: a record is a struct, a
    union with null a nullable field, an enum a string, a map's keys strings)."""
    t, _ = avro_field_type(avro, where)
    return t


def remember(named: dict, avro: dict, value) -> None:
    """A named Avro type (record, enum, fixed) kept under its name, its full name and its
    short name: a later field may refer to it by either (Java's ReflectData names a
    nested enum in its class's namespace, then refers to it by full name)."""
    name = avro["name"]
    named[name] = value
    if "." in name:
        named[name.rsplit(".", 1)[1]] = value
    elif "namespace" in avro:
        named[f"{avro['namespace']}.{name}"] = value


def recall(named: dict, name: str):
    """What ``remember`` kept for ``name`` (a full name whose namespace was inherited
    is found by its short name), or None."""
    if name in named:
        return named[name]
    return named.get(name.rsplit(".", 1)[1]) if "." in name else None


def avro_field_type(avro, where: str, named: dict | None = None, view: str = "column"
                    ) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) of an Avro field's type. ``view``: ``column`` (what the
    source hands Spark: timestamps in us), ``units`` (timestamps in the schema's own
    unit) or ``physical`` (timestamps and dates as the integers Avro stores: decoded
    without a datetime object per value, then cast by Arrow, a column at a time)."""
    named = {} if named is None else named
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        nullable = len(branches) < len(avro)
        if len(branches) == 1:
            return avro_field_type(branches[0], where, named, view)[0], nullable
        kinds = sorted(b if isinstance(b, str) else b.get("type") for b in branches)
        if kinds == ["int", "long"]:
            return pa.int64(), nullable
        if kinds == ["double", "float"]:
            return pa.float64(), nullable
        raise SchemaError(f"field {where!r}: a union of {kinds} has no column type here "
                          "(only a union with null, int|long or float|double)")
    if isinstance(avro, str):
        known = recall(named, avro)
        if known is not None:
            return known, False
        simple = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(),
                  "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
                  "bytes": pa.binary(), "string": pa.string()}
        if avro not in simple:
            raise SchemaError(f"field {where!r}: unknown Avro type {avro!r}")
        return simple[avro], avro == "null"
    logical = avro.get("logicalType")
    kind = avro["type"]
    if logical == "date" and kind == "int":
        return (pa.int32() if view == "physical" else pa.date32()), False
    if logical in TIMESTAMPS and kind == "long":
        if view == "physical":
            return pa.int64(), False
        unit = "ms" if view == "units" and logical.endswith("millis") else "us"
        return pa.timestamp(unit, tz=None if logical.startswith("local") else "UTC"), False
    if logical in ("time-millis", "time-micros"):
        raise SchemaError(f"field {where!r}: Avro {logical} has no Spark type here; read the "
                          "topic with valueSchema=bytes")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision = int(avro["precision"])
        if not 1 <= precision <= 38:
            raise SchemaError(f"field {where!r}: decimal precision {precision} is beyond "
                              "Spark's 38 digits; read the topic with valueSchema=bytes")
        return pa.decimal128(precision, int(avro.get("scale", 0))), False
    if kind == "record":
        fields = []
        for f in avro["fields"]:
            ft, nullable = avro_field_type(f["type"], f"{where}.{f['name']}", named, view)
            fields.append(pa.field(f["name"], ft, nullable=nullable))
        t = pa.struct(fields)
        remember(named, avro, t)
        return t, False
    if kind in ("enum", "fixed"):
        t = pa.string() if kind == "enum" else pa.binary()
        remember(named, avro, t)
        return t, False
    if kind == "array":
        it, nullable = avro_field_type(avro["items"], f"{where}[]", named, view)
        return pa.list_(pa.field("element", it, nullable=nullable)), False
    if kind == "map":
        vt, nullable = avro_field_type(avro["values"], f"{where}{{}}", named, view)
        return pa.map_(pa.string(), pa.field("value", vt, nullable=nullable)), False
    return avro_field_type(kind, where, named, view)  # {"type": "string"} and friends


# ---- Arrow -> Avro (a DataFrame written to a topic without a schema) ----

def arrow_to_avro(t: pa.DataType, name: str = "topLevelRecord") -> dict:
    """The Avro record a struct column is written as when the topic has no schema
    (named as pulsar-spark names it): a nullable field is a union with null and has a
    null default, so a reader of a later version can add fields compatibly."""
    if not pa.types.is_struct(t):
        raise SchemaError(f"column 'value' of type {t} is not a struct")
    return _avro_record(t, name, [0])


def _avro_record(t: pa.StructType, name: str, counter: list[int]) -> dict:
    fields = []
    for i in range(t.num_fields):
        f = t.field(i)
        avro = _avro(f.type, f.name, counter)
        fields.append({"name": f.name, "type": ["null", avro], "default": None}
                      if f.nullable else {"name": f.name, "type": avro})
    return {"type": "record", "name": name, "fields": fields}


def _avro(t: pa.DataType, where: str, counter: list[int]):
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int"
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(t):
        logical = "timestamp-micros" if t.tz else "local-timestamp-micros"
        return {"type": "long", "logicalType": logical}
    if pa.types.is_decimal(t):
        return {"type": "bytes", "logicalType": "decimal", "precision": t.precision,
                "scale": t.scale}
    if pa.types.is_struct(t):
        counter[0] += 1
        return _avro_record(t, f"Record{counter[0]}", counter)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "items": ["null", _avro(t.value_type, where, counter)]}
    if pa.types.is_map(t):
        if not pa.types.is_string(t.key_type):
            raise SchemaError(f"field {where!r}: a map with {t.key_type} keys has no Avro "
                              "type (Avro maps have string keys)")
        return {"type": "map", "values": ["null", _avro(t.item_type, where, counter)]}
    raise SchemaError(f"field {where!r}: type {t} has no Avro type here")
