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

An entry holds one message, or several (a batching producer's flush: batch indexes
0..n-1). As pulsar-client without batch-index acks: the cursor takes whole entries;
a consumer acks a batched message it handed out in its own memory and sends the
entry's ack once every message of it is acked (a crash or a dropped connection
forgets that memory, and a partly acked entry is delivered whole again); an id it
did not hand out (built from numbers) acks the whole entry at once.

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
Key = tuple[int, int, int]  # (ledger, entry, batch index): one message


def _mid(what):
    return what.message_id() if hasattr(what, "message_id") else what


def _key(what) -> Key:
    mid = _mid(what)
    return (mid.ledger_id(), mid.entry_id(), mid.batch_index())


@dataclass
class Entry:
    """One message: of an entry of its own (batch -1) or of a batched entry."""

    value: bytes
    props: dict
    key: str
    pos: tuple[int, int]  # its broker entry
    batch: int = -1
    size: int = 1  # messages in its broker entry
    redeliveries: int = 0

    @property
    def mkey(self) -> Key:
        return (*self.pos, self.batch)

    def message(self, redeliveries: int = 0) -> FakeMessage:
        return FakeMessage(self, redeliveries)


class FakeMessage:
    __slots__ = ("_e", "_id", "_r")

    def __init__(self, e: Entry, redeliveries: int) -> None:
        self._e, self._r = e, redeliveries
        self._id = _pulsar.MessageId(-1, e.pos[0], e.pos[1], e.batch)

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
    acked: set[tuple[int, int]] = field(default_factory=set)  # entries on the cursor
    consumer: FakeConsumer | None = None
    shared: bool = False
    # Shared only: the last message handed to any consumer, which consumer holds each
    # unacked one, and those free again (their consumer dropped) for the next to ask
    dispatched: Key = (-1, -1, -1)
    owner: dict[Key, FakeConsumer] = field(default_factory=dict)
    free: list[Key] = field(default_factory=list)

    def release(self, consumer: FakeConsumer) -> None:
        """The consumer's connection dropped: the broker redelivers what it held, whole
        entries (a partly acked one too: the cursor never saw its members' acks)."""
        mine = sorted(k for k, c in self.owner.items() if c is consumer)
        for k in mine:
            del self.owner[k]
        self.free.extend(k for k in mine if k[:2] not in self.acked)


class FakeBroker:
    """Topics and subscriptions; shared by every client of one test run."""

    def __init__(self) -> None:
        self.topics: dict[str, list[Entry]] = {}
        self.subs: dict[tuple[str, str], Subscription] = {}

    def log(self, topic: str) -> list[Entry]:
        return self.topics.setdefault(topic, [])

    def _next_entry(self, topic: str) -> tuple[int, int]:
        entries = self.log(topic)
        return (LEDGER, entries[-1].pos[1] + 1 if entries else 0)

    def append(self, topic: str, value: bytes, props: dict | None, key: str | None) -> Entry:
        e = Entry(bytes(value), dict(props or {}), key or "", self._next_entry(topic))
        self.log(topic).append(e)
        return e

    def append_batch(self, topic: str, items: list[tuple]) -> list[Entry]:
        """One broker entry holding ``items`` ((value, props, key) each) in order."""
        pos = self._next_entry(topic)
        out = [Entry(bytes(v), dict(p or {}), k or "", pos, i, len(items))
               for i, (v, p, k) in enumerate(items)]
        self.log(topic).extend(out)
        return out

    def remaining(self, topic: str, sub: str, acked_by_client: set[Key] = frozenset()
                  ) -> list[Entry]:
        """What the subscription would still deliver: messages of entries not on its
        cursor, less the members of a partly acked entry ``acked_by_client`` names (a
        consumer's own memory of them: the entry comes back whole, and that consumer
        hands out only the others)."""
        s = self.subs.get((topic, sub), Subscription())
        return [e for e in self.log(topic)
                if e.pos not in s.acked and e.mkey not in acked_by_client]


class FakeProducer:
    def __init__(self, broker: FakeBroker, topic: str, batching: bool = False) -> None:
        self.broker, self.topic, self.batching = broker, topic, batching
        # the next send times out: (stored first or not): the client cannot tell
        self.time_out: bool | None = None
        self._batch: list[tuple] = []  # (value, props, key, callback) until flush

    def send(self, value, properties=None, partition_key=None, **kw):
        self.flush()
        stored, self.time_out = self.time_out, None
        if stored is not None:
            if stored:
                self.broker.append(self.topic, value, properties, partition_key)
            raise pulsar.Timeout("fake: the send timed out")
        e = self.broker.append(self.topic, value, properties, partition_key)
        return _pulsar.MessageId(-1, e.pos[0], e.pos[1], -1)

    def send_async(self, value, callback, properties=None, partition_key=None, **kw):
        if self.batching:
            self._batch.append((value, properties, partition_key, callback))
            return
        callback(pulsar.Result.Ok, self.send(value, properties, partition_key))

    def flush(self) -> None:
        if not self._batch:
            return
        batch, self._batch = self._batch, []
        stored = self.broker.append_batch(self.topic, [b[:3] for b in batch])
        for (_, _, _, callback), e in zip(batch, stored):
            if callback is not None:
                callback(pulsar.Result.Ok, _pulsar.MessageId(-1, e.pos[0], e.pos[1], e.batch))

    def close(self) -> None:
        self.flush()


class _NativeReader:
    def __init__(self, broker: FakeBroker, topic: str, after: Key) -> None:
        self.broker, self.topic, self.after = broker, topic, after

    def read_next(self, timeout_ms: int = 0):
        for e in self.broker.log(self.topic):
            if e.mkey > self.after:
                self.after = e.mkey
                return e.message()
        if timeout_ms == 0:
            raise pulsar.Timeout("fake: nothing more now")
        raise ReadTimeout(f"{self.topic}: nothing more now")


class FakeReader:
    def __init__(self, broker: FakeBroker, topic: str, start) -> None:
        after = (-1, -1, -1) if start.ledger_id() < 0 else _key(start)
        self._reader = _NativeReader(broker, topic, after)

    def close(self) -> None:
        pass


class FakeConsumer:
    """A subscription's consumer (Exclusive, or one of a Shared one's); also its own
    native handle."""

    def __init__(self, broker: FakeBroker, topic: str, sub: str, shared: bool = False) -> None:
        self.broker, self.topic, self.name = broker, topic, sub
        self.sub = broker.subs.setdefault((topic, sub), Subscription(shared=shared))
        self.sub.consumer = self
        self._consumer = self
        self.dispatched: Key = (-1, -1, -1)
        self.redeliver: list[Key] = []
        self.grouped: list[tuple[tuple[int, int], bool]] = []  # acks not yet on the cursor
        self.handed: dict[Key, object] = {}  # the id object of each message handed out
        self.partial: dict[tuple[int, int], set[int]] = {}  # batched members acked here
        self.closed = False

    def _give(self, e: Entry, redeliveries: int):
        m = e.message(redeliveries)
        self.handed[e.mkey] = m.message_id()
        return m

    def receive(self, timeout_ms: int = 0):
        entries = {e.mkey: e for e in self.broker.log(self.topic)}
        while self.redeliver:
            k = self.redeliver.pop(0)
            if k[:2] not in self.sub.acked:
                entries[k].redeliveries += 1
                return self._give(entries[k], entries[k].redeliveries)
        if self.sub.shared:
            return self._receive_shared(entries, timeout_ms)
        for k, e in entries.items():
            if k > self.dispatched and e.pos not in self.sub.acked:
                self.dispatched = k
                return self._give(e, e.redeliveries)
        if timeout_ms == 0:
            raise pulsar.Timeout("fake: nothing more now")
        raise ReadTimeout(f"{self.topic}|{self.name}: nothing more now")

    def _receive_shared(self, entries: dict, timeout_ms: int):
        sub = self.sub
        while sub.free:
            k = sub.free.pop(0)
            if k[:2] not in sub.acked:
                sub.owner[k] = self
                entries[k].redeliveries += 1
                return self._give(entries[k], entries[k].redeliveries)
        for k, e in entries.items():
            if k > sub.dispatched and e.pos not in sub.acked:
                sub.dispatched = k
                sub.owner[k] = self
                return self._give(e, e.redeliveries)
        if timeout_ms == 0:
            raise pulsar.Timeout("fake: nothing more now")
        raise ReadTimeout(f"{self.topic}|{self.name}: nothing more now")

    def drop_connection(self, lose_grouped_acks: bool) -> None:
        """The connection to the broker drops and comes back: grouped acks not sent are
        lost (or sent just before), the memory of partly acked entries is gone, and a
        Shared subscription hands what this consumer held to its other consumers; the
        application still holds its copies."""
        if lose_grouped_acks:
            self.grouped.clear()
        else:
            self.flush_acks()
        self.partial.clear()
        if self.sub.shared:
            self.sub.release(self)

    def _size(self, pos: tuple[int, int]) -> int:
        return next(e.size for e in self.broker.log(self.topic) if e.pos == pos)

    def acknowledge(self, what) -> None:
        mid, k = _mid(what), _key(what)
        if k[2] < 0 or self.handed.get(k) is not mid:  # an id built from numbers: whole
            self.grouped.append((k[:2], False))
            return
        members = self.partial.setdefault(k[:2], set())
        members.add(k[2])
        if len(members) == self._size(k[:2]):
            del self.partial[k[:2]]
            self.grouped.append((k[:2], False))

    def acknowledge_cumulative(self, what) -> None:
        if self.sub.shared:  # as pulsar-client refuses it
            raise pulsar.CumulativeAcknowledgementNotAllowedError(
                "Cumulative acknowledgement not allowed for Shared subscriptions")
        mid, k = _mid(what), _key(what)
        if k[2] < 0 or self.handed.get(k) is not mid:
            self.grouped.append((k[:2], True))
            return
        if k[1] > 0:
            self.grouped.append(((k[0], k[1] - 1), True))
        for b in range(k[2] + 1):
            self.partial.setdefault(k[:2], set()).add(b)
        if len(self.partial[k[:2]]) == self._size(k[:2]):
            del self.partial[k[:2]]
            self.grouped.append((k[:2], False))

    def negative_acknowledge(self, what) -> None:
        self.redeliver.append(_key(what))

    def acked_here(self) -> set[Key]:
        """Members of partly acked entries this consumer acked (its memory only)."""
        return {(*pos, b) for pos, bs in self.partial.items() for b in bs}

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
        """SIGKILL: the grouped acks and the memory of partly acked entries are gone."""
        self.grouped.clear()
        self.partial.clear()
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
        return FakeProducer(self.broker, topic, bool(kw.get("batching_enabled")))

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
