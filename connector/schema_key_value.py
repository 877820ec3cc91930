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

from pulsar_txn.schema_codec import Fetch, decode_column, encode_column
from pulsar_txn.schemas import SchemaError, TopicSchema


def split_key_values(payloads: list, keys: list, schema: TopicSchema, topic: str,
                     ids: list) -> tuple[list, list]:
    """(key bytes, value bytes) of KEY_VALUE messages, None where absent: INLINE in the
    payload (an int32 length before each; -1 a null), SEPARATED the key in the message
    key (base64, as Java's producer writes it) and the value the payload."""
    if schema.separated:
        out = []
        for i, k in enumerate(keys):
            try:
                out.append(base64.b64decode(k, validate=True) if k else None)
            except ValueError:
                raise SchemaError(f"topic {topic!r}: message {ids[i]}'s key is not the "
                                  "base64 a SEPARATED KEY_VALUE schema's key is written as; "
                                  "read it with valueSchema=bytes to see it") from None
        return out, list(payloads)
    ks, vs = [], []
    for i, p in enumerate(payloads):
        try:
            n = int.from_bytes(p[0:4], "big", signed=True)
            k = p[4:4 + n] if n >= 0 else None
            at = 4 + max(n, 0)
            m = int.from_bytes(p[at:at + 4], "big", signed=True)
            v = p[at + 4:at + 4 + m] if m >= 0 else None
            if len(p) < 8 or (n >= 0 and len(k) != n) or at + 4 + max(m, 0) != len(p):
                raise ValueError
        except (ValueError, TypeError):
            raise SchemaError(f"topic {topic!r}: message {ids[i]} is not an INLINE "
                              "KEY_VALUE payload (key length, key, value length, value); "
                              "read it with valueSchema=bytes to see it") from None
        ks.append(k)
        vs.append(v)
    return ks, vs


def join_key_values(keys: list, values: list) -> list[bytes]:
    """INLINE KEY_VALUE payloads, as Java's KeyValueSchema writes them."""
    def part(b) -> bytes:
        return b"\xff\xff\xff\xff" if b is None else len(b).to_bytes(4, "big") + b
    return [part(k) + part(v) for k, v in zip(keys, values)]


def decode_key_values(payloads: Sequence[bytes], keys: Sequence, versions: Sequence[int],
                      planned: TopicSchema, fetch: Fetch, topic: str, ids: Sequence[str]
                      ) -> tuple[pa.Array, pa.Array]:
    """The ``key`` and ``value`` columns of KEY_VALUE messages: each half decoded as
    ``decode_column`` decodes a value, with the key's or value's schema of the version
    the message was written with; a version that is not the planned kind of KEY_VALUE
    fails, named."""
    ks, vs = split_key_values(list(payloads), list(keys), planned, topic, list(ids))

    def half(which: str) -> Fetch:
        def get(version: int) -> TopicSchema:
            got = fetch(version)
            if not got.is_key_value or got.separated != planned.separated:
                raise SchemaError(
                    f"topic {topic!r}: schema version {version} is {got.describe()[:200]}, "
                    f"the query planned {planned.describe()[:200]}: an incompatible change "
                    "of the topic's schema; restart the query to plan the new one")
            return getattr(got, which)
        return get
    return (_with_nulls(ks, versions, planned.key, half("key"), topic, ids),
            _with_nulls(vs, versions, planned.value, half("value"), topic, ids))


def _with_nulls(values: list, versions: Sequence[int], planned: TopicSchema, fetch: Fetch,
                topic: str, ids: Sequence[str]) -> pa.Array:
    where = [i for i, v in enumerate(values) if v is not None]
    if len(where) == len(values):
        return decode_column(values, versions, planned, fetch, topic, ids)
    dense = decode_column([values[i] for i in where], [versions[i] for i in where],
                          planned, fetch, topic, [ids[i] for i in where])
    at: list = [None] * len(values)
    for j, i in enumerate(where):
        at[i] = j
    return dense.take(pa.array(at, pa.int32()))


def encode_key_values(keys: pa.Array, values: pa.Array, schema: TopicSchema,
                      topic: str = "") -> list[bytes]:
    """INLINE KEY_VALUE payloads of a key and a value column (a null key or value
    written as Java writes one: length -1)."""
    return join_key_values(_encode_nullable(keys, schema.key, topic),
                           _encode_nullable(values, schema.value, topic))


def _encode_nullable(column: pa.Array, schema: TopicSchema, topic: str) -> list:
    if not column.null_count:
        return encode_column(column, schema, topic)
    valid = column.is_valid()
    dense = iter(encode_column(column.filter(valid), schema, topic))
    return [next(dense) if ok else None for ok in valid.to_pylist()]
