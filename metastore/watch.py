"""Watches: push notifications from the metadata store's event streams.

Every script that changes protocol state appends an event to a stream in its own
slot: ``{<ns>:<p>}:ev`` per partition for transactions, ``{<ns>:st:<topic>}:ev``
per scalable topic for layouts. Events are only wake-ups; headers, indexes and
DAGs stay the truth, so a watcher that may have missed events emits a *resync*
and its subscribers re-read what they cache.

Why one connection per slot. Redis Cluster refuses a command over keys of several
hash slots (CROSSSLOT), so one ``XREAD`` over the 16 partition streams is out, and
a blocking read occupies its connection until it returns. :class:`StreamFollower`
therefore groups the followed streams by hash slot and keeps, per slot group, one
connection with one ``XREAD BLOCK`` outstanding; a single thread waits on all
those sockets at once (``selectors``) and runs the callbacks one at a time, in
order, as the single-XREAD watch did (subscribers rely on one watch thread; a
thread per slot would call them concurrently). Push is kept: an event wakes the
thread as soon as it reaches a socket, with no polling interval (DESIGN H4); the
block timeout (5 s) only bounds how long a dead link goes unnoticed. Polling each
stream in turn would add up to a full round of reads to every wake-up, and
pub/sub (sharded or not) loses events on reconnect. The cost: one connection per
slot group (P for the transaction watch, one per followed scalable topic) instead
of one, and, per non-empty batch, one ``XINFO STREAM`` for the gap check below.
On a Redis Cluster (``redis+cluster://``) each group's connection goes to the
node that owns its slot (:class:`ClusterSlots`); a MOVED reply or a dropped node
(a slot migrated, a failover) fails the group, the slot map is refreshed, and
the group reconnects to the new owner with a resync: a wake-up published during
the move is never silently lost.

Resync, emitted once per loop turn however many streams needed it:

* after a reconnect (events published meanwhile may be gone, or the server may
  have restarted from an older state);
* after a *trimmed gap*: streams are capped with ``MAXLEN ~``, so a follower that
  fell more than ``event_maxlen`` behind would silently skip events if it just
  read on. The follower knows the ordinal of its position (``entries-added`` of
  ``XINFO STREAM``, Redis/Valkey >= 7.0) and checks each batch against one
  snapshot of the stream (see :meth:`StreamFollower._check_gap`): exact when the
  batch ends at the newest entry or the stream's head did not pass the batch's
  start, a gap assumed when trimming went past the batch meanwhile. On a gap the
  position restarts at the snapshot's newest entry and a resync follows.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable

import redis
from redis.crc import key_slot

from pulsar_txn.records import EventKind, TxnEvent, TxnId
from pulsar_txn.state import TxnState

from .slots import ClusterSlots, ServerSlots, slots_of

log = logging.getLogger(__name__)

_DOWN = (redis.ConnectionError, redis.TimeoutError, OSError)
_ORIGIN = "0-0"


def _id(s: str) -> tuple[int, int]:
    ms, _, seq = s.partition("-")
    return int(ms), int(seq or 0)


def _pairs(raw) -> dict:
    """A RESP3 map or a RESP2 flat list of pairs, as a dict."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    return dict(zip(raw[::2], raw[1::2]))


def _xread_reply(raw) -> list[tuple[str, list[tuple[str, dict]]]]:
    """XREAD's reply (RESP2 list or RESP3 map) as [(key, [(id, fields)])]."""
    if not raw:
        return []
    items = raw.items() if isinstance(raw, dict) else raw
    return [(key, [(eid, _pairs(fields)) for eid, fields in entries])
            for key, entries in items]


class _Group:
    """The streams of one hash slot, read by one blocking XREAD on one connection."""

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.keys: list[str] = []
        self.conn = None
        self.sock = None          # conn's socket as registered (redis-py drops it on errors)
        self.pending = False      # an XREAD is outstanding on conn
        self.sent_at = 0.0
        self.retry_at = 0.0
        self.backoff = 0.05       # doubles with each failure in a row, up to 2 s
        self.lost = False         # positions were lost with a connection: resync on return


class StreamFollower(threading.Thread):
    """Follows a set of Redis streams, pushed, without any command spanning slots.

    Subclasses say which streams (``streams``, re-evaluated every ``refresh_s``
    when given) and what to do with ``entries``, a new stream (``added``) and a
    ``resync``. All callbacks run on this thread, one at a time.
    """

    def __init__(self, slots: ServerSlots | ClusterSlots, *, name: str, count: int,
                 block_ms: int = 5000, refresh_s: float | None = None) -> None:
        super().__init__(name=name, daemon=True)
        self._slots = slots
        self._stale_map = False  # a group failed: re-learn the slot owners before reconnecting
        self._count = count
        self._block_ms = block_ms
        self._refresh_s = refresh_s
        grace = slots.socket_timeout
        self._deadline_s = block_ms / 1000 + grace  # no reply by then: the link is dead
        self._groups: dict[int, _Group] = {}
        self._pos: dict[str, tuple[str, int | None]] = {}  # key -> (last id, its ordinal)
        self._closing = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel = selectors.DefaultSelector()
        self.ready = threading.Event()
        self.resyncs = 0  # emitted so far (tests, diagnostics)

    # ---- what subclasses define ----
    def streams(self) -> Iterable[str]:
        raise NotImplementedError

    def entries(self, key: str, entries: list[tuple[str, dict]]) -> None:
        raise NotImplementedError

    def added(self, key: str) -> None:
        """A stream joined the followed set (its position is now established)."""

    def resync(self) -> None:
        raise NotImplementedError

    # ---- the loop ----
    def run(self) -> None:
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        next_refresh = 0.0
        try:
            while not self._closing.is_set():
                try:
                    next_refresh = self._turn(next_refresh)
                except Exception:  # a bug here must not end notifications for good
                    log.exception("pulsar-txn watch %s failed; reconnecting", self.name)
                    for g in self._groups.values():
                        self._fail(g, "internal error")
                    self._closing.wait(0.5)
        finally:
            for g in self._groups.values():
                self._drop(g)
            self._sel.close()
            self._wake_r.close()
            self._wake_w.close()

    def _turn(self, next_refresh: float) -> float:
        now = time.monotonic()
        if next_refresh <= now:
            self._set_streams(list(self.streams()))
            next_refresh = now + self._refresh_s if self._refresh_s else float("inf")
        if self._connect_and_send(now):
            self._emit(self.resync)
        for sk, _ in self._sel.select(self._timeout(next_refresh)):
            if sk.data is None:
                self._wake_r.recv(4096)
            elif sk.data.pending:
                self._receive(sk.data)
        now = time.monotonic()
        for g in self._groups.values():
            if g.pending and now - g.sent_at > self._deadline_s and not self._waiting(g):
                self._fail(g, "no reply to a blocking read")
        return next_refresh

    @staticmethod
    def _waiting(g: _Group) -> bool:
        """A reply is there, unread only because callbacks kept this thread busy."""
        try:
            return g.conn.can_read(timeout=0)
        except _DOWN:
            return False

    def _timeout(self, next_refresh: float) -> float:
        now = time.monotonic()
        until = [next_refresh, now + self._deadline_s]
        until += [g.retry_at for g in self._groups.values() if g.conn is None]
        until += [g.sent_at + self._deadline_s for g in self._groups.values() if g.pending]
        return max(0.0, min(until) - now)

    def _set_streams(self, wanted: list[str]) -> None:
        by_slot: dict[int, list[str]] = {}
        for key in dict.fromkeys(wanted):
            by_slot.setdefault(key_slot(key.encode()), []).append(key)
        for slot in list(self._groups):
            if slot not in by_slot:
                g = self._groups.pop(slot)
                self._drop(g)
                for key in g.keys:
                    self._pos.pop(key, None)
        for slot, keys in by_slot.items():
            g = self._groups.setdefault(slot, _Group(slot))
            if sorted(g.keys) != sorted(keys):  # a blocking read cannot be amended: redo it
                for key in set(g.keys) - set(keys):
                    self._pos.pop(key, None)
                self._drop(g)
                g.keys, g.retry_at = keys, 0.0

    def _connect_and_send(self, now: float) -> bool:
        """(Re)establish the groups without a connection once one is due, then send
        every idle group's XREAD. True if a group came back after losing its
        positions: one resync is due, however many groups came back together."""
        resync = False
        down = [g for g in self._groups.values() if g.conn is None]
        if any(g.retry_at <= now for g in down):
            if self._stale_map:
                self._stale_map = False
                self._slots.refresh()
            for g in down:
                state = self._establish(g)
                resync |= state == "back"
                if state == "down" and self._slots.one_server:  # still down: every group waits
                    for other in down:
                        if other.conn is None:
                            other.retry_at = max(other.retry_at, g.retry_at)
                    break
        for g in self._groups.values():
            if g.conn is not None and not g.pending:
                self._send(g)
        if not self.ready.is_set() and all(g.conn is not None for g in self._groups.values()):
            self.ready.set()
        return resync

    def _new_conn(self, slot: int = 0):
        return self._slots.connect(slot)

    def _establish(self, g: _Group) -> str:
        """Connect and fix the positions it lacks: 'new', 'back' (it had lost them:
        resync), 'down' (unreachable) or 'refused' (an error reply; retried later)."""
        try:
            g.conn = self._new_conn(g.slot)
            g.conn.connect()
            new = []
            for key in g.keys:
                if key not in self._pos:
                    self._pos[key] = self._head(g.conn, key)
                    new.append(key)
            g.sock = g.conn._sock  # redis-py keeps no public handle on its socket
            self._sel.register(g.sock, selectors.EVENT_READ, g)
        except _DOWN as e:
            self._fail(g, e)
            return "down"
        except redis.ResponseError as e:
            self._fail(g, e, level=logging.WARNING)
            return "refused"
        if g.lost:
            g.lost = False
            return "back"
        for key in new:
            self._emit(self.added, key)
        return "new"

    @staticmethod
    def _xinfo(conn, key: str) -> dict | None:
        conn.send_command("XINFO", "STREAM", key)
        try:
            return _pairs(conn.read_response())
        except redis.ResponseError as e:
            if "no such key" in str(e).lower():
                return None
            raise

    def _head(self, conn, key: str) -> tuple[str, int | None]:
        """The stream's newest id and its ordinal: where following starts."""
        info = self._xinfo(conn, key)
        if info is None:
            return _ORIGIN, 0
        added = info.get("entries-added")
        return info["last-generated-id"], (None if added is None else int(added))

    def _send(self, g: _Group) -> None:
        try:
            g.conn.send_command("XREAD", "COUNT", self._count, "BLOCK", self._block_ms,
                                "STREAMS", *g.keys, *(self._pos[k][0] for k in g.keys))
        except _DOWN as e:
            self._fail(g, e)
            return
        g.pending, g.sent_at = True, time.monotonic()

    def _receive(self, g: _Group) -> None:
        try:
            reply = _xread_reply(g.conn.read_response())
        except _DOWN as e:
            self._fail(g, e)
            return
        except redis.ResponseError as e:
            self._fail(g, e, level=logging.WARNING)
            return
        g.pending, g.backoff = False, 0.05
        gaps = 0
        for key, got in reply:
            if not got or key not in self._pos:
                continue
            before, ordinal = self._pos[key]
            self._pos[key] = (got[-1][0], None)
            self._emit(self.entries, key, got)
            try:
                gaps += self._check_gap(g.conn, key, before, ordinal, got)
            except _DOWN as e:
                self._fail(g, e)
                return
            except redis.ResponseError as e:
                self._fail(g, e, level=logging.WARNING)
                return
        if gaps:
            self._emit(self.resync)

    def _check_gap(self, conn, key: str, before: str, ordinal: int | None,
                   got: list[tuple[str, dict]]) -> bool:
        """After reading ``got`` from after ``before``: were unread entries trimmed?

        ``ordinal`` is the number of entries ever added up to ``before``. One
        ``XINFO STREAM`` (a snapshot) decides, exactly in the common cases:

        * the batch ends at the newest entry: it is entry number ``entries-added``,
          so the batch followed ``before`` without a hole iff that equals
          ``ordinal + len(got)`` (however much was trimmed since);
        * the head is older than the batch: it is at or before ``before``
          (trimming only removes the oldest entries; nothing uses XDEL), so
          nothing unread is gone;
        * the head is the batch's first entry: ``entries-added - length`` entries
          were removed, all before it; a hole iff that differs from ``ordinal``.

        Otherwise (trimmed past the batch meanwhile) it assumes a gap. After a
        gap following restarts at the snapshot's newest entry; the caller resyncs.
        """
        first_got, last_got, n = got[0][0], got[-1][0], len(got)
        info = self._xinfo(conn, key)
        if info is None:  # the stream was deleted: whatever it held is unknown
            self._pos[key] = (_ORIGIN, 0)
            return True
        added = info.get("entries-added")  # Redis/Valkey >= 7.0
        added = None if added is None else int(added)
        head = info.get("first-entry")
        first = head[0] if head else None
        gap, ordinal_now = True, None
        if added is not None and ordinal is not None and info["last-generated-id"] == last_got:
            gap, ordinal_now = added != ordinal + n, added
        elif first is not None and _id(first) < _id(first_got):
            gap, ordinal_now = False, None if ordinal is None else ordinal + n
        elif first == first_got:
            if added is None:  # no counters: exact only from an empty start
                gap = before != _ORIGIN
            else:
                removed = added - int(info["length"])
                gap, ordinal_now = ordinal is None or removed != ordinal, removed + n
        if not gap:
            self._pos[key] = (last_got, ordinal_now)
            return False
        log.warning("pulsar-txn watch: events of %s were trimmed before being read; "
                    "resyncing", key)
        self._pos[key] = (info["last-generated-id"], added)
        return True

    def _fail(self, g: _Group, err, level: int = logging.DEBUG) -> None:
        if self._closing.is_set():
            return
        log.log(level, "pulsar-txn watch %s: slot %d: %s", self.name, g.slot, err)
        self._stale_map = True
        self._drop(g)
        had = [key for key in g.keys if self._pos.pop(key, None) is not None]
        g.lost = g.lost or bool(had)  # events may be missed from here: resync on return
        g.retry_at = time.monotonic() + g.backoff
        g.backoff = min(g.backoff * 2, 2.0)

    def _drop(self, g: _Group) -> None:
        if g.conn is None:
            return
        if g.sock is not None:
            try:
                self._sel.unregister(g.sock)  # found by identity even once closed
            except (KeyError, ValueError):
                pass
        try:
            g.conn.disconnect()
        except Exception:  # closing a broken socket: nothing left to do
            pass
        g.conn, g.sock, g.pending = None, None, False

    def _emit(self, fn: Callable, *args) -> None:
        if fn == self.resync:
            self.resyncs += 1
        try:
            fn(*args)
        except Exception:  # a subscriber's bug must not stop notifications for others
            log.exception("pulsar-txn watch callback failed")

    def close(self) -> None:
        self._closing.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self.ident is None:  # never started: nothing else owns the wake-up pair
            self._wake_r.close()
            self._wake_w.close()
        elif threading.current_thread() is not self:
            self.join(timeout=2)


class RedisWatch(StreamFollower):
    """Transaction events of every partition (``{<ns>:<p>}:ev``), pushed.

    Events are only wake-ups: after a reconnect or a trimmed gap a ``resync``
    event tells subscribers to re-read headers and indexes.
    """

    def __init__(self, store, callback: Callable[[TxnEvent], None]) -> None:
        super().__init__(slots_of(store), name="pulsar-txn-watch", count=1024)
        self._callback = callback
        self._partition = {store.keys.events(p): p for p in range(store.partitions)}

    def streams(self) -> Iterable[str]:
        return self._partition

    def entries(self, key: str, entries: list[tuple[str, dict]]) -> None:
        p = self._partition[key]
        for _eid, fields in entries:
            self._emit(self._callback, self._decode(p, fields))

    def resync(self) -> None:
        self._callback(TxnEvent(EventKind.RESYNC))

    @staticmethod
    def _decode(p: int, f: dict[str, str]) -> TxnEvent:
        txn = TxnId(p, int(f["t"]))
        segs = tuple(s for s in f.get("g", "").split("\n") if s)
        state = TxnState(f["s"]) if f.get("s") else None
        try:
            kind = EventKind(f.get("k", "end"))
        except ValueError:  # a kind this version does not know: re-read, never guess
            kind = EventKind.RESYNC
        return TxnEvent(kind, txn, state, segs)


class RedisTopicWatch(StreamFollower):
    """Layout changes of scalable topics, pushed (``{<ns>:st:<topic>}:ev`` each).

    ``callback(topic)`` after an event of that topic, and once when it starts
    being followed; ``callback(None)`` after a reconnect or a trimmed gap, when
    events may have been missed and every layout must be re-read. ``topics()`` is
    re-read every 0.2 s (a local call: no store traffic).
    """

    def __init__(self, store, topics: Callable[[], Iterable[str]],
                 callback: Callable[[str | None], None]) -> None:
        super().__init__(slots_of(store), name="pulsar-txn-topic-watch", count=256,
                         refresh_s=0.2)
        self._keys = store.keys
        self._topics = topics
        self._callback = callback
        self._topic_of: dict[str, str] = {}

    def streams(self) -> Iterable[str]:
        self._topic_of = {self._keys.topic_events(t): t for t in self._topics()}
        return self._topic_of

    def entries(self, key: str, entries: list[tuple[str, dict]]) -> None:
        if key in self._topic_of:
            self._callback(self._topic_of[key])

    def added(self, key: str) -> None:  # a change between the follower's read and now
        self.entries(key, [])

    def resync(self) -> None:
        self._callback(None)
