"""Pulsar clients, producers and metastore connections kept for a Python worker's life.

Spark reuses a Python worker for later tasks (``spark.python.worker.reuse``, on by
default), so a task that opens its own client, a producer per topic and a Redis
connection (and loads the scripts again) pays that on every micro-batch, and the
broker sees producers come and go each trigger. Tasks borrow them from here
instead. A worker runs one task at a time; the lock only guards the maps.

What is shared carries no transaction state: a producer is a connection to a
topic; the transaction and the writer ride on each message, and every task still
opens its own writer-runs. A producer used by a task that failed is closed, not
kept (its queue may hold sends of unknown outcome); idle ones are closed after
``IDLE_S``, checked when a task starts. At a normal interpreter exit everything is
closed; PySpark usually ends its workers with ``os._exit`` or a kill, and then the
broker and Redis drop the connections (every task flushed its sends before it
returned, so nothing is left in flight).
"""

from __future__ import annotations

import atexit
import threading
import time
from typing import Any

import pulsar

from pulsar_txn.metastore import open_store
from pulsar_txn.records import Position

from .options import client_kwargs

IDLE_S = 300.0  # a producer or client nobody borrowed for this long is closed


def _frozen(d: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in d.items() if k != "logger"))


class WorkerResources:
    def __init__(self, idle_s: float = IDLE_S, make_client=None, open_store=None) -> None:
        """``make_client(opts)``/``open_store(url, namespace)``: how to make them (the
        defaults: pulsar.Client with the options' settings, metastore.open_store)."""
        self._idle_s = idle_s
        self._make_client = make_client or _make_client
        self._open_store = open_store or _open_store
        self._lock = threading.Lock()
        self._clients: dict[tuple, list[Any]] = {}  # key -> [client, last used]
        self._producers: dict[tuple, list[Any]] = {}  # (client key, topic, kw) -> [p, used]
        self._stores: dict[tuple, Any] = {}
        self._checked: set[tuple] = set()
        # readers a task left at its range's end, for the next micro-batch's range
        self.readers = KeptReaders()
        # sink tasks learn their appends' outcomes per broker entry (entry_acks); off for
        # the worker's life once a producer cut its batches where it was not foreseen
        self.per_entry_acks = True

    @staticmethod
    def _client_key(opts) -> tuple:
        return (opts.service_url, _frozen(opts.client), opts.auth_plugin, opts.auth_params)

    def begin_task(self) -> None:
        """Close what no task borrowed for ``idle_s``. Called as a task starts, when the
        worker holds nothing for a running task (one task at a time per worker)."""
        self.readers.sweep()
        with self._lock:
            self._evict_idle()

    def client(self, opts, reads: bool = False):
        """The worker's pulsar.Client for these options (built once). ``reads``: the one
        the source's scans use, never the sink's producers' (pulsar-client 3.x resets a
        whole connection when a reader reaches the end of a terminated topic, and a send
        in flight on it can be lost: docs/durability.md)."""
        key = self._client_key(opts) + (("reads",) if reads else ())
        with self._lock:
            entry = self._clients.get(key)
            if entry is None:
                entry = self._clients[key] = [self._make_client(opts), 0.0]
            entry[1] = time.monotonic()
            return entry[0]

    def producer(self, opts, topic: str, producer_kw: dict):
        """A producer on ``topic`` (created on first use, then kept)."""
        client = self.client(opts)
        key = (self._client_key(opts), topic, _frozen(producer_kw))
        with self._lock:
            entry = self._producers.get(key)
        if entry is None:
            made = client.create_producer(topic, **producer_kw)
            with self._lock:
                entry = self._producers.setdefault(key, [made, 0.0])
            if entry[0] is not made:
                _close(made)
        entry[1] = time.monotonic()
        return entry[0]

    def discard(self, producers) -> None:
        """Close producers a failed task used; the next task makes new ones."""
        ids = {id(p) for p in producers}
        with self._lock:
            gone = [k for k, (p, _) in self._producers.items() if id(p) in ids]
            closing = [self._producers.pop(k)[0] for k in gone]
        for p in closing:
            _close(p)

    def store(self, url: str, namespace: str, create: bool = True):
        """The worker's metastore connection (its scripts loaded once), checked before
        each reuse: a metastore wiped, replaced or restarted since it was opened is
        opened afresh (deployment id, partitions, persistence check), so no task
        classifies or stamps entries with a deployment id that is no longer current.
        ``create`` False (the source's reads): a missing namespace is never created."""
        key = (url, namespace)
        with self._lock:
            store = self._stores.get(key)
        if store is not None and store.still_current():
            return store
        if store is not None:
            self.drop_store(url, namespace)
        made = (self._open_store(url, namespace) if create
                else self._open_store(url, namespace, create=False))
        with self._lock:
            store = self._stores.setdefault(key, made)
        if store is not made:
            _close(made)
        return store

    def drop_store(self, url: str, namespace: str) -> None:
        """After an error that may have left the connection unusable."""
        with self._lock:
            store = self._stores.pop((url, namespace), None)
        if store is not None:
            _close(store)

    def client_key(self, opts) -> tuple:
        return self._client_key(opts)

    def checked(self, what: tuple) -> bool:
        """Whether a one-time check (e.g. the broker answers) passed in this worker."""
        with self._lock:
            return what in self._checked

    def mark_checked(self, what: tuple) -> None:
        with self._lock:
            self._checked.add(what)

    def _evict_idle(self) -> None:
        """Called with the lock held."""
        now = time.monotonic()
        for key in [k for k, (_, used) in self._producers.items() if now - used > self._idle_s]:
            _close(self._producers.pop(key)[0])
        in_use = {k[0] for k in self._producers}
        idle = [k for k, (_, used) in self._clients.items()
                if k not in in_use and now - used > self._idle_s]
        if idle:
            self.readers.close()  # a kept reader never outlives its client
        for key in idle:
            _close(self._clients.pop(key)[0])

    def close(self) -> None:
        self.readers.close()
        with self._lock:
            producers = [p for p, _ in self._producers.values()]
            clients = [c for c, _ in self._clients.values()]
            stores = list(self._stores.values())
            self._producers.clear()
            self._clients.clear()
            self._stores.clear()
        for thing in (*producers, *clients, *stores):
            _close(thing)


class KeptReaders:
    """Readers left where a scan's range ended, for the next range of that segment.

    A streaming source reads a segment in consecutive ranges, one per micro-batch;
    going on with the reader the previous range left just past its end avoids
    opening one per range (pulsar-lite keeps state for every reader ever opened and
    slows down over hours of triggers). A reader is handed out only to a range that
    starts where it stopped or further on in the same ledger (at most ``max_skip``
    entries: the scan reads on and drops what lies before the start, at most
    ``broker_io.KEPT_DROP_LIMIT`` messages of it: the range another Python worker read
    when two take a segment's micro-batches in turns, or the half of a split range); a
    replay or a retry of an earlier range opens its own and reads the same entries.
    Readers idle for ``idle_s`` are closed (checked at every take); at most ``limit``
    are kept.
    """

    def __init__(self, idle_s: float = 60.0, limit: int = 16, max_skip: int = 5_000) -> None:
        self._idle_s, self._limit, self._max_skip = idle_s, limit, max_skip
        self._lock = threading.Lock()
        self._kept: dict[tuple, tuple[Position, object, float]] = {}

    def take(self, key: tuple, start: Position):
        """(reader, where it stopped) kept for ``key`` if it stopped at ``start`` or a
        little before it (never after it: it would miss entries), else None."""
        with self._lock:
            entry = self._kept.pop(key, None)
        self.sweep()
        if entry is not None and not self._near_before(entry[0], start):
            _close(entry[1])
            entry = None
        return None if entry is None else (entry[1], entry[0])

    def sweep(self) -> None:
        """Close the readers idle for ``idle_s`` (each one prefetches while kept)."""
        now = time.monotonic()
        with self._lock:
            stale = [k for k, (_, _, used) in self._kept.items() if now - used > self._idle_s]
            closing = [self._kept.pop(k)[1] for k in stale]
        for r in closing:
            _close(r)

    def _near_before(self, stopped: Position, start: Position) -> bool:
        return stopped == start or (stopped < start and stopped[0] == start[0]
                                    and 0 <= start[1] - stopped[1] <= self._max_skip)

    def give(self, key: tuple, end: Position, reader) -> None:
        with self._lock:
            old = self._kept.pop(key, None)
            self._kept[key] = (end, reader, time.monotonic())
            over = list(self._kept)[:-self._limit] if len(self._kept) > self._limit else []
            closing = [self._kept.pop(k)[1] for k in over]
        for r in ([old[1]] if old else []) + closing:
            _close(r)

    def close(self) -> None:
        with self._lock:
            readers = [r for _, r, _ in self._kept.values()]
            self._kept.clear()
        for r in readers:
            _close(r)


def _make_client(opts):
    return pulsar.Client(opts.service_url, **client_kwargs(opts))


def _open_store(url: str, namespace: str, create: bool = True):
    return open_store(url, namespace=namespace, create=create)


def _close(thing) -> None:
    try:
        thing.close()
    except Exception:  # noqa: BLE001 - closing at worker exit or after a failure: best effort
        pass


RESOURCES = WorkerResources()
atexit.register(RESOURCES.close)
