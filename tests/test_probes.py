"""Last-entry probes under faults: an unanswered probe is never "empty", and a probe
never leaves a durable subscription behind (it would pin the topic's backlog).

The broker is a small in-test stand-in that keeps the subscriptions it created and
injects the faults each test names; no real service is used.
"""

from __future__ import annotations

from types import SimpleNamespace

import pulsar
import pytest

from pulsar_txn import broker_io
from pulsar_txn.broker_io import LastEntryProbes, last_entry, last_entry_strict
from pulsar_txn.errors import PulsarTxnError
from pulsar_txn.records import Position

TOPIC = "persistent://public/default/probed"


class _Id:
    def __init__(self, ledger: int, entry: int) -> None:
        self._l, self._e = ledger, entry

    def ledger_id(self) -> int:
        return self._l

    def entry_id(self) -> int:
        return self._e


class _Broker:
    """Subscriptions as the broker keeps them, plus scripted faults.

    ``last``: the answer to get_last_message_id — a (ledger, entry), or an exception
    class to raise. ``available``: an earliest reader's has_message_available answer (or
    an exception class). ``unsubscribe_faults``/``subscribe_faults``: how many of the
    next calls fail; a failing subscribe still creates the subscription (a reply lost).
    """

    def __init__(self, last=(3, 7), available=True, unsubscribe_faults=0,
                 subscribe_faults=0) -> None:
        self.last, self.available = last, available
        self.unsubscribe_faults, self.subscribe_faults = unsubscribe_faults, subscribe_faults
        self.subscriptions: set[tuple[str, str]] = set()
        self.read_timeouts = 0
        self.subscribes: list[tuple[str, str]] = []
        self.acked: dict[tuple[str, str], tuple[int, int]] = {}  # cumulative, per subscription
        self.ack_faults = 0

    def subscribe(self, topic: str, name: str, **_kw):
        self.subscribes.append((topic, name))
        self.subscriptions.add((topic, name))
        if self.subscribe_faults:
            self.subscribe_faults -= 1
            raise pulsar.Timeout("fault injection: the subscribe reply was lost")
        return _Consumer(self, topic, name)

    def create_reader(self, topic: str, start, **_kw):
        return _Reader(self)

    def get_topic_partitions(self, topic: str) -> list[str]:
        return [topic]  # not partitioned


class _Consumer:
    def __init__(self, broker: _Broker, topic: str, name: str) -> None:
        self._b, self._key = broker, (topic, name)

    def get_last_message_id(self):
        last = self._b.last
        if isinstance(last, type):
            raise last("fault injection")
        return _Id(*last)

    def is_connected(self) -> bool:
        return True

    def acknowledge_cumulative(self, message_id) -> None:
        if self._b.ack_faults:
            self._b.ack_faults -= 1
            raise pulsar.ConnectError("fault injection: connection lost")
        self._b.acked[self._key] = (message_id.ledger_id(), message_id.entry_id())

    def unsubscribe(self) -> None:
        if self._b.unsubscribe_faults:
            self._b.unsubscribe_faults -= 1
            raise pulsar.ConnectError("fault injection: connection lost")
        self._b.subscriptions.discard(self._key)

    def close(self) -> None:
        pass  # a durable subscription outlives its consumer


class _Reader:
    """Non-durable: leaves nothing on the broker."""

    def __init__(self, broker: _Broker) -> None:
        self._b = broker

    def has_message_available(self) -> bool:
        if isinstance(self._b.available, type):
            raise self._b.available("fault injection")
        return self._b.available

    def read_next(self, timeout_ms: int | None = None):
        self._b.read_timeouts += 1
        raise pulsar.Timeout("fault injection: nothing read in time")

    def close(self) -> None:
        pass


# ---- (b) an unanswered probe is never taken for "empty" ----

def test_strict_probe_never_takes_a_timeout_for_empty():
    broker = _Broker(last=pulsar.Timeout)
    with pytest.raises(PulsarTxnError):
        last_entry_strict(broker, TOPIC)


def test_strict_probe_never_takes_a_read_timeout_for_empty():
    """pulsar-lite's "no messages" error is followed by a second question; a reader that
    merely read nothing in time is no answer."""
    broker = _Broker(last=pulsar.UnknownError, available=pulsar.Timeout)
    with pytest.raises(PulsarTxnError):
        last_entry_strict(broker, TOPIC)
    assert broker.read_timeouts == 0


def test_strict_probe_takes_the_brokers_answers_for_empty():
    assert last_entry_strict(_Broker(last=(5, -1)), TOPIC) is None  # a real broker's answer
    # pulsar-lite answers both questions with its "no messages" error
    assert last_entry_strict(_Broker(last=pulsar.UnknownError,
                                     available=pulsar.UnknownError), TOPIC) is None
    assert last_entry_strict(_Broker(last=pulsar.UnknownError, available=False), TOPIC) is None


def test_strict_probe_raises_when_the_topic_has_entries_but_no_known_last():
    with pytest.raises(PulsarTxnError):
        last_entry_strict(_Broker(last=pulsar.UnknownError, available=True), TOPIC)


def test_probes_report_the_last_entry():
    assert last_entry(_Broker(last=(3, 7)), TOPIC) == Position(3, 7)
    assert last_entry_strict(_Broker(last=(3, 7)), TOPIC) == Position(3, 7)


# ---- (c) a probe never leaves its durable subscription behind ----

@pytest.mark.parametrize("probe", [last_entry, last_entry_strict])
@pytest.mark.parametrize("last", [(3, 7), pulsar.Timeout])
def test_probe_subscription_is_deleted_when_unsubscribe_fails_once(probe, last):
    broker = _Broker(last=last, available=True, unsubscribe_faults=1)
    try:
        probe(broker, TOPIC)
    except PulsarTxnError:
        pass
    assert broker.subscriptions == set()


@pytest.mark.parametrize("probe", [last_entry, last_entry_strict])
def test_probe_subscription_is_deleted_when_the_subscribe_reply_is_lost(probe):
    broker = _Broker(subscribe_faults=1)
    try:
        probe(broker, TOPIC)
    except PulsarTxnError:
        pass
    assert broker_io.wait_probe_cleanup(10)  # removed in the background: the caller goes on
    assert broker.subscriptions == set()


def test_probe_subscription_is_deleted_in_the_background_when_the_broker_is_away(monkeypatch):
    monkeypatch.setattr(broker_io, "_CLEANUP_BACKOFF_S", 0.0)
    broker = _Broker(unsubscribe_faults=4)
    assert last_entry(broker, TOPIC) == Position(3, 7)
    assert broker_io.wait_probe_cleanup(10)
    assert broker.subscriptions == set()



# ---- (d) kept probes (the Spark planner's): one subscription per segment, removed ----

def test_kept_probe_subscribes_again_by_its_name_after_a_failed_ask():
    broker = _Broker(last=(3, 7))
    probes = LastEntryProbes(broker)
    assert probes.last(TOPIC) == Position(3, 7)
    broker.last = pulsar.Timeout
    assert probes.last(TOPIC) is None  # unknown, not empty: planning asks again
    broker.last = (3, 9)
    assert probes.last(TOPIC) == Position(3, 9)
    assert len(broker.subscribes) == 2 and len(set(broker.subscribes)) == 1
    assert broker.acked[broker.subscribes[0]] == (3, 9)  # pins nothing older
    probes.close()
    probes.close()  # idempotent
    assert broker.subscriptions == set()
    assert probes.last(TOPIC) is None and len(broker.subscribes) == 2  # none made anew


def test_kept_probe_keeps_its_consumer_on_lites_empty_answer():
    """pulsar-lite answers an empty topic with UnknownError on a consumer that stays
    connected: a new subscription per trigger is what the kept probe is for avoiding."""
    broker = _Broker(last=pulsar.UnknownError)
    probes = LastEntryProbes(broker)
    assert [probes.last(TOPIC) for _ in range(3)] == [None] * 3
    broker.last = (4, 0)
    assert probes.last(TOPIC) == Position(4, 0)
    assert len(broker.subscribes) == 1
    probes.close()
    assert broker.subscriptions == set()


def test_kept_probe_answers_when_its_ack_fails_and_acks_at_the_next_answer():
    broker = _Broker(last=(3, 7))
    broker.ack_faults = 1
    probes = LastEntryProbes(broker)
    assert probes.last(TOPIC) == Position(3, 7)
    assert broker.acked == {}
    assert probes.last(TOPIC) == Position(3, 7)
    assert list(broker.acked.values()) == [(3, 7)]
    probes.close()


def test_kept_probes_are_removed_in_the_background_when_the_broker_is_away(monkeypatch):
    monkeypatch.setattr(broker_io, "_CLEANUP_BACKOFF_S", 0.0)
    broker = _Broker(last=(3, 7))
    probes = LastEntryProbes(broker)
    assert probes.last(TOPIC) == Position(3, 7) and probes.last(TOPIC + "-2") == Position(3, 7)
    broker.last = pulsar.Timeout
    assert probes.last(TOPIC + "-2") is None  # its consumer dropped: removed by name
    broker.unsubscribe_faults = 4
    probes.close()
    assert broker_io.wait_probe_cleanup(10)
    assert broker.subscriptions == set()


# ---- (a) startingOffsets=latest never becomes earliest when the probe fails ----

def test_latest_start_of_the_spark_source_fails_when_the_last_entry_is_unknown():
    from pulsar_txn.buffer import max_read_position
    from pulsar_txn.spark.planning import Planner
    from pulsar_txn.spark.source_reader import PulsarTxnStreamReader

    planner = Planner.__new__(Planner)
    planner.opts = SimpleNamespace(pattern=None, topics=(TOPIC,))
    planner.pulsar = _Broker(last=pulsar.Timeout)
    planner.store = SimpleNamespace(open_writes=lambda segment: [])
    planner._max_read_position = max_read_position
    planner._partitions, planner._topic_of = {}, {}
    source = PulsarTxnStreamReader.__new__(PulsarTxnStreamReader)
    source.opts = SimpleNamespace(starting="latest", starting_timestamp_ms=None)
    source._planner = planner
    with pytest.raises(PulsarTxnError):
        offset = source.initialOffset()
        pytest.fail(f"'latest' resolved to {offset} although the last entry is unknown")


def _varint(v: int) -> bytes:
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        if not v:
            return out + bytes([b])
        out += bytes([b | 0x80])


def test_batch_size_is_read_from_the_serialized_message_id():
    """The wire's MessageIdData carries batch_size as field 6 (after a negative
    partition, an ack set and an index); an id without it says 'unknown', never 1."""
    import _pulsar

    from pulsar_txn.broker_io import batch_size

    def mid(*fields: tuple[int, int, bytes]) -> object:
        return _pulsar.MessageId.deserialize(
            b"".join(_varint(f << 3 | w) + v for f, w, v in fields))

    full = mid((1, 0, _varint(123)), (2, 0, _varint(45)), (3, 0, _varint(2**64 - 1)),
               (4, 0, _varint(2)), (6, 0, _varint(300)))
    assert (full.ledger_id(), full.entry_id(), full.batch_index()) == (123, 45, 2)
    assert batch_size(full) == 300
    assert batch_size(_pulsar.MessageId(-1, 5, 6, -1)) is None
    assert batch_size(mid((1, 0, _varint(1)), (2, 0, _varint(2)))) is None
