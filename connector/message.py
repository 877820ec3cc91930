"""A message as READ_COMMITTED readers return it.

It reads like pulsar-client's ``Message`` (``value()``, ``data()``, ``partition_key()``,
``properties()``, ``message_id()`` …), and the attributes it had before those methods
(``m.value``, ``m.properties``, ``m.message_id``) keep working: each returns a value
that is also callable, returning itself (or the native id), as the method would.
"""

from __future__ import annotations

import functools

from pulsar.schema import BytesSchema

from pulsar_txn.records import PROTOCOL_PREFIX, Position


class Value(bytes):
    """The payload: ``bytes``, and callable like pulsar-client's ``Message.value()``."""

    __slots__ = ()

    def __call__(self) -> bytes:
        return self


class Decoded:
    """The value a schema decoded (``schema=`` on the reader or consumer): call it, as
    pulsar-client's ``Message.value()``; it compares equal to the decoded value. Decoded
    on the first call, once: a bytes reader pays nothing for schemas."""

    __slots__ = ("_schema", "_raw", "_value", "_done")

    def __init__(self, schema, raw) -> None:
        self._schema = schema
        self._raw = raw
        self._done = False

    def __call__(self):
        if not self._done:
            raw = self._raw
            # a message that names no schema version (its broker keeps no registry, as
            # pulsar-lite) is decoded with the reader's own schema: pulsar-client's
            # Avro decoder would first ask the broker for version -1 and time out
            self._value = (self._schema.decode(raw.data()) if raw.int_schema_version() < 0
                           else self._schema.decode_message(raw))
            self._done = True
        return self._value

    def __eq__(self, other) -> bool:
        return self() == (other() if isinstance(other, Decoded) else other)

    __hash__ = None  # a decoded record need not be hashable

    def __repr__(self) -> str:
        return f"Decoded({self()!r})"


class Properties(dict):
    """The user properties: a ``dict``, and callable like ``Message.properties()``."""

    def __call__(self) -> dict[str, str]:
        return self


@functools.total_ordering
class MessageIdRef:
    """The broker's message id, read like pulsar-client's (``ledger_id()``, ``entry_id()``,
    ``serialize()`` …) and ordered like it. Calling it returns the native ``MessageId``
    that pulsar-client's own calls take (``Consumer.acknowledge``, ``Reader.seek``): pass
    ``m.message_id()`` there, never one rebuilt from numbers, which would acknowledge a
    batched entry whole."""

    __slots__ = ("_native",)

    def __init__(self, native) -> None:
        self._native = native

    def __call__(self):
        return self._native

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "_native":  # copy/pickle probe a bare object
            raise AttributeError(name)
        return getattr(self._native, name)

    def __copy__(self) -> MessageIdRef:
        return self

    def __deepcopy__(self, memo) -> MessageIdRef:
        return self

    def _other(self, other):
        if isinstance(other, MessageIdRef):
            return other._native
        return other if isinstance(other, type(self._native)) else None

    def __eq__(self, other) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._native == o

    def __lt__(self, other) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._native < o

    def __hash__(self) -> int:
        return hash((self._native.ledger_id(), self._native.entry_id(),
                     self._native.batch_index()))

    def __str__(self) -> str:
        return str(self._native)

    def __repr__(self) -> str:
        return repr(self._native)


class TxnMessage:
    """A message as a READ_COMMITTED reader returns it (fields read lazily from the broker's)."""

    __slots__ = ("_raw", "topic", "_mid", "txn_id", "_schema")

    def __init__(self, raw, topic: str, mid, txn_id: str | None, schema=None) -> None:
        self._raw = raw
        self.topic = topic
        self._mid = mid
        self.txn_id = txn_id
        self._schema = schema  # pulsar-client's schema object; None: bytes

    @property
    def value(self) -> Value | Decoded:
        """The payload (``bytes``); with a reader's or consumer's ``schema=``, the value
        it decodes, returned by ``value()`` as in pulsar-client."""
        if self._schema is None:
            return Value(self._raw.data())
        return Decoded(self._schema, self._raw)

    def data(self) -> bytes:
        return self._raw.data()

    @property
    def key(self) -> str | None:
        return self._raw.partition_key() or None

    def partition_key(self) -> str:
        """As pulsar-client: ``""`` when the message has no key (``key`` is ``None``)."""
        return self._raw.partition_key()

    def ordering_key(self) -> str:
        return self._raw.ordering_key()

    @property
    def properties(self) -> Properties:
        return Properties({k: v for k, v in self._raw.properties().items()
                           if not k.startswith(PROTOCOL_PREFIX)})

    @property
    def position(self) -> Position:
        return Position.of(self._mid)

    @property
    def message_id(self) -> MessageIdRef:
        return MessageIdRef(self._mid)

    @property
    def native_id(self):
        """The native ``MessageId`` (``message_id()`` too): for pulsar-client's calls."""
        return self._mid

    def topic_name(self) -> str:
        return self.topic

    def redelivery_count(self) -> int:
        return self._raw.redelivery_count()

    def publish_timestamp(self) -> int:
        return self._raw.publish_timestamp()

    def event_timestamp(self) -> int:
        return self._raw.event_timestamp()

    @property
    def publish_time_ms(self) -> int:
        return self._raw.publish_timestamp()

    @property
    def event_time_ms(self) -> int:
        return self._raw.event_timestamp()

    def __repr__(self) -> str:
        return f"TxnMessage({self.topic}, {self.position}, txn={self.txn_id})"


def typed_schema(native):
    """The schema object of a pulsar-client reader or consumer, or None for bytes (the
    default ``BytesSchema``): a bytes reader keeps handing out ``Value``."""
    schema = getattr(native, "_schema", None)  # a test double may have none
    return None if schema is None or isinstance(schema, BytesSchema) else schema
