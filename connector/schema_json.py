"""Pulsar's JSON schema payloads, shaped by the schema's Avro definition: what Java's
Jackson writes (epoch milliseconds for a ``timestamp-millis`` field, days for a
``date``, base64 for ``bytes``) read into the values the Avro path gives, and back.
A missing field takes its default (schema evolution); an unknown one is dropped; a
value the definition cannot take raises (named by the caller), never passes as text.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal

from pulsar_txn.schemas import recall, remember

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_EPOCH_DAY = dt.date(1970, 1, 1)


def from_json(value, avro, where: str = "value", named: dict | None = None):
    """A decoded JSON value as the Avro definition ``avro`` types it."""
    named = {} if named is None else named
    if isinstance(avro, list):
        if value is None:
            if "null" in avro:
                return None
            raise ValueError(f"{where} is null")
        branches = [b for b in avro if b != "null"]
        if len(branches) == 1:
            return from_json(value, branches[0], where, named)
        return float(value) if isinstance(value, decimal.Decimal) else value  # float|double
    if isinstance(avro, str):
        known = recall(named, avro)
        if known is not None:
            return from_json(value, known, where, named)
        if avro == "bytes":
            return base64.b64decode(value) if isinstance(value, str) else bytes(value)
        if value is None and avro != "null":
            raise ValueError(f"{where} is null")
        if avro in ("int", "long"):
            if isinstance(value, bool) or not isinstance(value, (int, float, decimal.Decimal)
                                                         ) or value != int(value):
                raise ValueError(f"{where} is {value!r}, not an {avro}")
            return int(value)
        if isinstance(value, decimal.Decimal) or (
                avro in ("float", "double") and isinstance(value, int)
                and not isinstance(value, bool)):
            return float(value)
        return value
    kind, logical = avro["type"], avro.get("logicalType")
    if kind == "record":
        remember(named, avro, avro)
        if not isinstance(value, dict):
            raise ValueError(f"{where} is not an object")
        out = {}
        for f in avro["fields"]:
            name = f["name"]
            if name in value:
                out[name] = from_json(value[name], f["type"], f"{where}.{name}", named)
            elif "default" in f:
                out[name] = f["default"]
            else:
                raise ValueError(f"{where}.{name} is missing and has no default")
        return out
    if kind in ("enum", "fixed"):
        remember(named, avro, avro)
    if value is None:
        raise ValueError(f"{where} is null")
    if logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                   "local-timestamp-micros", "date") and (
            isinstance(value, bool) or not isinstance(value, (int, float, decimal.Decimal))
            or value != int(value)):
        raise ValueError(f"{where} is {value!r}, not a whole number of the {logical} unit")
    if isinstance(value, decimal.Decimal) and logical != "decimal":
        value = int(value) if logical else float(value)  # 1.7e12 for a timestamp reads
    if kind == "array":
        return [from_json(v, avro["items"], f"{where}[]", named) for v in value]
    if kind == "map":
        return {k: from_json(v, avro["values"], f"{where}{{}}", named) for k, v in value.items()}
    if logical == "timestamp-millis":
        return _EPOCH + dt.timedelta(milliseconds=value)
    if logical == "timestamp-micros":
        return _EPOCH + dt.timedelta(microseconds=value)
    if logical == "local-timestamp-millis":
        return _EPOCH_NAIVE + dt.timedelta(milliseconds=value)
    if logical == "local-timestamp-micros":
        return _EPOCH_NAIVE + dt.timedelta(microseconds=value)
    if logical == "date":
        return _EPOCH_DAY + dt.timedelta(days=value)
    if logical == "decimal":
        return decimal.Decimal(str(value))
    if kind == "fixed":
        return base64.b64decode(value) if isinstance(value, str) else bytes(value)
    return from_json(value, kind, where, named)


def to_json(value, avro, named: dict | None = None):
    """A column value as Jackson would write it under ``avro`` (the inverse)."""
    named = {} if named is None else named
    if value is None:
        return None
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        return to_json(value, branches[0], named) if len(branches) == 1 else value
    if isinstance(avro, str):
        known = recall(named, avro)
        if known is not None:
            return to_json(value, known, named)
        if avro == "bytes":
            return base64.b64encode(value).decode()
        return value
    kind, logical = avro["type"], avro.get("logicalType")
    if kind == "record":
        remember(named, avro, avro)
        # a field the column lacks takes its default, as Avro's writer fills it
        return {f["name"]: (to_json(value[f["name"]], f["type"], named) if f["name"] in value
                            else f["default"])
                for f in avro["fields"] if f["name"] in value or "default" in f}
    if kind in ("enum", "fixed"):
        remember(named, avro, avro)
    if kind == "array":
        return [to_json(v, avro["items"], named) for v in value]
    if isinstance(value, int) and logical in ("timestamp-millis", "timestamp-micros", "date",
                                              "local-timestamp-millis",
                                              "local-timestamp-micros"):
        return value  # a default: already the number Jackson writes
    if kind == "map":
        return {k: to_json(v, avro["values"], named) for k, v in value.items()}
    if logical in ("timestamp-millis", "timestamp-micros"):
        delta = value - (_EPOCH if value.tzinfo else _EPOCH_NAIVE)
        return delta // dt.timedelta(milliseconds=1 if logical.endswith("millis") else 0.001)
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        delta = value.replace(tzinfo=None) - _EPOCH_NAIVE
        return delta // dt.timedelta(milliseconds=1 if logical.endswith("millis") else 0.001)
    if logical == "date":
        return (value - _EPOCH_DAY).days
    if logical == "decimal":
        f = float(value)
        if decimal.Decimal(repr(f)) != value:
            raise ValueError(f"decimal {value} has no exact JSON number here (a double)")
        return f
    if kind == "fixed":
        return base64.b64encode(value).decode()
    return to_json(value, kind, named)


def with_defaults(value, avro, named: dict | None = None):
    """``value`` with every record field it lacks set to the field's Avro default, as
    Avro's writer fills it (a ``bytes`` or ``fixed`` default is a string of code points
    0-255, per the Avro spec), so the JSON a sink writes carries what Java's reader of
    the Avro payload would see."""
    named = {} if named is None else named
    if value is None:
        return None
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        return with_defaults(value, branches[0], named) if len(branches) == 1 else value
    if isinstance(avro, str):
        known = recall(named, avro)
        return with_defaults(value, known, named) if known is not None else value
    kind = avro["type"]
    if kind == "record":
        remember(named, avro, avro)
        if not isinstance(value, dict):
            return value
        out = dict(value)
        for f in avro["fields"]:
            if f["name"] in out:
                out[f["name"]] = with_defaults(out[f["name"]], f["type"], named)
            elif "default" in f:
                out[f["name"]] = _default(f["default"], f["type"], named)
        return out
    if kind in ("enum", "fixed"):
        remember(named, avro, avro)
    if kind == "array" and isinstance(value, list):
        return [with_defaults(v, avro["items"], named) for v in value]
    if kind == "map" and isinstance(value, dict):
        return {k: with_defaults(v, avro["values"], named) for k, v in value.items()}
    return value


def _default(default, avro, named: dict):
    if default is None:
        return None
    if isinstance(avro, list):  # a union's default is of its first branch
        return _default(default, avro[0], named)
    if isinstance(avro, str):
        known = recall(named, avro)
        if known is not None:
            return _default(default, known, named)
        return default.encode("latin-1") if avro == "bytes" else default
    if avro["type"] in ("bytes", "fixed") and isinstance(default, str):
        raw = default.encode("latin-1")
        if avro.get("logicalType") == "decimal":
            scale = int(avro.get("scale", 0))
            return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)
        return raw
    if avro["type"] == "record":
        return with_defaults(default, avro, named)
    return default
