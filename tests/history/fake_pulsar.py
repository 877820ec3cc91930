"""An in-process stand-in for the broker, for the fast stateful test.

Why: unit tests run without a broker, yet the workload should drive the real client
API (producers, READ_COMMITTED readers, consumers with transactional acks), not a
re-implementation of it. This module answers the few pulsar-client calls that API
makes, over append-only lists: an entry is stored the moment ``send`` returns, a
reader reads in order, an Exclusive subscription dispatches unacknowledged entries
in order and again from its cursor when a consumer subscribes anew, a Shared one
hands each entry to one of its consumers and, when a consumer's connection drops
(or it dies), its unacknowledged entries to whichever consumer asks next, while
the dropped consumer's application may still hold copies of them.

Like pulsar-client, a consumer's acknowledgements are grouped: they reach the
subscription's cursor only when the group is flushed (``flush_acks``, the
100 ms ack-grouping timer of the real client) or the consumer is closed; a crash
loses the group. "Unavailable" answers nothing now: an empty read raises
``ReadTimeout`` at once instead of waiting, so a test step never sleeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import _pulsar
import pulsar

from pulsar_txn.errors import ReadTimeout

LEDGER = 1


def _pos(mid) -> tuple[int, int]:
    if hasattr(mid, "message_id"):  # a received message
        mid = mid.message_id()
    return (mid.ledger_id(), mid.entry_id())


@dataclass
class Entry:
    value: bytes
    props: dict
    key: str
    pos: tuple[int, int]
    redeliveries: int = 0

    def message(self, redeliveries: int = 0) -> FakeMessage:
        return FakeMessage(self, redeliveries)


class FakeMessage:
    __slots__ = ("_e", "_id", "_r")

    def __init__(self, e: Entry, redeliveries: int) -> None:
        self._e, self._r = e, redeliveries
        self._id = _pulsar.MessageId(-1, e.pos[0], e.pos[1], -1)

    def data(self) -> bytes:
        return self._e.value

    def value(self) -> bytes:
        return self._e.value

    def properties(self) -> dict:
        return dict(self._e.props)

    def partition_key(self) -> str:
        return self._e.key

    def message_id(self):
        return self._id

    def redelivery_count(self) -> int:
        return self._r

    def publish_timestamp(self) -> int:
        return 0

    def event_timestamp(self) -> int:
        return 0


@dataclass
class Subscription:
    acked: set[tuple[int, int]] = field(default_factory=set)  # on the cursor
    consumer: FakeConsumer | None = None
    shared: bool = False
    # Shared only: the last entry handed to any consumer, which consumer holds each
    # unacked one, and those free again (their consumer dropped) for the next to ask
    dispatched: tuple[int, int] = (-1, -1)
    owner: dict[tuple[int, int], FakeConsumer] = field(default_factory=dict)
    free: list[tuple[int, int]] = field(default_factory=list)

    def release(self, consumer: FakeConsumer) -> None:
        """The consumer's connection dropped: the broker redelivers what it held."""
        mine = sorted(p for p, c in self.owner.items() if c is consumer)
        for p in mine:
            del self.owner[p]
        self.free.extend(p for p in mine if p not in self.acked)


class FakeBroker:
    """Topics and subscriptions; shared by every client of one test run."""

    def __init__(self) -> None:
        self.topics: dict[str, list[Entry]] = {}
        self.subs: dict[tuple[str, str], Subscription] = {}

    def log(self, topic: str) -> list[Entry]:
        return self.topics.setdefault(topic, [])

    def append(self, topic: str, value: bytes, props: dict | None, key: str | None) -> Entry:
        entries = self.log(topic)
        e = Entry(bytes(value), dict(props or {}), key or "", (LEDGER, len(entries)))
        entries.append(e)
        return e

    def remaining(self, topic: str, sub: str) -> list[Entry]:
        """What the subscription would still deliver: entries not on its cursor."""
        s = self.subs.get((topic, sub), Subscription())
        return [e for e in self.log(topic) if e.pos not in s.acked]


class FakeProducer:
    def __init__(self, broker: FakeBroker, topic: str) -> None:
        self.broker, self.topic = broker, topic
        # the next send times out: (stored first or not): the client cannot tell
        self.time_out: bool | None = None

    def send(self, value, properties=None, partition_key=None, **kw):
        stored, self.time_out = self.time_out, None
        if stored is not None:
            if stored:
                self.broker.append(self.topic, value, properties, partition_key)
            raise pulsar.Timeout("fake: the send timed out")
        e = self.broker.append(self.topic, value, properties, partition_key)
        return _pulsar.MessageId(-1, e.pos[0], e.pos[1], -1)

    def send_async(self, value, callback, properties=None, partition_key=None, **kw):
        callback(pulsar.Result.Ok, self.send(value, properties, partition_key))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class _NativeReader:
    def __init__(self, broker: FakeBroker, topic: str, after: tuple[int, int]) -> None:
        self.broker, self.topic, self.after = broker, topic, after

    def read_next(self, timeout_ms: int = 0):
        for e in self.broker.log(self.topic):
            if e.pos > self.after:
                self.after = e.pos
                return e.message()
        if timeout_ms == 0:
            raise pulsar.Timeout("fake: nothing more now")
        raise ReadTimeout(f"{self.topic}: nothing more now")


class FakeReader:
    def __init__(self, broker: FakeBroker, topic: str, start) -> None:
        after = (-1, -1) if start.ledger_id() < 0 else _pos(start)
        self._reader = _NativeReader(broker, topic, after)

    def close(self) -> None:
        pass


class FakeConsumer:
    """An Exclusive subscription's one consumer; also its own native handle."""

    def __init__(self, broker: FakeBroker, topic: str, sub: str, shared: bool = False) -> None:
        self.broker, self.topic, self.name = broker, topic, sub
        self.sub = broker.subs.setdefault((topic, sub), Subscription(shared=shared))
        self.sub.consumer = self
        self._consumer = self
        self.dispatched: tuple[int, int] = (-1, -1)
        self.redeliver: list[tuple[int, int]] = []
        self.grouped: list[tuple[tuple[int, int], bool]] = []  # acks not yet on the cursor
        self.closed = False

    def receive(self, timeout_ms: int = 0):
        entries = {e.pos: e for e in self.broker.log(self.topic)}
        while self.redeliver:
            pos = self.redeliver.pop(0)
            if pos not in self.sub.acked:
                entries[pos].redeliveries += 1
                return entries[pos].message(entries[pos].redeliveries)
        if self.sub.shared:
            return self._receive_shared(entries, timeout_ms)
        for pos, e in entries.items():
            if pos > self.dispatched and pos not in self.sub.acked:
                self.dispatched = pos
                return e.message(e.redeliveries)
        if timeout_ms == 0:
            raise pulsar.Timeout("fake: nothing more now")
        raise ReadTimeout(f"{self.topic}|{self.name}: nothing more now")

    def _receive_shared(self, entries: dict, timeout_ms: int):
        sub = self.sub
        while sub.free:
            pos = sub.free.pop(0)
            if pos not in sub.acked:
                sub.owner[pos] = self
                entries[pos].redeliveries += 1
                return entries[pos].message(entries[pos].redeliveries)
        for pos, e in entries.items():
            if pos > sub.dispatched and pos not in sub.acked:
                sub.dispatched = pos
                sub.owner[pos] = self
                return e.message(e.redeliveries)
        if timeout_ms == 0:
            raise pulsar.Timeout("fake: nothing more now")
        raise ReadTimeout(f"{self.topic}|{self.name}: nothing more now")

    def drop_connection(self, lose_grouped_acks: bool) -> None:
        """The connection to the broker drops and comes back: grouped acks not sent are
        lost (or sent just before), and a Shared subscription hands what this consumer
        held to its other consumers; the application still holds its copies."""
        if lose_grouped_acks:
            self.grouped.clear()
        else:
            self.flush_acks()
        if self.sub.shared:
            self.sub.release(self)

    def acknowledge(self, what) -> None:
        self.grouped.append((_pos(what), False))

    def acknowledge_cumulative(self, what) -> None:
        self.grouped.append((_pos(what), True))

    def negative_acknowledge(self, what) -> None:
        self.redeliver.append(_pos(what))

    def flush_acks(self) -> None:
        """The ack-grouping timer fires: the grouped acks reach the cursor."""
        for pos, cumulative in self.grouped:
            if cumulative:
                self.sub.acked |= {e.pos for e in self.broker.log(self.topic) if e.pos <= pos}
            else:
                self.sub.acked.add(pos)
        self.grouped.clear()

    def close(self) -> None:
        self.flush_acks()
        self.crash()

    def crash(self) -> None:
        """SIGKILL: the grouped acks are gone with the process."""
        self.grouped.clear()
        self.closed = True
        if self.sub.consumer is self:
            self.sub.consumer = None
        if self.sub.shared:
            self.sub.release(self)


class FakeClient:
    """The pulsar.Client calls the client API makes."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.consumers: list[FakeConsumer] = []

    def create_producer(self, topic: str, **kw) -> FakeProducer:
        return FakeProducer(self.broker, topic)

    def create_reader(self, topic: str, start, **kw) -> FakeReader:
        return FakeReader(self.broker, topic, start)

    def subscribe(self, topic: str, sub: str, **kw) -> FakeConsumer:
        shared = kw.get("consumer_type") == pulsar.ConsumerType.Shared
        c = FakeConsumer(self.broker, topic, sub, shared)
        self.consumers.append(c)
        return c

    def get_topic_partitions(self, topic: str) -> list[str]:
        return [topic]

    def close(self) -> None:
        for c in self.consumers:
            if not c.closed:
                c.close()

    def crash(self) -> None:
        for c in self.consumers:
            c.crash()
