"""Watches of the in-memory store: wake-ups pushed to one thread per watch.

Why a thread and a queue when the store could call back directly: the Redis
watches run their callbacks on a thread of their own, one at a time and in order,
and the roles rely on it (a callback may block, or call the store, while the step
that caused the event has long returned to its caller). The step that changes
state queues its event under the store's lock, and a watch is registered under the
same lock, so every change made after ``watch()`` returns is delivered: what the
Redis watch promises from the moment it is ready (it follows from the streams'
heads). A subscriber that starts its watch and then reads a header therefore never
waits forever for a decision. Nothing is lost in memory, so there is never a
resync.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable

from pulsar_txn.records import TxnEvent

log = logging.getLogger(__name__)

_STOP = object()
TOPICS_REFRESH_S = 0.2  # as the Redis topic watch re-reads ``topics()``


class _Follower(threading.Thread):
    def __init__(self, registry: list, lock: threading.RLock, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._registry = registry
        self._lock = lock
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closing = threading.Event()
        self.resyncs = 0  # as the Redis watch counts them: never any here

    def push(self, item) -> None:
        """Called with the store's lock held, in the order the steps happened."""
        self._queue.put(item)

    def begin(self) -> _Follower:
        with self._lock:
            self._registry.append(self)
        self.start()
        return self

    @staticmethod
    def _emit(fn: Callable, *args) -> None:
        try:
            fn(*args)
        except Exception:  # a subscriber's bug must not stop notifications for others
            log.exception("pulsar-txn memory watch callback failed")

    def close(self) -> None:
        with self._lock:
            if self in self._registry:
                self._registry.remove(self)
        self._closing.set()
        self._queue.put(_STOP)
        if self.ident is not None and threading.current_thread() is not self:
            self.join(timeout=2)


class MemoryWatch(_Follower):
    """Transaction events (end, pos, mat), as the Redis watch decodes them."""

    def __init__(self, registry: list, lock: threading.RLock,
                 callback: Callable[[TxnEvent], None]) -> None:
        super().__init__(registry, lock, "pulsar-txn-memory-watch")
        self._callback = callback

    def run(self) -> None:
        while True:
            ev = self._queue.get()
            if ev is _STOP:
                return
            self._emit(self._callback, ev)


class MemoryTopicWatch(_Follower):
    """Layout changes of the scalable topics ``topics()`` names (re-read every
    0.2 s): ``callback(topic)`` after each change, and once when a topic starts
    being followed, since changes before then were not watched."""

    def __init__(self, registry: list, lock: threading.RLock,
                 topics: Callable[[], Iterable[str]],
                 callback: Callable[[str | None], None]) -> None:
        super().__init__(registry, lock, "pulsar-txn-memory-topic-watch")
        self._topics = topics
        self._callback = callback

    def run(self) -> None:
        followed: set[str] = set()
        next_refresh = 0.0
        while not self._closing.is_set():
            if time.monotonic() >= next_refresh:
                try:
                    current = set(self._topics())
                except Exception:  # the subscriber's listing failed: keep the old set
                    log.exception("pulsar-txn memory topic watch: topics() failed")
                    current = followed
                for t in sorted(current - followed):
                    self._emit(self._callback, t)
                followed = current
                next_refresh = time.monotonic() + TOPICS_REFRESH_S
            try:
                item = self._queue.get(timeout=max(0.0, next_refresh - time.monotonic()))
            except queue.Empty:
                continue
            if item is _STOP:
                return
            if item in followed:
                self._emit(self._callback, item)
