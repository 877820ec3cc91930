"""A READ_COMMITTED message reads like pulsar-client's ``Message`` (``value()``,
``data()``, ``partition_key()``, ``properties()``, ``message_id()`` …) and today's
attributes (``m.value``, ``m.properties``, ``m.message_id``, ``m.key``) keep working.

The raw message is a stand-in with pulsar-client's ``Message`` methods; the real one is
read in ``integration_tests/test_read_committed.py``."""

from __future__ import annotations

import _pulsar

from pulsar_txn.message import TxnMessage


class RawMessage:
    def __init__(self, mid) -> None:
        self._mid = mid

    def data(self) -> bytes:
        return b"payload"

    def partition_key(self) -> str:
        return "k1"

    def ordering_key(self) -> str:
        return "o1"

    def properties(self) -> dict:
        return {"app": "x", "__ptxn.txn": "v5:0:1;w;d"}

    def publish_timestamp(self) -> int:
        return 1000

    def event_timestamp(self) -> int:
        return 2000

    def redelivery_count(self) -> int:
        return 3

    def message_id(self):
        return self._mid


def _msg() -> TxnMessage:
    mid = _pulsar.MessageId.earliest
    return TxnMessage(RawMessage(mid), "persistent://public/default/t", mid, "v5:0:1")


def test_a_message_reads_like_pulsar_clients():
    m = _msg()
    assert m.value() == m.data() == b"payload"
    assert m.partition_key() == "k1" and m.ordering_key() == "o1"
    assert m.properties() == {"app": "x"}  # the protocol's property is never shown
    assert m.publish_timestamp() == 1000 and m.event_timestamp() == 2000
    assert m.topic_name() == "persistent://public/default/t"
    assert m.redelivery_count() == 3
    native = m.message_id()
    assert isinstance(native, _pulsar.MessageId)  # what pulsar-client's own calls take
    assert native == _pulsar.MessageId.earliest


def test_todays_attributes_keep_working():
    m = _msg()
    assert m.value == b"payload" and isinstance(m.value, bytes)
    assert m.properties == {"app": "x"} and m.properties["app"] == "x"
    assert m.key == "k1" and m.topic == "persistent://public/default/t"
    assert m.message_id == _pulsar.MessageId.earliest
    assert m.message_id.ledger_id() == _pulsar.MessageId.earliest.ledger_id()
    assert m.publish_time_ms == 1000 and m.event_time_ms == 2000
    assert {m.value: 1}[b"payload"] == 1  # hashes as bytes


def test_the_message_id_attribute_copies_and_orders_like_pulsar_clients():
    import copy

    m = _msg()
    ref = m.message_id
    assert copy.copy(ref) == ref and copy.deepcopy(ref) == ref
    assert ref <= m.message_id() and ref >= m.message_id() and not ref < ref
    assert (ref == "not an id") is False
