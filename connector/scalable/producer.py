"""The routing producer of a scalable topic: each keyed message to the ACTIVE
segment covering its key's hash, re-routed in order across splits and merges."""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable

import pulsar

from pulsar_txn.errors import AppendFailed, LayoutContention, SegmentSealed, TxnNotOpen
from pulsar_txn.producer import check_send, send_errors_named, send_kw, user_props
from pulsar_txn.records import Segment, check_writer_id
from pulsar_txn.scalable.admin import ScalableTopics
from pulsar_txn.scalable.dag import Layout, key_hash
from pulsar_txn.topics import normalize_scalable
from pulsar_txn.transaction import Transaction
from pulsar_txn.writer import WriterRun

log = logging.getLogger(__name__)

class _SegmentProducer:
    """One segment's pulsar producer, shaped like the client Producer for WriterRun."""

    def __init__(self, owner: ScalableProducer, seg: Segment, kwargs: dict) -> None:
        self.segment = seg.backing
        self.segment_id = seg.id
        self.writer_id = owner.writer_id
        self.topics = owner.topics
        self._topic = owner.topic
        self.native = owner.pulsar.create_producer(seg.backing, **kwargs)
        self.inflight: deque[_Pending] = deque()

    def fence(self) -> None:
        self.topics.check_active(self._topic, self.segment_id)


class _Pending:
    __slots__ = ("value", "key", "props", "txn", "event_time_ms", "callback", "result", "mid")

    def __init__(self, value, key, props, txn, event_time_ms, callback) -> None:
        self.value, self.key, self.props = value, key, props
        self.txn, self.event_time_ms, self.callback = txn, event_time_ms, callback
        self.result = None
        self.mid = None


class ScalableProducer:
    """Routes each keyed message to the ACTIVE segment covering its key's hash.

    On a layout change it first drains its sends to the sealed segments, then
    re-sends, in their original order, the ones the fence refused, and only
    then sends anything to a child: a key's messages are never lost, duplicated
    or reordered by a split or merge. Unkeyed messages are spread round-robin.
    """

    def __init__(self, client: pulsar.Client, topics: ScalableTopics, name: str,
                 writer_id: str | None = None, service_url: str = "", **kwargs) -> None:
        """``topics``: the admin whose watched layouts this producer follows;
        ``service_url``: the client's, for errors (redacted)."""
        self.pulsar = client
        self.service_url = service_url
        self.topics = topics
        self.topic = normalize_scalable(name)
        # a writer id the protocol property cannot carry is refused here, not at a send
        self.writer_id = (check_writer_id(writer_id) if writer_id
                          else f"p{uuid.uuid4().hex[:16]}")
        self._kwargs = kwargs
        self._layout = topics.follow(self.topic)
        self._subs: dict[int, _SegmentProducer] = {}
        self._lock = threading.RLock()
        self._cond = threading.Condition(threading.Lock())
        self._refused = False
        self._spread = itertools.count()
        self.reroutes = 0

    @property
    def name(self) -> str:
        return self._layout.name

    @property
    def layout(self) -> Layout:
        """The layout this producer routes by (the newest it has seen)."""
        return self._layout

    def _route(self, key) -> Segment:
        if key is None:
            active = self._layout.active()
            return active[next(self._spread) % len(active)]
        return self._layout.route(key_hash(key, self._layout.hash_fn))

    def _sub(self, seg: Segment) -> _SegmentProducer:
        sub = self._subs.get(seg.id)
        if sub is None:
            sub = self._subs[seg.id] = _SegmentProducer(self, seg, self._kwargs)
        return sub

    # ---- layout changes ----
    def _current(self) -> Layout:
        return self.topics.layout(self.topic)

    def _reroute_if_changed(self) -> None:
        lay = self._current()
        if lay.epoch == self._layout.epoch and not self._refused:
            return
        if self._refused:
            # a refusal means a seal CAS already happened: a fresh read shows it (the
            # cache may be one change behind); clear the flag first, so a refusal that
            # lands while we drain triggers another round
            self._refused = False
            lay = self.topics.layout(self.topic, refresh=True)
        self._layout = lay
        retry: list[tuple[_SegmentProducer, _Pending]] = []
        sent = 0
        try:
            for sid in sorted(self._subs):
                seg = lay.segments.get(sid)
                if seg is not None and seg.active:
                    continue
                sub = self._subs.pop(sid)
                retry += [(sub, p) for p in self._drain(sub)]
            for _, p in retry:  # in original order, before anything newer is routed
                self.reroutes += 1
                mid = self._send_sync(p.value, p.key, p.props, p.txn, p.event_time_ms)
                sent += 1
                if p.callback:
                    p.callback(pulsar.Result.Ok, mid)
        except BaseException as e:
            self._owed(retry[sent:], e)
            raise

    def _owed(self, unsent: list[tuple[_SegmentProducer, _Pending]], e: BaseException) -> None:
        """Refused sends a failed re-route did not make: each one's transaction cannot
        commit (its run on the sealed segment took the refusal as resolved) and its
        callback hears of the failure. Other transactions may share this producer."""
        reason = f"a send refused by a seal was not re-sent: {e!r}"
        for sub, p in unsent:
            if p.txn is not None:
                try:
                    p.txn.run_for(sub.segment, sub.writer_id, sub.native,
                                  sub.fence).fail(reason)
                except TxnNotOpen:
                    pass  # it ended already: it cannot commit
            if p.callback:
                try:
                    p.callback(pulsar.Result.UnknownError, None)
                except Exception:  # noqa: BLE001 - the others must still hear of it
                    log.exception("a send callback failed")

    def _drain(self, sub: _SegmentProducer) -> list[_Pending]:
        """Wait for every send to a sealed segment; return the refused ones in order."""
        try:
            sub.native.flush()
        except Exception:  # TopicTerminated: the pending sends fail individually
            pass
        with self._cond:
            if not self._cond.wait_for(
                    lambda: all(p.result is not None for p in sub.inflight), 120):
                raise AppendFailed(f"{self.name}: sends to sealed segment {sub.segment_id} "
                                     "unresolved after 120 s; not re-routed")
            refused = [p for p in sub.inflight if p.result == pulsar.Result.TopicTerminated]
            sub.inflight.clear()
        try:
            sub.native.close()
        except Exception:
            pass
        return refused

    # ---- sends ----
    @staticmethod
    def _run(txn: Transaction, sub: _SegmentProducer) -> WriterRun:
        return txn.run_for(sub.segment, sub.writer_id, sub.native, sub.fence)

    def _send_sync(self, value: bytes, key, props: dict, txn, event_time_ms):
        kw = send_kw(key, event_time_ms)
        for _ in range(100):
            self._reroute_if_changed()
            try:
                sub = self._sub(self._route(key))
                if txn is None:
                    return sub.native.send(value, properties=props, **kw)
                return self._run(txn, sub).send(value, props, **kw)
            except (SegmentSealed, pulsar.TopicTerminated):
                # the seal CAS precedes every refusal: a fresh read shows the new layout
                self._refused = True
        raise LayoutContention(f"{self.name}: could not route a message after 100 layout "
                               "changes")

    def send(self, value: bytes, key: str | None = None, properties: dict | None = None,
             txn=None, event_time_ms: int | None = None):
        check_send(value, key, event_time_ms, self._kwargs.get("schema") is None)
        with send_errors_named(f"topic://{self.topic}", value, self.service_url):
            try:
                props = user_props(properties)
                with self._lock:
                    return self._send_sync(value, key, props, txn, event_time_ms)
            except BaseException as e:
                if txn is not None:
                    txn.send_failed(e)  # the transaction cannot commit (send_failed)
                raise

    def send_async(self, value: bytes, callback: Callable | None = None, key: str | None = None,
                   properties: dict | None = None, txn=None,
                   event_time_ms: int | None = None) -> None:
        check_send(value, key, event_time_ms, self._kwargs.get("schema") is None)
        try:
            self._send_async(value, callback, key, properties, txn, event_time_ms)
        except BaseException as e:
            if txn is not None:
                txn.send_failed(e)
            raise

    def _send_async(self, value: bytes, callback: Callable | None, key: str | None,
                    properties: dict | None, txn, event_time_ms: int | None) -> None:
        props = user_props(properties)
        with self._lock:
            self._reroute_if_changed()
            if txn is not None:
                txn.flush_before_commit(self)  # refused sends are re-sent before the commit CAS
            pending = _Pending(value, key, props, txn, event_time_ms, callback)
            for _ in range(100):
                try:
                    sub = self._sub(self._route(key))
                except pulsar.TopicTerminated:  # the segment's producer cannot even open
                    self._refused = True
                    self._reroute_if_changed()
                    continue
                if txn is not None and not txn.has_appended(sub.segment, sub.writer_id):
                    # the first append of a run is synchronous (it pins the gate)
                    mid = self._send_sync(value, key, props, txn, event_time_ms)
                    if callback:
                        callback(pulsar.Result.Ok, mid)
                    return
                with self._cond:  # forget completed sends (kept only until resolved)
                    q = sub.inflight
                    while q and q[0].result is not None and \
                            q[0].result != pulsar.Result.TopicTerminated:
                        q.popleft()
                    q.append(pending)
                done = self._completion(pending)
                kw = send_kw(key, event_time_ms)
                try:
                    if txn is None:
                        sub.native.send_async(value, done, properties=props, **kw)
                    else:
                        self._run(txn, sub).send_async(value, done, props, **kw)
                    return
                except (SegmentSealed, pulsar.TopicTerminated):
                    self._forget(sub, pending)
                    self._refused = True
                    self._reroute_if_changed()
                except BaseException:
                    self._forget(sub, pending)  # never left unresolved: flush would hang
                    raise
            raise LayoutContention(f"{self.name}: could not route a message")

    def _forget(self, sub: _SegmentProducer, pending: _Pending) -> None:
        with self._cond:
            if pending in sub.inflight:
                sub.inflight.remove(pending)

    def _completion(self, pending: _Pending):
        def done(res, mid) -> None:
            with self._cond:
                pending.result, pending.mid = res, mid
                if res == pulsar.Result.TopicTerminated:
                    self._refused = True
                self._cond.notify_all()
            if res != pulsar.Result.TopicTerminated and pending.callback:
                pending.callback(res, mid)

        return done

    def flush(self) -> None:
        """Wait for every send; re-route the ones a seal refused (in order)."""
        with self._lock:
            for sub in list(self._subs.values()):
                try:
                    sub.native.flush()
                except Exception:
                    pass
            with self._cond:
                for sub in self._subs.values():
                    if not self._cond.wait_for(
                            lambda s=sub: all(p.result is not None for p in s.inflight), 120):
                        raise AppendFailed(f"{self.name}: sends to segment "
                                             f"{sub.segment_id} unresolved after 120 s")
                    while sub.inflight and sub.inflight[0].result is not None and \
                            sub.inflight[0].result != pulsar.Result.TopicTerminated:
                        sub.inflight.popleft()
            if self._refused:
                self._reroute_if_changed()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            for sub in self._subs.values():
                try:
                    sub.native.close()
                except Exception:  # a terminated segment's producer is closed already
                    pass
            self._subs.clear()
