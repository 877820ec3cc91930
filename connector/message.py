"""A message as READ_COMMITTED readers return it."""

from __future__ import annotations

from pulsar_txn.records import PROTOCOL_PREFIX, Position


class TxnMessage:
    """A message as a READ_COMMITTED reader returns it (fields read lazily from the broker's)."""

    __slots__ = ("_raw", "topic", "_mid", "txn_id")

    def __init__(self, raw, topic: str, mid, txn_id: str | None) -> None:
        self._raw = raw
        self.topic = topic
        self._mid = mid
        self.txn_id = txn_id

    @property
    def value(self) -> bytes:
        return self._raw.data()

    def data(self) -> bytes:
        return self._raw.data()

    @property
    def key(self) -> str | None:
        return self._raw.partition_key() or None

    @property
    def properties(self) -> dict[str, str]:
        return {k: v for k, v in self._raw.properties().items()
                if not k.startswith(PROTOCOL_PREFIX)}

    @property
    def position(self) -> Position:
        return Position.of(self._mid)

    @property
    def message_id(self):
        return self._mid

    @property
    def publish_time_ms(self) -> int:
        return self._raw.publish_timestamp()

    @property
    def event_time_ms(self) -> int:
        return self._raw.event_timestamp()

    def __repr__(self) -> str:
        return f"TxnMessage({self.topic}, {self.position}, txn={self.txn_id})"
