"""Scalable topics on ordinary Pulsar topics: DAG admin, routing producer, DAG-order reader.

The DAG lives in the metastore (one slot per topic, see ``metastore/keys.py``);
each segment is a ``persistent://`` topic. A split or merge is one CAS that
seals the parents and creates the children. Sealing is then made final on the
data side:

1. the CAS: from here on a transactional write registration on a parent fails
   its ACTIVE check, and every producer watching the topic re-routes;
2. terminate the parents' backing topics where the broker has an admin API (the
   reference broker, testcontainers): an append by any producer that still holds
   the old layout fails with TopicTerminated and that producer re-routes;
3. fix each parent's last entry (``end``) once, in the metastore. Readers read a
   parent up to its end and only then its children: for any key, every entry
   of a parent comes before every entry of a child.

pulsar-lite cannot terminate topics: step 2 becomes a grace period
(``seal_grace_ms``) for watching producers to drain, then ``end`` is the last
entry the broker reports. A producer in another process that misses the layout
event for longer than the grace could still append after the end; those entries
are never delivered. Use a broker with termination for such deployments.

Transactions need nothing special: a segment is a segment. Commit writes to no
segment (one CAS), so a transaction whose segment was sealed before it ends
commits or aborts exactly as on an active one.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable

import pulsar

from pulsar_txn.admin import AdminAuth, AdminError, admin_terminate, native_scalable_topic
from pulsar_txn.dag import (
    DEFAULT_HASH,
    Layout,
    Segment,
    initial_segments,
    key_hash,
    normalize_scalable,
    plan_merge,
    plan_split,
)
from pulsar_txn.errors import (
    ConfigError,
    PulsarTxnError,
    ReadTimeout,
    SegmentSealed,
    TopicNotFound,
)
from pulsar_txn.metastore.base import LayoutVerdict, MetadataStore
from pulsar_txn.records import BEFORE_EARLIEST, Position
from pulsar_txn.topics import WHOLE_ENTRY, ProbeFailed, last_entry, last_entry_strict, scan

log = logging.getLogger(__name__)


def read_layout(store: MetadataStore, topic: str) -> Layout | None:
    """One consistent read of a topic's DAG (None: no such scalable topic)."""
    raw = store.get_layout(normalize_scalable(topic))
    if raw is None:
        return None
    epoch, _next, segs, version, hash_fn = raw
    return Layout(normalize_scalable(topic), epoch,
                  {i: Segment.from_json(v) for i, v in segs.items()}, version, hash_fn)


class ScalableTopics:
    """Admin operations and a watched layout cache for the scalable topics of one client."""

    def __init__(self, store: MetadataStore, client: pulsar.Client, admin_url: str | None = None,
                 seal_grace_ms: int = 300, admin_auth: AdminAuth | None = None) -> None:
        self.store = store
        self.pulsar = client
        self.admin_url = admin_url
        self.admin_auth = admin_auth
        self.seal_grace_ms = seal_grace_ms
        self._layouts: dict[str, Layout] = {}
        self._cond = threading.Condition()
        self._followed: set[str] = set()
        self._watch = None
        self._not_native: dict[str, float] = {}  # topic -> until when "not native" holds

    # ---- layout cache (kept current by the topic watch) ----
    def _read(self, topic: str) -> Layout:
        lay = read_layout(self.store, topic)
        if lay is None:
            self._refuse_native(topic)
            raise TopicNotFound(
                f"topic://{topic} is not a pulsar-txn scalable topic: no layout for it in "
                f"metastore namespace {self.store.keys.ns!r}. pulsar-txn reads and writes "
                "its own topic:// topics (create one: pulsar-txn topic create, or "
                "client.scalable.create) and plain persistent:// topics; Apache Pulsar "
                "5.0's native scalable topics are served by its Java v5 client and are "
                "not supported here")
        return lay

    def layout(self, name: str, refresh: bool = False) -> Layout:
        topic = normalize_scalable(name)
        with self._cond:
            cached = self._layouts.get(topic)
        if cached is not None and not refresh:
            return cached
        fresh = self._read(topic)
        self._store_layout(fresh)
        return self._layouts[topic]

    def _store_layout(self, lay: Layout) -> None:
        with self._cond:
            old = self._layouts.get(lay.topic)
            # reads can race (an event's reload vs a refresh): keep the newer version
            if old is None or lay.version >= old.version:
                self._layouts[lay.topic] = lay
            self._cond.notify_all()

    def follow(self, name: str) -> Layout:
        """Keep ``name``'s layout current by watching its events (push, not poll)."""
        topic = normalize_scalable(name)
        with self._cond:
            self._followed.add(topic)
            if self._watch is None:
                self._watch = self.store.watch_topics(self._watched, self._on_event)
        return self.layout(topic, refresh=True)

    def _watched(self) -> list[str]:
        with self._cond:
            return list(self._followed)

    def _on_event(self, topic: str | None) -> None:
        for t in ([topic] if topic else self._watched()):
            try:
                self._store_layout(self._read(t))
            except PulsarTxnError as e:
                log.warning("reloading the layout of %s failed: %s", t, e)

    def wait_for_change(self, name: str, seen_epoch: int, timeout: float) -> Layout:
        topic = normalize_scalable(name)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                lay = self._layouts.get(topic)
                left = deadline - time.monotonic()
                if (lay is not None and lay.epoch != seen_epoch) or left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
        return self.layout(topic, refresh=lay is None or lay.epoch == seen_epoch)

    def check_active(self, topic: str, segment_id: int) -> None:
        """The write fence: a fresh read, after the write registration (never cached)."""
        raw = self.store.get_segment(topic, segment_id)
        if raw is None or not Segment.from_json(raw).active:
            raise SegmentSealed(f"segment {segment_id} of topic://{topic} is sealed")

    # ---- admin ----
    def create(self, name: str, segments: int = 1, hash_fn: str | None = None) -> Layout:
        """``hash_fn``: how keys map to segments, recorded with the layout: 'murmur3'
        (upstream Pulsar's v5 rule, the default), 'murmur3-low16' (upstream's earlier
        spec) or 'crc32' (this project's before)."""
        topic = normalize_scalable(name)
        key_hash("", hash_fn or DEFAULT_HASH)  # an unknown function: refused up front
        if self.store.get_layout(topic) is None:
            self._refuse_native(topic)  # never shadow the broker's own topic
        segs = initial_segments(topic, segments)
        for s in segs:
            self._touch(s.backing)
        if not self.store.create_topic(topic, [s.to_json() for s in segs], len(segs),
                                       hash_fn or DEFAULT_HASH):
            existing = self._read(topic)
            if len(existing.segments) != segments or existing.epoch != 1:
                raise ConfigError(f"topic://{topic} exists already with another layout")
            if hash_fn is not None and existing.hash_fn != hash_fn:  # asked explicitly
                raise ConfigError(f"topic://{topic} exists already, routing keys by "
                                  f"{existing.hash_fn!r}, not {hash_fn!r}; keys never move: "
                                  "create a new topic to change it")
        return self.layout(topic, refresh=True)

    def _refuse_native(self, topic: str) -> None:
        """Apache Pulsar 5.0 has native topic:// topics, served by its Java v5 client
        only; one of those must be named as such, not as a missing pulsar-txn topic.
        A negative answer is remembered for a minute (a watch event for a topic being
        created must not wait on the admin API each time)."""
        if not self.admin_url:
            return
        now = time.monotonic()
        if self._not_native.get(topic, 0.0) > now:
            return
        native = native_scalable_topic(self.admin_url, topic, self.admin_auth)
        if native is None:
            log.warning("topic://%s: the broker's admin API did not say whether it has a "
                        "native scalable topic of that name", topic)
        if not native:
            self._not_native[topic] = now + 60.0
        if native:
            raise TopicNotFound(
                f"topic://{topic} is a native scalable topic of Apache Pulsar 5 (the broker "
                "serves it itself), not a pulsar-txn topic: pulsar-txn neither reads, writes "
                "nor shadows it. Use Apache Pulsar's Java v5 client for it (pulsar-client "
                "3.x for Python has no topic:// names). pulsar-txn serves its own topic:// "
                "topics, created under another name, and persistent:// topics")

    def split(self, name: str, segment_id: int, at: int | None = None) -> Layout:
        return self._change(name, lambda lay, nxt: plan_split(lay, segment_id, nxt, at))

    def merge(self, name: str, a: int, b: int) -> Layout:
        return self._change(name, lambda lay, nxt: plan_merge(lay, a, b, nxt))

    def _check_admin(self) -> None:
        """Before sealing anything: a broker whose admin API refuses our credentials
        could never fence the sealed segment, which would then wait for its end
        forever."""
        if not self.admin_url:
            return
        from pulsar_txn.admin import AdminError, admin_request

        try:
            admin_request(self.admin_url, "GET", "/admin/v2/clusters", auth=self.admin_auth)
        except AdminError as e:
            if e.status in (401, 403):
                raise ConfigError(
                    f"the broker's admin API refused this client (HTTP {e.status}); pass its "
                    "credentials (admin_token=, or the token authentication options); "
                    "nothing was sealed") from None

    def _change(self, name: str, plan: Callable) -> Layout:
        topic = normalize_scalable(name)
        self._check_admin()
        for _ in range(10):
            raw = self.store.get_layout(topic)
            if raw is None:
                raise TopicNotFound(f"scalable topic topic://{topic} does not exist")
            lay = self._read(topic)
            parents, kids = plan(lay, raw[1])
            for k in kids:  # exist before anyone routes there (and can be terminated later)
                self._touch(k.backing)
            change = self.store.change_layout(
                topic, lay.epoch, parents, [k.to_json() for k in kids], raw[1] + len(kids))
            if change.verdict is LayoutVerdict.APPLIED:
                break
            if change.verdict is LayoutVerdict.NOT_ACTIVE:
                raise ConfigError(f"segment {change.value} of topic://{topic} is not ACTIVE")
            if change.verdict is LayoutVerdict.NOT_FOUND:
                raise TopicNotFound(f"scalable topic topic://{topic} does not exist")
            # STALE: another admin changed the layout first; plan again on the new one
        else:
            raise PulsarTxnError(f"topic://{topic}: the layout kept changing; try again")
        return self.complete_seals(topic)

    def complete_seals(self, name: str, wait: bool = True) -> Layout:
        """Fence and fix the end of every sealed segment that has none (idempotent).

        With an admin URL the backing topic is terminated: no append can follow,
        so its last entry is the end at once. Without one (pulsar-lite) the end is
        fixed only when no open transaction still has a write on the segment (a run
        registered before the seal may append until its transaction ends, and those
        entries must lie inside the end) and the grace period after the seal passed
        (watching producers moved away). ``wait=False`` skips what is not ready yet.
        Runs after each change, and from readers and the Spark source that find a
        sealed segment without an end (an admin that crashed mid-seal is finished).
        """
        topic = normalize_scalable(name)
        lay = self._read(topic)
        todo = [s for s in lay.segments.values() if not s.active and s.end is None]
        for s in todo:
            try:
                if self.admin_url:
                    end = self._terminate(s.backing)
                else:
                    if self.store.open_writes(s.backing):
                        continue  # a transaction that wrote here is still open
                    left = (s.sealed_ms or 0) + self.seal_grace_ms - self.store.server_time_ms()
                    if left > 0:
                        if not wait:
                            continue
                        time.sleep(left / 1000)
                    end = last_entry_strict(self.pulsar, s.backing)
            except ProbeFailed as e:
                if wait:
                    raise
                log.warning("the end of segment %d of topic://%s is not known yet (tried "
                            "again later, never guessed): %s", s.id, topic, e)
                continue
            self.store.seal_end(topic, s.id, "-" if end is None else f"{end[0]}:{end[1]}")
        return self.layout(topic, refresh=True) if todo else lay

    def _terminate(self, backing: str) -> tuple[int, int] | None:
        try:
            ledger, entry = admin_terminate(self.admin_url, backing, self.admin_auth)
        except AdminError as e:
            if e.status != 404:
                raise
            return self._last_of_terminated(backing)
        if entry < 0:  # an empty current ledger after a rollover: ask for the real last
            return self._last_of_terminated(backing)
        return ledger, entry

    def _last_of_terminated(self, backing: str) -> tuple[int, int] | None:
        """A terminated topic's last entry never changes, so an unanswered probe is
        asked again (a consumer racing the termination's reconnect gets NotConnected,
        seen on 5.0.0-M1) before the seal is left for a later pass."""
        import pulsar

        for delay in (0.2, 0.5):
            try:
                return last_entry_strict(self.pulsar, backing)
            except ProbeFailed as e:
                # only a dropped connection is asked again at once; a timeout already
                # took the client's operation timeout, and the seal is retried later
                if not isinstance(e.__cause__, (pulsar.NotConnected, pulsar.AlreadyClosed,
                                                pulsar.ConnectError)):
                    raise
                time.sleep(delay)
        return last_entry_strict(self.pulsar, backing)

    def _touch(self, backing: str) -> None:
        self.pulsar.create_producer(backing).close()

    def describe(self, name: str, count_entries: bool = True) -> dict:
        lay = self.layout(name, refresh=True)
        rows = []
        for s in lay.read_order():
            row = {"id": s.id, "range": f"{s.lo:#06x}-{s.hi:#06x}", "state": s.state,
                   "parents": list(s.parents), "children": list(s.children),
                   "backing": s.backing,
                   "end": None if s.end is None else ("empty" if s.end == BEFORE_EARLIEST
                                                      else str(s.end))}
            if count_entries:
                row["entries"] = count_backing_entries(self.pulsar, s.backing)
            rows.append(row)
        return {"topic": lay.name, "epoch": lay.epoch, "hash": lay.hash_fn, "segments": rows}

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None


def count_backing_entries(client: pulsar.Client, backing: str) -> int:
    """Messages stored in a backing topic (a scan: for describe, not for hot paths)."""
    last = last_entry(client, backing)
    if last is None:
        return 0
    return sum(1 for _ in scan(client, backing, (-1, -1, -1), (*last, WHOLE_ENTRY),
                               timeout_ms=2_000, fail_on_data_loss=False))


class _SegmentProducer:
    """One segment's pulsar producer, shaped like the client Producer for WriterRun."""

    def __init__(self, owner: ScalableProducer, seg: Segment, kwargs: dict) -> None:
        self.segment = seg.backing
        self.segment_id = seg.id
        self.writer_id = owner.writer_id
        self._topics = owner._topics
        self._topic = owner.topic
        self._p = owner._client.pulsar.create_producer(seg.backing, **kwargs)
        self.inflight: deque[_Pending] = deque()

    def fence(self) -> None:
        self._topics.check_active(self._topic, self.segment_id)


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

    def __init__(self, client, name: str, writer_id: str | None = None, **kwargs) -> None:
        from pulsar_txn.client import _send_kw, _user_props

        self._client = client
        self._topics: ScalableTopics = client.scalable
        self.topic = normalize_scalable(name)
        self.writer_id = writer_id or f"p{uuid.uuid4().hex[:16]}"
        self._kwargs = kwargs
        self._send_kw, self._user_props = _send_kw, _user_props
        self._layout = self._topics.follow(self.topic)
        self._subs: dict[int, _SegmentProducer] = {}
        self._lock = threading.RLock()
        self._cond = threading.Condition(threading.Lock())
        self._refused = False
        self._spread = itertools.count()
        self.reroutes = 0

    @property
    def name(self) -> str:
        return self._layout.name

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
        return self._topics.layout(self.topic)

    def _reroute_if_changed(self) -> None:
        lay = self._current()
        if lay.epoch == self._layout.epoch and not self._refused:
            return
        if self._refused:
            # a refusal means a seal CAS already happened: a fresh read shows it (the
            # cache may be one change behind); clear the flag first, so a refusal that
            # lands while we drain triggers another round
            self._refused = False
            lay = self._topics.layout(self.topic, refresh=True)
        self._layout = lay
        retry: list[_Pending] = []
        for sid in sorted(self._subs):
            seg = lay.segments.get(sid)
            if seg is not None and seg.active:
                continue
            sub = self._subs.pop(sid)
            retry += self._drain(sub)
        for p in retry:  # in original order, before anything newer is routed
            self.reroutes += 1
            mid = self._send_sync(p.value, p.key, p.props, p.txn, p.event_time_ms)
            if p.callback:
                p.callback(pulsar.Result.Ok, mid)

    def _drain(self, sub: _SegmentProducer) -> list[_Pending]:
        """Wait for every send to a sealed segment; return the refused ones in order."""
        try:
            sub._p.flush()
        except Exception:  # TopicTerminated: the pending sends fail individually
            pass
        with self._cond:
            if not self._cond.wait_for(
                    lambda: all(p.result is not None for p in sub.inflight), 120):
                raise PulsarTxnError(f"{self.name}: sends to sealed segment {sub.segment_id} "
                                     "unresolved after 120 s; not re-routed")
            refused = [p for p in sub.inflight if p.result == pulsar.Result.TopicTerminated]
            sub.inflight.clear()
        try:
            sub._p.close()
        except Exception:
            pass
        return refused

    # ---- sends ----
    def _send_sync(self, value: bytes, key, props: dict, txn, event_time_ms):
        kw = self._send_kw(key, event_time_ms)
        for _ in range(100):
            self._reroute_if_changed()
            try:
                sub = self._sub(self._route(key))
                if txn is None:
                    return sub._p.send(value, properties=props, **kw)
                return txn._run(sub).send(value, props, **kw)
            except (SegmentSealed, pulsar.TopicTerminated):
                # the seal CAS precedes every refusal: a fresh read shows the new layout
                self._refused = True
        raise PulsarTxnError(f"{self.name}: could not route a message after 100 layout changes")

    def send(self, value: bytes, key: str | None = None, properties: dict | None = None,
             txn=None, event_time_ms: int | None = None):
        props = self._user_props(properties)
        with self._lock:
            return self._send_sync(value, key, props, txn, event_time_ms)

    def send_async(self, value: bytes, callback: Callable | None = None, key: str | None = None,
                   properties: dict | None = None, txn=None,
                   event_time_ms: int | None = None) -> None:
        props = self._user_props(properties)
        with self._lock:
            self._reroute_if_changed()
            if txn is not None:
                txn._add_flusher(self)  # refused sends are re-sent before the commit CAS
            pending = _Pending(value, key, props, txn, event_time_ms, callback)
            for _ in range(100):
                try:
                    sub = self._sub(self._route(key))
                except pulsar.TopicTerminated:  # the segment's producer cannot even open
                    self._refused = True
                    self._reroute_if_changed()
                    continue
                if txn is not None and not txn._has_first(sub):
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
                kw = self._send_kw(key, event_time_ms)
                try:
                    if txn is None:
                        sub._p.send_async(value, done, properties=props, **kw)
                    else:
                        txn._run(sub).send_async(value, props, done, **kw)
                    return
                except (SegmentSealed, pulsar.TopicTerminated):
                    self._forget(sub, pending)
                    self._refused = True
                    self._reroute_if_changed()
                except BaseException:
                    self._forget(sub, pending)  # never left unresolved: flush would hang
                    raise
            raise PulsarTxnError(f"{self.name}: could not route a message")

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
                    sub._p.flush()
                except Exception:
                    pass
            with self._cond:
                for sub in self._subs.values():
                    if not self._cond.wait_for(
                            lambda s=sub: all(p.result is not None for p in s.inflight), 120):
                        raise PulsarTxnError(f"{self.name}: sends to segment "
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
                    sub._p.close()
                except Exception:  # a terminated segment's producer is closed already
                    pass
            self._subs.clear()


class ScalableReader:
    """READ_COMMITTED reader of a scalable topic, in the DAG's happens-before order.

    A segment is read only once all its parents were read to their end, so for
    any key every entry of a parent comes before every entry of a child. Within
    the readable segments, messages are taken round-robin.
    """

    def __init__(self, client, name: str, start: str = "earliest", poll_ms: int = 50,
                 **kwargs) -> None:
        if start not in ("earliest", "latest"):
            raise ConfigError(f"start must be 'earliest' or 'latest' for a scalable topic, "
                              f"got {start!r}")
        self._client = client
        self._topics: ScalableTopics = client.scalable
        self.topic = normalize_scalable(name)
        self._kwargs = kwargs
        self._poll_ms = poll_ms
        self._layout = self._topics.follow(self.topic)
        self._readers: dict[int, object] = {}
        self._done: set[int] = set()
        self._turn = 0
        self._completing = 0.0  # last time this reader tried to finish a seal
        self._admitted: tuple[int, int] | None = None  # (layout version, segments done)
        self._starts: dict[int, Position] = {}  # a 'latest' reader's start: read up to here
        if start == "latest":
            for s in self._layout.segments.values():
                if not s.active:
                    self._done.add(s.id)
            for s in self._layout.active():
                self._readers[s.id] = self._reader_after_last(s)

    @property
    def name(self) -> str:
        return self._layout.name

    def _reader_after_last(self, seg: Segment):
        """A 'latest' reader that starts after the entry the broker reports last now.

        Its start is an explicit position, so once the segment is sealed the reader
        knows whether it is past the end even if it never receives anything (a
        native 'latest' start is not a position it could compare). An unknown last
        entry raises: 'latest' never silently becomes 'earliest'.
        """
        last = last_entry_strict(self._client.pulsar, seg.backing)
        if last is None:
            return self._client.create_reader(seg.backing, "earliest", **self._kwargs)
        self._starts[seg.id] = Position(*last)
        return self._client.create_reader(seg.backing, self._starts[seg.id], **self._kwargs)

    def _admit(self) -> None:
        self._layout = self._topics.layout(self.topic)
        state = (self._layout.version, len(self._done))
        if state == self._admitted:
            return  # nothing changed since the last look: no DAG walk per message
        self._admitted = state
        for s in self._layout.read_order():
            if s.id in self._done or s.id in self._readers:
                continue
            if not all(p in self._done for p in s.parents):
                continue
            if s.end == BEFORE_EARLIEST:
                self._done.add(s.id)
                continue
            self._readers[s.id] = self._client.create_reader(s.backing, "earliest",
                                                            **self._kwargs)

    def _exhausted(self, sid: int, reader) -> bool:
        """Sealed, its end fixed, and the reader holds nothing and is at or past the end.

        "Past" counts the reader's start, not only what it received: a reader of an
        empty segment, or one started after the end, receives nothing and is done all
        the same (else the segment's children would never be read).
        """
        seg = self._layout.segments[sid]
        if seg.active:
            return False
        if seg.end is None:  # sealed, end not fixed yet: finish the seal if it is ready
            if time.monotonic() - self._completing > 1.0:
                self._completing = time.monotonic()
                try:
                    self._layout = self._topics.complete_seals(self.topic, wait=False)
                except PulsarTxnError as e:  # tried again in a second; never guessed
                    log.warning("completing the seals of %s failed: %s", self.topic, e)
            return False
        at = max(reader._received_entry(), self._starts.get(sid, BEFORE_EARLIEST))
        return not reader._buf and at >= seg.end.entry_position

    def read_next(self, timeout_millis: int | None = None):
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        while True:
            self._admit()
            ids = sorted(self._readers)
            for i in range(len(ids)):
                sid = ids[(self._turn + i) % len(ids)]
                reader = self._readers[sid]
                try:  # a short broker wait per segment (read_next(0) would not pull)
                    msg = reader.read_next(max(2, self._poll_ms // len(ids)))
                except ReadTimeout:
                    if self._exhausted(sid, reader):
                        reader.close()
                        del self._readers[sid]
                        self._done.add(sid)
                    continue
                end = self._layout.segments[sid].end
                if end is not None and end != BEFORE_EARLIEST and \
                        (msg.position.ledger, msg.position.entry) > (end.ledger, end.entry):
                    # past a sealed segment's end (a stale plain producer on a broker
                    # without termination): never delivered, and the segment is done
                    reader.close()
                    del self._readers[sid]
                    self._done.add(sid)
                    continue
                self._turn = (self._turn + i + 1) % max(1, len(ids))
                return msg
            if deadline is not None and time.monotonic() >= deadline:
                raise ReadTimeout(f"{self.name}: no committed message in time")
            if not ids:  # nothing readable yet: wait for a layout change (an end fixed)
                self._topics.wait_for_change(self.topic, self._layout.epoch,
                                             self._poll_ms / 1000)

    def read_batch(self, max_messages: int, timeout_millis: int = 100) -> list:
        out = []
        try:
            out.append(self.read_next(timeout_millis))
            while len(out) < max_messages:
                out.append(self.read_next(0))
        except ReadTimeout:
            pass
        return out

    def close(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()
