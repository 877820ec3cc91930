"""The producer of one plain topic (segment) whose sends may join a transaction.

pulsar-client has no transaction API, so a transactional send is an ordinary
append carrying the txn id and writer id as properties, preceded by a write
registration in the metastore (once per writer-run and segment, not per
message): that is the transaction's ``run_for``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pulsar

from pulsar_txn.errors import BrokerUnavailable, ConfigError, TxnNotOpen
from pulsar_txn.metastore.redis_url import redact_url
from pulsar_txn.records import PROTOCOL_PREFIX, TxnId
from pulsar_txn.state import TxnState
from pulsar_txn.topics import normalize_topic
from pulsar_txn.transaction import Transaction
from pulsar_txn.writer import WriterRun

log = logging.getLogger(__name__)

# pulsar-client's create_producer settings a per-entry producer can share with the
# user's (anything else, e.g. a schema, chunking, key-based batches, a producer name
# the broker deduplicates by or an exclusive access mode, keeps every transactional
# send on the user's producer with a callback per message).
_PER_ENTRY_SAFE = {"batching_enabled", "batching_max_messages",
                   "batching_max_allowed_size_in_bytes", "batching_max_publish_delay_ms",
                   "max_pending_messages", "compression_type", "send_timeout_millis", "properties",
                   "block_if_queue_full", "lazy_start_partitioned_producers"}
# Its batches are cut by count and bytes alone (the time trigger an hour away): the
# transaction's commit flushes them (entry_acks).
_PER_ENTRY_KW = {"batching_enabled": True, "batching_max_publish_delay_ms": 3_600_000,
                 "block_if_queue_full": True}
_DEFAULTS = {"batching_max_messages": 1000, "batching_max_allowed_size_in_bytes": 128 * 1024,
             "max_pending_messages": 10_000}


def _on_callback_thread() -> bool:
    """Whether this is a thread Python did not start: pulsar-client's I/O thread
    running a send's callback. It must never block on a flush (the flush waits for
    receipts that very thread delivers), so nothing here waits on it."""
    return threading.current_thread().name.startswith("Dummy-")


class Producer:
    """A producer whose sends may join a transaction (``txn=``)."""

    def __init__(self, client: pulsar.Client, topic: str, service_url: str = "",
                 **kwargs) -> None:
        """``service_url``: the client's, for errors (redacted); ``kwargs``:
        pulsar-client's ``create_producer``."""
        self.service_url = service_url
        self.segment = normalize_topic(topic)
        self.writer_id = f"p{uuid.uuid4().hex[:16]}"
        self.native = client.create_producer(self.segment, **kwargs)
        self._bytes_only = kwargs.get("schema") is None
        self.entries = _EntrySends(client, self, kwargs) if _per_entry_ok(kwargs) else None
        self._sender: object = _NOBODY
        self._sender_lock = threading.Lock()

    def _one_sender_per_entry(self, txn: Transaction | None) -> None:
        """Cut the user's producer's open batch when the sender changes (plain, or another
        transaction): an entry then holds one sender's messages. The broker plugin
        decides whole entries (an entry filter cannot split a batch), so a plain or
        committed message batched with an aborted one would share its fate. Not from
        several threads at once with different senders: their sends can still meet in
        one batch (use a producer per thread)."""
        sender = None if txn is None else txn.id
        with self._sender_lock:
            if sender != self._sender:
                # pulsar-client's native producer sends the batch now, without waiting
                # (a stand-in producer without one, e.g. the history tests', batches nothing)
                native = getattr(self.native, "_producer", None)
                if self._sender is not _NOBODY and native is not None:
                    native.flush_async(_ignore)
                self._sender = sender

    def _check(self, value: object, key: object, event_time_ms: object) -> None:
        check_send(value, key, event_time_ms, self._bytes_only)

    def _run(self, txn: Transaction):
        return txn.run_for(self.segment, self.writer_id, self.native)

    def send(self, value: bytes, key: str | None = None, properties: dict | None = None,
             txn: Transaction | None = None, event_time_ms: int | None = None):
        self._check(value, key, event_time_ms)  # refused before anything is registered
        with send_errors_named(self.segment, value, self.service_url):
            if self.entries is not None:
                self.entries.before_other_send()
            self._one_sender_per_entry(txn)
            if txn is None:
                return self.native.send(value, properties=user_props(properties),
                                        **send_kw(key, event_time_ms))
            try:
                return self._run(txn).send(value, user_props(properties),
                                           **send_kw(key, event_time_ms))
            except BaseException as e:
                txn.send_failed(e)  # the transaction cannot commit (Transaction.send_failed)
                raise

    def send_async(self, value: bytes, callback: Callable | None = None, key: str | None = None,
                   properties: dict | None = None, txn: Transaction | None = None,
                   event_time_ms: int | None = None) -> None:
        self._check(value, key, event_time_ms)
        entries = self.entries
        if txn is not None and callback is None and entries is not None and entries.enabled:
            props = user_props(properties) if properties else None
            try:
                if entries.add(txn, value, key, props, event_time_ms):
                    return
            except BaseException as e:
                txn.send_failed(e)
                raise
        if entries is not None:
            entries.before_other_send()
        self._one_sender_per_entry(txn)
        if txn is None:
            self.native.send_async(value, callback or (lambda r, m: None),
                                   properties=user_props(properties),
                                   **send_kw(key, event_time_ms))
            if entries is not None:
                entries.main_sent()
            return
        try:
            self._run(txn).send_async(value, callback, user_props(properties),
                                      **send_kw(key, event_time_ms))
        except BaseException as e:
            txn.send_failed(e)
            raise
        if entries is not None:
            entries.main_sent()

    def flush(self) -> None:
        if self.entries is not None:
            self.entries.flush()
        self.native.flush()

    def close(self) -> None:
        if self.entries is not None:
            self.entries.close()
        self.native.close()


def _per_entry_ok(kwargs: dict) -> bool:
    """Transactional sends without a callback may learn their outcomes per entry."""
    return (set(kwargs) <= _PER_ENTRY_SAFE and kwargs.get("block_if_queue_full", True)
            and kwargs.get("batching_enabled", True))


class _Chunk:
    """A transaction's sends not handed to the per-entry producer yet, as columns."""

    __slots__ = ("txn", "values", "keys", "props", "times", "opened")

    def __init__(self, txn: Transaction) -> None:
        self.txn = txn
        self.opened = 0.0  # when its first value not handed over yet came (monotonic)
        self.values: list = []
        self.keys: list = []
        self.props: list = []
        self.times: list = []


class _EntrySends:
    """The per-entry path of a producer's transactional sends (``send_async`` with no
    callback): they are taken in order into a chunk per transaction and handed, a
    batch's worth at a time, to a second producer of the segment whose batches are cut
    by count and bytes alone, so each run learns its appends' outcomes from one
    callback per broker entry (entry_acks) and its commit proves every message stored.

    One run at a time owns that producer's open batch: another run's hand-over first
    flushes it (the cut falls after a hand-over's last message, which has a callback),
    so every entry holds one run's messages. The user's producer and this one keep the
    order the sends were made in: a send on one waits for what the other holds to be
    appended first (a flush), so mixing the two on one producer costs a round trip per
    switch, never order."""

    def __init__(self, client: pulsar.Client, owner: Producer, kwargs: dict) -> None:
        self._client, self._owner = client, owner
        # the user's publish delay, kept by this path's own clock: a chunk older than it
        # at a send is handed over and its batch cut (sent), as pulsar-client would
        delay_ms = {**_DEFAULTS, **kwargs}.get("batching_max_publish_delay_ms", 10)
        self.delay_s = max(0.0, float(delay_ms) / 1000)
        kw = {**_DEFAULTS, **kwargs, **_PER_ENTRY_KW}
        self.max_n = int(kw["batching_max_messages"])
        self.max_b = int(kw["batching_max_allowed_size_in_bytes"])
        # a full queue blocks the send without sending the open batch (its time trigger
        # is an hour away): the queue holds two batches at least
        kw["max_pending_messages"] = max(int(kw["max_pending_messages"]), 2 * self.max_n)
        self._kw = kw
        self.writer_id = owner.writer_id + "e"
        self._native = None  # made at the first hand-over
        self.enabled = True
        self._lock = threading.RLock()
        self._chunks: dict[TxnId, _Chunk] = {}
        self._owner_run: WriterRun | None = None  # whose messages the open batch holds
        self._dirty = False  # handed over since the last flush of this producer
        self._main_dirty = False  # the user's producer took async sends since its flush
        self._runs: list[WriterRun] = []  # of recent transactions (see ``add``: fallback)

    def add(self, txn: Transaction, value: bytes, key: str | None, props: dict | None,
            event_time_ms: int | None) -> bool:
        """Take a send into its transaction's chunk; False: this producer hears of
        every message from now on (see below), the caller sends it so."""
        if _on_callback_thread():
            return False  # sent on the user's producer, as any send from a callback
        txn.check_deployment()
        with self._lock:
            chunk = self._chunks.get(txn.id)
            if chunk is None:
                txn.ensure_open()
                # A run that found a batch cut where it was not foreseen (a client whose
                # batching differs from the rule entry_acks foresees) failed closed;
                # later transactions hear of every message, as the sink's worker does.
                if any(r.per_entry is not None and r.per_entry.unforeseen
                       for r in self._runs):
                    self.enabled = False
                    return False
                # refused once its commit began (the commit's flush may have passed here)
                txn.flush_before_commit(_CommitFlush(self, txn.id))
                for other, left in list(self._chunks.items()):  # an ended one's go
                    if left.txn.state is not TxnState.OPEN:
                        del self._chunks[other]
                chunk = self._chunks[txn.id] = _Chunk(txn)
            elif txn.committing or txn.state is not TxnState.OPEN:
                raise TxnNotOpen(str(txn.id), "committing" if txn.committing
                                 else txn.state.value)
            now = time.monotonic()
            if not chunk.values:
                chunk.opened = now
            chunk.values.append(value)
            chunk.keys.append(key)
            chunk.props.append(props)
            chunk.times.append(event_time_ms)
            if len(chunk.values) >= self.max_n:
                self._hand_over(chunk)
            elif now - chunk.opened >= self.delay_s:
                self._hand_over(chunk)
                self._cut()
            return True

    def _cut(self) -> None:
        """Send the open batch now (the lock held): it ends with a hand-over's last
        message, which has a callback, so its run foresees the cut."""
        run = self._owner_run
        if self._dirty and self._native is not None:
            self._native.cut()
            if run is not None and run.per_entry is not None:
                run.per_entry.cut()
        self._owner_run, self._dirty = None, False

    def _hand_over(self, chunk: _Chunk) -> None:
        """Called with the lock held: the chunk's sends go to the per-entry producer.
        Whatever fails on the way (the other producer, a registration, a send), the
        transaction cannot commit, whoever's call handed the chunk over."""
        values = chunk.values
        if not values:
            return
        keys, props, times = chunk.keys, chunk.props, chunk.times
        chunk.values, chunk.keys, chunk.props, chunk.times = [], [], [], []
        try:
            if self._main_dirty:  # the user's producer's earlier sends go first
                self._owner.native.flush()
                self._main_dirty = False
            if self._native is None:
                self._native = _Flushed(self, self._client.create_producer(
                    self._owner.segment, **self._kw))
            run = chunk.txn.run_for(self._owner.segment, self.writer_id, self._native)
            entries = run.per_entry
            if entries is None:
                entries = run.acknowledge_per_entry(self.max_n, self.max_b)
                self._runs = [*self._runs[-31:], run]
            if self._owner_run is not run:
                if self._dirty:
                    self._native.cut()  # another run's open batch is sent now
                entries.cut()
            self._owner_run, self._dirty = run, True
            run.send_many(values, keys if any(keys) else None, props if any(props) else None,
                          times if any(times) else None)
            # (a first append flushes inside send_many, and says the batch is empty: the
            # run's own messages after it are in the open batch again)
            self._owner_run, self._dirty = run, True
        except BaseException as e:
            chunk.txn.send_failed(e)
            raise

    def hand_over(self, txn_id: TxnId) -> None:
        """Before ``txn_id``'s runs are flushed (its commit): its last chunk goes."""
        with self._lock:
            chunk = self._chunks.pop(txn_id, None)
            if chunk is not None:
                self._hand_over(chunk)

    def _drain(self) -> None:
        """Hand over every open transaction's chunk (an ended one's is dropped), and
        wait for the per-entry producer's appends. A failure here belongs to those
        transactions (their commits raise), not to the send that asked for the order."""
        for txn_id, chunk in list(self._chunks.items()):
            del self._chunks[txn_id]
            if chunk.txn.state is TxnState.OPEN:
                try:
                    self._hand_over(chunk)
                except Exception as e:  # noqa: BLE001 - recorded on the txn (send_failed)
                    log.debug("handing over %s's sends failed: %s", txn_id, e)
        if self._dirty and self._native is not None:
            try:
                self._native.flush()
            except Exception as e:  # noqa: BLE001 - the runs' callbacks say what failed
                log.debug("flushing the per-entry producer of %s failed: %s",
                          self._owner.segment, e)

    def flushed(self) -> None:
        """The per-entry producer's open batch was sent (a flush, under the lock): the
        next hand-over starts a batch, whoever's it is."""
        self._owner_run, self._dirty = None, False

    def before_other_send(self) -> None:
        """A send on the user's producer comes after every send made here before it
        (not from a send's callback: that thread must never wait for a flush)."""
        if (self._chunks or self._dirty) and not _on_callback_thread():
            with self._lock:
                self._drain()

    def main_sent(self) -> None:
        self._main_dirty = True

    def flush(self) -> None:
        with self._lock:
            self._drain()

    def close(self) -> None:
        with self._lock:
            self._drain()
            if self._native is not None:
                self._native.close()


class _Flushed:
    """The per-entry producer as its runs see it: a flush (a run's commit, its first
    append) takes the hand-over lock, so it never cuts another run's hand-over half
    way, and leaves the open batch empty for whoever hands over next."""

    def __init__(self, sends: _EntrySends, native) -> None:
        self._sends, self.native = sends, native

    @property
    def _producer(self):
        """pulsar-client's native producer: send_columns builds messages natively."""
        return self.native._producer

    def send_async(self, value, callback, **kw) -> None:
        self.native.send_async(value, callback, **kw)

    def cut(self) -> None:
        """Send the open batch now, without waiting (the caller holds the lock)."""
        self._producer.flush_async(_ignore)

    def flush(self) -> None:
        with self._sends._lock:
            self.native.flush()
            self._sends.flushed()

    def close(self) -> None:
        self.native.close()


class _CommitFlush:
    """Registered with a transaction (``flush_before_commit``) once per producer."""

    def __init__(self, sends: _EntrySends, txn_id: TxnId) -> None:
        self._sends, self._txn_id = sends, txn_id

    def flush(self) -> None:
        self._sends.hand_over(self._txn_id)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _CommitFlush) and other._sends is self._sends
                and other._txn_id == self._txn_id)

    def __hash__(self) -> int:
        return hash((id(self._sends), self._txn_id))


_NOBODY = object()  # no send yet on the user's producer


def _ignore(*_args) -> None:
    pass


def user_props(properties: dict | None) -> dict:
    """A send's own properties as strings; the ``__ptxn.`` ones are the protocol's."""
    props = {str(k): str(v) for k, v in (properties or {}).items()}
    reserved = [k for k in props if k.startswith(PROTOCOL_PREFIX)]
    if reserved:
        raise ConfigError(f"message property {reserved[0]!r}: properties starting with "
                          f"{PROTOCOL_PREFIX!r} are reserved")
    return props


def check_send(value: object, key: object, event_time_ms: object, bytes_only: bool) -> None:
    """A send's arguments, checked before anything is sent or registered, so a refused
    send leaves its transaction able to commit. pulsar-client's own answers name its
    ``partition_key``/``event_timestamp`` or say ``Invalid record obj``. None is a
    value (a null value, as in pulsar-client); with a ``schema=`` the schema checks."""
    if bytes_only and value is not None and not isinstance(value, bytes):
        hint = " (encode it, e.g. value.encode(), or create the producer with " \
               "schema=pulsar.schema.StringSchema())" if isinstance(value, str) else ""
        raise ConfigError(f"send: 'value' must be bytes (the producer has no schema=), got "
                          f"{type(value).__name__}{hint}")
    if key is not None and not isinstance(key, str):
        raise ConfigError(f"send: 'key' must be a str or None, got {type(key).__name__}")
    if event_time_ms is not None and (isinstance(event_time_ms, bool)
                                      or not isinstance(event_time_ms, int)):
        raise ConfigError(f"send: 'event_time_ms' must be an int (ms since the epoch) or "
                          f"None, got {type(event_time_ms).__name__}")


@contextmanager
def send_errors_named(topic: str, value: object, service_url: str) -> Iterator[None]:
    """pulsar-client's ``MessageTooBig`` and ``Timeout`` name neither the topic nor the
    limit nor the address."""
    try:
        yield
    except pulsar.Timeout as e:
        at = f" at {redact_url(service_url)}" if service_url else ""
        raise BrokerUnavailable(
            f"send to {topic}: the Pulsar broker{at} (option "
            "'service.url') did not confirm it within the producer's send_timeout_millis "
            "(default 30000): check that the broker is up; under a transaction, it can no "
            "longer commit") from e
    except pulsar.MessageTooBig as e:
        size = f"{len(value)} bytes" if isinstance(value, bytes) else "its encoded value"
        raise ConfigError(
            f"send to {topic}: the message ({size}) is over the broker's maxMessageSize "
            "(a broker setting, 5242880 bytes = 5 MB by default): split it, or create the "
            "producer with chunking_enabled=True, batching_enabled=False") from e


def send_kw(key: str | None, event_time_ms: int | None) -> dict:
    """pulsar-client's keyword names for a send's key and event time."""
    kw: dict = {}
    if key is not None:
        kw["partition_key"] = key
    if event_time_ms is not None:
        kw["event_timestamp"] = int(event_time_ms)
    return kw
