"""Broker I/O on plain topics: last-entry probes, range scans, partition lists.

pulsar-client 3.x has no "last message id" call that works on every broker we
support, so the last entry is asked through a probe subscription: a throw-away one
for a one-off ask (:func:`last_entry`, :func:`last_entry_strict`), or one kept per
segment by an owner that asks at every trigger (:class:`LastEntryProbes`, the Spark
source's planner), acknowledged up to each answer and removed when the owner closes.
A range ``(start, end]`` is read with a reader that stops at ``end`` and tells lost
data (deleted ledgers) from a broker that is merely unavailable.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
import uuid
from collections.abc import Iterator

from pulsar_txn.errors import BrokerUnavailable, DataLoss, ProbeFailed
from pulsar_txn.records import BEFORE, END_OF_LEDGER, Position
from pulsar_txn.topics import INTERNAL_PREFIX

log = logging.getLogger(__name__)

_PROBE = f"{INTERNAL_PREFIX}-probe-"
_INTERNAL = {"subscription_role_prefix": INTERNAL_PREFIX}  # a reader the plugin exempts
_CLEANUP_ATTEMPTS = 6
_CLEANUP_BACKOFF_S = 1.0  # doubled after each failed background attempt
_CLEANUP_MAX_PENDING = 10_000  # a long broker outage must not grow the queue without end
_cleanup: queue.SimpleQueue | None = None
_cleanup_pending = 0
_cleanup_cond = threading.Condition()


def _ask_last(client, topic: str) -> Position | None:
    """The broker's last confirmed entry (``None``: it holds none), or the client's error.

    pulsar-client has no non-durable consumer and its Reader cannot ask for the last
    message id, so the probe is a throw-away durable subscription: it is deleted
    whatever happens (:func:`_drop_probe`), or it would pin the topic's backlog.
    """
    import pulsar

    name = f"{_PROBE}{uuid.uuid4().hex[:12]}"
    consumer = None
    try:
        consumer = client.subscribe(topic, name, initial_position=pulsar.InitialPosition.Latest,
                                    receiver_queue_size=1)
        mid = consumer.get_last_message_id()
        return None if mid.entry_id() < 0 else Position(mid.ledger_id(), mid.entry_id())
    finally:
        _drop_probe(client, topic, name, consumer)


def _drop_probe(client, topic: str, name: str, consumer) -> None:
    """Delete a probe subscription, also when the probe failed half way.

    An unsubscribe can fail on a connection blip, and a subscribe whose reply was lost
    may have created the subscription all the same: it is then subscribed to again by
    name and deleted — once here after a failed unsubscribe, then by a background
    thread with backoff, so a caller facing an unreachable broker is not held longer.
    """
    if consumer is not None and (_unsubscribe(client, topic, name, consumer)
                                 or _unsubscribe(client, topic, name, None)):
        return
    _cleanup_later(client, topic, name)


def _unsubscribe(client, topic: str, name: str, consumer) -> bool:
    import pulsar

    try:
        if consumer is None:
            consumer = client.subscribe(topic, name,
                                        initial_position=pulsar.InitialPosition.Latest,
                                        receiver_queue_size=1)
        consumer.unsubscribe()
        return True
    except Exception as e:
        log.debug("removing probe subscription %s of %s failed: %s", name, topic, e)
        if consumer is not None:
            try:
                consumer.close()  # free the exclusive subscription for the next attempt
            except Exception:
                pass
        return False


def _cleanup_later(client, topic: str, name: str) -> None:
    global _cleanup, _cleanup_pending
    with _cleanup_cond:
        if _cleanup is None:
            _cleanup = queue.SimpleQueue()
            threading.Thread(target=_cleanup_loop, args=(_cleanup,), daemon=True,
                             name="pulsar-txn-probe-cleanup").start()
        if _cleanup_pending >= _CLEANUP_MAX_PENDING:
            log.error("probe subscription %s of %s left behind (%d removals pending); it "
                      "pins the topic's backlog until deleted with the admin API",
                      name, topic, _cleanup_pending)
            return
        _cleanup_pending += 1
        _cleanup.put((client, topic, name))


def _cleanup_loop(q: queue.SimpleQueue) -> None:
    global _cleanup_pending
    while True:
        client, topic, name = q.get()
        delay = _CLEANUP_BACKOFF_S
        for attempt in range(_CLEANUP_ATTEMPTS):
            if attempt:
                time.sleep(delay)
                delay *= 2
            if _unsubscribe(client, topic, name, None):
                break
        else:
            log.error("probe subscription %s of %s could not be removed; it pins the topic's "
                      "backlog until deleted with the admin API", name, topic)
        with _cleanup_cond:
            _cleanup_pending -= 1
            _cleanup_cond.notify_all()


def wait_probe_cleanup(timeout_s: float) -> bool:
    """Wait until no probe subscription is left to remove in the background (tests, close)."""
    with _cleanup_cond:
        return _cleanup_cond.wait_for(lambda: _cleanup_pending == 0, timeout_s)


def last_entry(client, topic: str) -> Position | None:
    """The last confirmed entry of a topic (the entry as a whole); ``None`` when it
    holds none *or the probe failed*: only for planning, which plans again at the next
    trigger. Anything that fixes a position from the answer (a seal's end, a 'latest'
    start) uses :func:`last_entry_strict`."""
    try:
        return _ask_last(client, topic)
    except Exception as e:  # pulsar-lite answers an empty topic with an error, too
        log.debug("last entry of %s unknown: %s", topic, e)
        return None


class LastEntryProbes:
    """One kept probe subscription per segment, for an owner asking at every trigger.

    A throw-away probe per ask makes the broker create and delete a subscription each
    time, and pulsar-lite keeps state for every subscription ever made: over a soak each
    probe got slower (1.2 ms, then 2.3+ ms after 3,000), while asking a kept consumer
    costs 0.06 ms, flat. One name per owner (subscriptions are per topic), subscribed at
    ``Latest`` with no receiver queue (it is sent nothing) and acknowledged cumulatively
    up to each answer, so it pins no backlog older than the latest ask. :meth:`close`
    removes them as :func:`_drop_probe` does; an owner that dies without closing leaves
    them behind (docs/operations.md).
    """

    def __init__(self, client) -> None:
        self._client, self._name = client, f"{_PROBE}{uuid.uuid4().hex[:12]}"
        self._consumers: dict[str, object] = {}
        self._acked: dict[str, Position] = {}
        self._subscribed: set[str] = set()  # segments whose subscription may exist
        self._lock, self._closed = threading.Lock(), False

    def last(self, segment: str) -> Position | None:
        """As :func:`last_entry`: ``None`` when the segment holds none *or the ask failed*
        (planning asks again next trigger); a failed ask closes the segment's consumer
        and the next one subscribes again by the same name."""
        import pulsar

        with self._lock:
            if self._closed:
                return None  # nothing is subscribed again once the owner closed
            consumer = self._consumers.get(segment)
            try:
                if consumer is None:
                    self._subscribed.add(segment)
                    consumer = self._consumers[segment] = self._client.subscribe(
                        segment, self._name, initial_position=pulsar.InitialPosition.Latest,
                        receiver_queue_size=0)
                mid = consumer.get_last_message_id()
            except Exception as e:
                log.debug("last entry of %s unknown: %s", segment, e)
                # pulsar-lite's answer for an empty topic, its consumer fine: kept
                if not (isinstance(e, pulsar.UnknownError) and _connected(consumer)):
                    consumer = self._consumers.pop(segment, None)
                    self._acked.pop(segment, None)
                    if consumer is not None:  # the subscription stays for the next ask
                        _close_quietly(consumer)
                return None
            if mid.entry_id() < 0:
                return None
            last = Position(mid.ledger_id(), mid.entry_id())
            if self._acked.get(segment) != last:
                try:
                    consumer.acknowledge_cumulative(pulsar.MessageId(-1, *last))
                    self._acked[segment] = last
                except Exception as e:  # noqa: BLE001 - acked again at the next answer
                    log.debug("acking probe %s of %s failed: %s", self._name, segment, e)
            return last

    def close(self) -> None:
        """Remove every probe subscription made (idempotent)."""
        with self._lock:
            consumers, subscribed = self._consumers, self._subscribed
            self._consumers, self._subscribed, self._closed = {}, set(), True
        for segment in sorted(subscribed):
            consumer = consumers.get(segment)
            if consumer is None and _unsubscribe(self._client, segment, self._name, None):
                continue  # dropped after a failed ask: removed by name, here and now
            _drop_probe(self._client, segment, self._name, consumer)


def _connected(consumer) -> bool:
    try:
        return consumer is not None and bool(consumer.is_connected())
    except Exception:
        return False


def last_entry_strict(client, topic: str) -> Position | None:
    """Like :func:`last_entry`, but ``None`` only when the broker *said* it is empty.

    A seal's end is fixed once and for all from it, and a 'latest' start too, so an
    unanswered probe (a timeout, a lost connection) raises :class:`ProbeFailed` and the
    caller tries again later; waiting for a read that brings nothing is no answer
    either. pulsar-lite answers an empty topic with an UnknownError ("Topic has no
    messages"); that answer is confirmed by asking a second way, a non-durable reader
    from the earliest entry, which must again say "nothing" (False, or the same error).
    """
    import pulsar

    try:
        return _ask_last(client, topic)
    except pulsar.UnknownError as e:
        first_answer: Exception = e
    except Exception as e:
        raise ProbeFailed(f"{topic}: cannot tell its last entry ({e!r}); try again") from e
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest, **_INTERNAL)
    except Exception as e:
        raise ProbeFailed(f"{topic}: cannot tell its last entry ({e!r}); try again") from e
    try:
        available = reader.has_message_available()
    except pulsar.UnknownError:
        return None  # the same "no messages" answer, asked another way
    except Exception as e:
        raise ProbeFailed(f"{topic}: cannot tell its last entry ({first_answer!r}, then "
                          f"{e!r}); try again") from e
    finally:
        try:
            reader.close()
        except Exception:
            pass
    if available:
        raise ProbeFailed(f"{topic}: it has entries but its last one is unknown "
                          f"({first_answer!r}); try again")
    return None


BATCH_END_WAIT_MS = 200  # the end entry's size unknown: how long to wait for more of it
# a kept reader behind a range's start reads on through at most this many messages
# (~15 ms of reading) before a reader is opened at the start instead
KEPT_DROP_LIMIT = 5_000


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[i]
        value |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return value, i
        shift += 7


def batch_size(message_id) -> int | None:
    """How many messages the entry of a batched message holds, or None if unknown.

    pulsar-client's Python API has no accessor for it, but the serialized id (the
    wire's MessageIdData) carries it as field 6 for a received batched message. A
    scan that reaches the last message of its end entry then knows it is done,
    instead of waiting to learn that nothing else of that entry comes.
    """
    data = message_id.serialize()
    i = 0
    try:
        while i < len(data):
            tag, i = _varint(data, i)
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                value, i = _varint(data, i)
                if field == 6:
                    return value or None
            elif wire == 2:
                length, i = _varint(data, i)
                i += length
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            else:
                return None
    except IndexError:
        return None
    return None


_new = tuple.__new__  # a Position without NamedTuple's keyword handling: per message


def scan(client, segment: str, start: Position, end: Position, timeout_ms: int = 30_000,
         fail_on_data_loss: bool = True, reader: dict | None = None,
         batch_end_wait_ms: int = BATCH_END_WAIT_MS,
         kept=None, kept_drop_limit: int = KEPT_DROP_LIMIT) -> Iterator[tuple[Position, object]]:
    """Yield (position, native message) for start < position <= end, in order.

    Starts the reader *inclusively* at the start entry and filters (``_open_reader``).
    With ``kept`` (the Spark workers' ``KeptReaders``: ``take(key, start)``,
    ``give(key, end, reader)``), goes on with a reader an earlier range left at or a
    little before ``start`` (after ``kept_drop_limit`` messages before it, a new reader
    opens at ``start``) and leaves its own there when it read exactly up to ``end``.
    """
    import pulsar

    if end <= start:
        return
    settings = {"receiver_queue_size": 2000, **(reader or {})}
    kept_key = (id(client), segment, tuple(sorted((k, repr(v)) for k, v in settings.items())))
    end_ledger, end_entry = end[0], end[1]
    taken = kept.take(kept_key, start) if kept is not None else None
    # where the reader is: as if a taken one had just read the message it stopped at
    reader, last = taken if taken else (_open_reader(client, segment, start, settings), None)
    at_end_entry = last is not None and last[1] == end_entry and last[0] == end_ledger
    dropped = 0  # messages before ``start`` a kept reader read on through
    native = reader._reader
    done = False  # read up to ``end`` and nothing past it: the reader may be kept
    end_size: int | None = None  # messages in the end entry, once one of them is read
    reconnects = 0
    reopened = False  # a new reader's first message (a redelivery) is not here yet
    try:
        while True:
            # the short wait only answers "is more of an entry of unknown size coming?";
            # an entry known to hold more, or a reader just re-opened, gets the full one
            short = at_end_entry and not end_size and not reopened
            wait = batch_end_wait_ms if short else timeout_ms
            try:
                raw = native.read_next(wait)
            except (pulsar.NotConnected, pulsar.AlreadyClosed, pulsar.ConnectError) as e:
                reconnects += 1
                reader = _reopened(client, segment, settings, reader, last, start,
                                   reconnects, e)
                native, reopened = reader._reader, True
                continue
            except pulsar.Timeout:
                done = _silence_ends_scan(client, segment, start, end, last, at_end_entry,
                                          end_size, wait, timeout_ms, reader.is_connected(),
                                          fail_on_data_loss)
                return
            reopened = False
            m = raw.message_id()
            pos = _new(Position, (m.ledger_id(), m.entry_id(), m.batch_index()))
            if last is not None and pos <= last:
                continue  # a redelivery (pulsar-lite duplicates unbatched topics)
            last = pos
            at_end_entry = pos[1] == end_entry and pos[0] == end_ledger
            reconnects = 0  # progress: the reconnect budget is per stretch without it
            if pos <= start:
                if taken is not None:
                    dropped += 1
                    if dropped > kept_drop_limit:  # too far behind: start afresh
                        _close_quietly(reader)
                        reader = _open_reader(client, segment, start, settings)
                        taken, last, at_end_entry = None, None, False
                        native = reader._reader
                continue
            if pos > end:
                return
            yield pos, raw
            if at_end_entry:
                if end_size is None and pos != end and pos[2] >= 0:
                    end_size = batch_size(m) or 0
                if _end_entry_read(pos, end, end_size):
                    done = True
                    return
    finally:
        if done and kept is not None:
            kept.give(kept_key, end, reader)
        else:
            _close_quietly(reader)


def _reopened(client, segment: str, settings: dict, reader, last: Position | None, start: Position,
              reconnects: int, error: Exception):
    """A connection the broker dropped (a restart, a glitch): a new reader where the scan
    is, a few times in a row, rather than fail the whole task."""
    if reconnects > 3:
        raise BrokerUnavailable(f"{segment}: the reader lost its connection "
                                f"{reconnects} times ({error})") from error
    log.warning("%s: reader disconnected (%s); reading on from %s", segment, error,
                Position.text(last or start))
    _close_quietly(reader)
    return _open_reader(client, segment, (last[0], last[1], -1) if last is not None else start,
                        settings)


def _open_reader(client, segment: str, at: Position, settings: dict):
    """A reader that starts at entry ``at`` (inclusive; the scan filters what lies before
    ``start``): never a seek, which pulsar-lite cannot do."""
    import pulsar

    if at == BEFORE or at[1] < 0 or at[1] >= END_OF_LEDGER:
        # no entry to start at: before the first, or "the end of ledger L" (a gate
        # just below entry 0 of the next ledger), which a broker need not resolve
        # (pulsar-lite delivers nothing from it). Earlier entries are filtered out.
        mid, inclusive = pulsar.MessageId.earliest, False
    else:
        mid, inclusive = pulsar.MessageId(-1, at[0], at[1], -1), True
    return client.create_reader(segment, mid, start_message_id_inclusive=inclusive,
                                **{**_INTERNAL, **settings})


def _end_entry_read(pos: Position, end: Position, end_size: int | None) -> bool:
    """Whether ``pos``, a message of the end entry, leaves nothing of the range unread:
    it is ``end`` itself, an unbatched entry, or the entry's last batched message."""
    return pos == end or pos[2] < 0 or bool(end_size and pos[2] >= end_size - 1)


def _silence_ends_scan(client, segment: str, start: Position, end: Position, last: Position | None,
                       at_end_entry: bool, end_size: int | None, wait: int, timeout_ms: int,
                       connected: bool, fail_on_data_loss: bool) -> bool:
    """Nothing arrived within ``wait``: outage, stall, loss, or the end of the range?

    True: the end entry is complete (an entry of unknown size that sent nothing more);
    False: the range's data is gone and ``failOnDataLoss=false`` skips it. Anything
    else raises: an outage or a stall is never skipped (BrokerUnavailable, read again),
    lost data fails the query (DataLoss) unless skipping was asked for.
    """
    end_ledger, end_entry = end[0], end[1]
    if at_end_entry and not end_size:
        return True  # nothing more of the end entry came: its batch is complete
    if at_end_entry:  # its size is known and messages of it are missing
        raise BrokerUnavailable(
            f"{segment}: entry {end_ledger}:{end_entry} holds {end_size} "
            f"messages but none after {Position.text(last or start)} arrived within "
            f"{wait} ms; the range is not skipped: it is read again") from None
    if not connected:  # an outage, not lost data: never skipped
        raise BrokerUnavailable(
            f"{segment}: the broker was unreachable for {timeout_ms} ms while "
            f"reading after {Position.text(last or start)} up to the planned "
            f"{Position.text(end)}; "
            "the range is not skipped (whatever failOnDataLoss says): it is "
            "read again once the broker is back") from None
    # connected, yet nothing came: lost only if the topic now ends at or
    # before where this scan is; entries beyond it that do not arrive are a
    # stall (bookies, a topic load, a bundle move), never skipped
    at = last or start
    try:
        lac = last_entry_strict(client, segment)
    except ProbeFailed as e:
        raise BrokerUnavailable(
            f"{segment}: no entry after {Position.text(at)} within {timeout_ms} ms and the "
            f"broker cannot say whether the data still exists ({e}); the range "
            "is not skipped") from None
    if lac is not None and lac > Position(at[0], at[1]):
        raise BrokerUnavailable(
            f"{segment}: entries after {Position.text(at)} exist (the last is "
            f"{lac}) but none arrived within {timeout_ms} ms; the "
            "range is not skipped: it is read again") from None
    msg = (f"{segment}: no entry after {Position.text(at)} within {timeout_ms} "
           f"ms although {Position.text(end)} was planned, and the topic now ends "
           f"{'empty' if lac is None else f'at {lac}'}: its data is "
           "gone (deleted topic or ledgers). Set failOnDataLoss=false to skip "
           "lost ranges.")
    if fail_on_data_loss:
        raise DataLoss(msg) from None
    log.warning("%s (failOnDataLoss=false: skipped)", msg)
    return False


def _close_quietly(reader) -> None:
    try:
        reader.close()
    except Exception as e:  # noqa: BLE001 - closing a dropped reader may fail; nothing to do
        log.debug("closing a reader failed: %s", e)


# ---- partitioned topics ----
_PARTITION = re.compile(r"-partition-\d+$")


def partitions_of(client, topic: str) -> list[str]:
    """A partitioned topic's partitions (``<topic>-partition-<i>``, in order), or
    ``[topic]`` for a non-partitioned one. Each partition is a segment of its own:
    transactions register, gate and classify per partition."""
    if _PARTITION.search(topic):
        return [topic]
    names = list(client.get_topic_partitions(topic))
    return names if len(names) > 1 or (names and names[0] != topic) else [topic]
