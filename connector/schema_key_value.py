"""KEY_VALUE messages as two columns (issue 29): the key and the value of each message
split out as Java's ``KeyValueSchema`` lays them (INLINE: both in the payload, each
after its int32 length; SEPARATED: the key in the message key, base64), each half then
decoded or encoded by schema_codec as a value is. The schema itself (the halves' types
and the encoding, from the REST admin API) is schemas.py's.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import pyarrow as pa

from pulsar_txn.schema_codec import Fetch, decode_nullable, encode_column
from pulsar_txn.schemas import SchemaError, TopicSchema


def split_key_values(payloads: list, keys: list, schema: TopicSchema, topic: str,
                     ids: list) -> tuple[list, list]:
    """(key bytes, value bytes) of KEY_VALUE messages, None where absent: INLINE in the
    payload (an int32 length before each; -1 a null), SEPARATED the key in the message
    key (base64, as Java's producer writes it) and the value the payload. A payload
    None is a message Java sent with a null value (its null-value flag)."""
    if schema.separated:
        out = []
        for i, k in enumerate(keys):
            try:  # "" is Java's null key and its empty one alike: the flags are not shown
                out.append(base64.b64decode(k, validate=True) if k else None)
            except ValueError:
                raise SchemaError(f"topic {topic!r}: message {ids[i]}'s key is not the "
                                  "base64 a SEPARATED KEY_VALUE schema's key is written as; "
                                  "read it with valueSchema=bytes to see it") from None
        return out, list(payloads)
    ks, vs = [], []
    for i, p in enumerate(payloads):
        if p is None:
            ks.append(None)
            vs.append(None)
            continue
        try:
            n = int.from_bytes(p[0:4], "big", signed=True)
            at = 4 + max(n, 0)
            m = int.from_bytes(p[at:at + 4], "big", signed=True)
            if len(p) < 8 or n < -1 or m < -1 or at + 4 + max(m, 0) != len(p):
                raise ValueError
        except (ValueError, TypeError):
            raise SchemaError(f"topic {topic!r}: message {ids[i]} is not an INLINE "
                              "KEY_VALUE payload (key length, key, value length, value); "
                              "read it with valueSchema=bytes to see it") from None
        ks.append(p[4:at] if n >= 0 else None)
        vs.append(p[at + 4:] if m >= 0 else None)
    return ks, vs


def join_key_values(keys: list, values: list) -> list[bytes]:
    """INLINE KEY_VALUE payloads, as Java's KeyValueSchema writes them."""
    def part(b) -> bytes:
        return b"\xff\xff\xff\xff" if b is None else len(b).to_bytes(4, "big") + b
    return [part(k) + part(v) for k, v in zip(keys, values)]


def decode_key_values(payloads: Sequence[bytes | None], keys: Sequence,
                      versions: Sequence[int], planned: TopicSchema, fetch: Fetch, topic: str,
                      ids: Sequence[str]) -> tuple[pa.Array, pa.Array]:
    """The ``key`` and ``value`` columns of KEY_VALUE messages: each half decoded as
    ``decode_column`` decodes a value, with the key's or value's schema of the version
    the message was written with. Each distinct version is checked first (one lookup
    each): one that is not the planned kind of KEY_VALUE fails, named, before any
    payload is split by a layout it may not have."""
    checked: dict[int, TopicSchema] = {}
    for i, version in enumerate(versions):
        if version >= 0 and version not in checked:
            got = checked[version] = fetch(version)
            if not got.is_key_value or got.separated != planned.separated:
                raise SchemaError(
                    f"topic {topic!r}: message {ids[i]}'s schema version {version} is "
                    f"{got.describe()[:200]}, the query planned {planned.describe()[:200]}: "
                    "an incompatible change of the topic's schema; restart the query to "
                    "plan the new one")
    ks, vs = split_key_values(list(payloads), list(keys), planned, topic, list(ids))
    return (decode_nullable(ks, versions, planned.key, lambda v: checked[v].key, topic, ids),
            decode_nullable(vs, versions, planned.value, lambda v: checked[v].value, topic,
                            ids))


def encode_key_values(keys: pa.Array, values: pa.Array, schema: TopicSchema,
                      topic: str = "") -> list[bytes]:
    """INLINE KEY_VALUE payloads of a key and a value column (a null key or value
    written as Java writes one: length -1)."""
    return join_key_values(_encode_nullable(keys, schema.key, topic, "key"),
                           _encode_nullable(values, schema.value, topic, "value"))


def _encode_nullable(column: pa.Array, schema: TopicSchema, topic: str, name: str) -> list:
    if not column.null_count:
        return encode_column(column, schema, topic, name)
    valid = column.is_valid()
    dense = iter(encode_column(column.filter(valid), schema, topic, name))
    return [next(dense) if ok else None for ok in valid.to_pylist()]
