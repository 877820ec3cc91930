"""Scalable topics: the DAG admin (create, split, merge, seal) and the watched layout cache.

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

import logging
import threading
import time
from collections.abc import Callable

import pulsar

from pulsar_txn.admin import (
    AdminAuth,
    AdminError,
    admin_request,
    admin_terminate,
    native_scalable_topic,
)
from pulsar_txn.broker_io import ProbeFailed, last_entry_strict, scan
from pulsar_txn.errors import (
    BrokerUnavailable,
    ConfigError,
    DataLoss,
    LayoutContention,
    PulsarTxnError,
    SegmentSealed,
    TopicNotFound,
)
from pulsar_txn.metastore.base import LayoutVerdict, MetadataStore
from pulsar_txn.metastore.redis_url import redact_url
from pulsar_txn.records import BEFORE_EARLIEST, WHOLE_ENTRY, Position
from pulsar_txn.scalable.dag import (
    DEFAULT_HASH,
    Layout,
    initial_segments,
    key_hash,
    plan_merge,
    plan_split,
)
from pulsar_txn.topics import normalize_scalable

log = logging.getLogger(__name__)


def read_layout(store: MetadataStore, topic: str) -> Layout | None:
    """One consistent read of a topic's DAG (None: no such scalable topic)."""
    raw = store.get_layout(normalize_scalable(topic))
    if raw is None:
        return None
    return Layout(normalize_scalable(topic), raw.epoch, raw.segments, raw.version, raw.hash_fn)


class ScalableTopics:
    """Admin operations and a watched layout cache for the scalable topics of one client."""

    def __init__(self, store: MetadataStore, client: pulsar.Client, admin_url: str | None = None,
                 seal_grace_ms: int = 300, admin_auth: AdminAuth | None = None,
                 admin_option: str = "admin_url") -> None:
        """``admin_option``: how the caller's user names the admin URL in errors
        (``admin_url`` of the client, ``--admin-url`` of the CLI)."""
        self.store = store
        self.pulsar = client
        self.admin_url = admin_url
        self.admin_option = admin_option
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
                f"metastore namespace {self.store.namespace!r}. pulsar-txn reads and writes "
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
        seg = self.store.get_segment(topic, segment_id)
        if seg is None or not seg.active:
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
        if not self.store.create_topic(topic, segs, len(segs),
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
        """Before sealing anything: a broker whose admin API refuses our credentials,
        or does not answer at all, could never fence the sealed segment, which would
        then wait for its end forever."""
        if not self.admin_url:
            return
        try:
            admin_request(self.admin_url, "GET", "/admin/v2/clusters", timeout=10.0,
                          auth=self.admin_auth)
        except AdminError as e:
            if e.status in (401, 403):
                raise ConfigError(
                    f"the broker's admin API refused this client (HTTP {e.status}); pass its "
                    "credentials (admin_token=, or the token authentication options); "
                    "nothing was sealed") from None
            if e.status is None:  # no HTTP answer: refused, unresolvable, timed out
                reason = str(e).rpartition(": ")[2]
                raise BrokerUnavailable(
                    f"the broker's admin API at {redact_url(self.admin_url)} (option "
                    f"'{self.admin_option}') did not answer: {reason}; nothing was sealed or "
                    "changed. Check the address and that the broker is up, or leave the "
                    "option out on a broker without an admin API (pulsar-lite)") from None

    def _change(self, name: str, plan: Callable) -> Layout:
        topic = normalize_scalable(name)
        self._check_admin()
        for _ in range(10):
            raw = self.store.get_layout(topic)
            if raw is None:
                raise TopicNotFound(f"scalable topic topic://{topic} does not exist")
            lay = self._read(topic)
            parents, kids = plan(lay, raw.next_id)
            for k in kids:  # exist before anyone routes there (and can be terminated later)
                self._touch(k.backing)
            change = self.store.change_layout(
                topic, lay.epoch, parents, kids, raw.next_id + len(kids))
            if change.verdict is LayoutVerdict.APPLIED:
                break
            if change.verdict is LayoutVerdict.NOT_ACTIVE:
                raise ConfigError(f"segment {change.value} of topic://{topic} is not ACTIVE")
            if change.verdict is LayoutVerdict.NOT_FOUND:
                raise TopicNotFound(f"scalable topic topic://{topic} does not exist")
            # STALE: another admin changed the layout first; plan again on the new one
        else:
            raise LayoutContention(f"topic://{topic}: the layout kept changing; try again")
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
            self.store.seal_end(topic, s.id, BEFORE_EARLIEST if end is None else end)
        return self.layout(topic, refresh=True) if todo else lay

    def _terminate(self, backing: str) -> Position | None:
        try:
            last = admin_terminate(self.admin_url, backing, self.admin_auth)
        except AdminError as e:
            if e.status != 404:
                raise
            return self._last_of_terminated(backing)
        if last.entry < 0:  # an empty current ledger after a rollover: ask for the real last
            return self._last_of_terminated(backing)
        return last

    def _last_of_terminated(self, backing: str) -> Position | None:
        """A terminated topic's last entry never changes, so an unanswered probe is
        asked again (a consumer racing the termination's reconnect gets NotConnected,
        seen on 5.0.0-M1) before the seal is left for a later pass."""
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

    def describe(self, name: str, count_entries: bool = True,
                 progress: Callable[[str], None] | None = None) -> dict:
        """The layout, and per segment the entries its backing topic holds. A count the
        broker did not answer is ``None`` with the reason in ``entries_unknown``, never
        0; after one such failure the later segments are not asked (each ask would wait
        out the client's operation timeout again). ``progress``: told what is being
        counted, for a terminal."""
        lay = self.layout(name, refresh=True)
        rows = []
        for s in lay.read_order():
            rows.append({"id": s.id, "range": f"{s.lo:#06x}-{s.hi:#06x}",
                         "state": s.state.value, "parents": list(s.parents),
                         "children": list(s.children), "backing": s.backing,
                         "end": None if s.end is None else (
                             "empty" if s.end == BEFORE_EARLIEST else str(s.end))})
        if count_entries:
            self._count_entries(rows, progress)
        return {"topic": lay.name, "epoch": lay.epoch, "hash": lay.hash_fn, "segments": rows}

    def _count_entries(self, rows: list[dict], progress: Callable[[str], None] | None) -> None:
        failed = None
        for i, row in enumerate(rows, 1):
            if failed is not None:
                row["entries"] = None
                row["entries_unknown"] = f"not asked: {failed}"
                continue
            what = f"counting entries of segment {row['id']} ({i}/{len(rows)})"

            def counted(n: int, what: str = what) -> None:
                if progress is not None:
                    progress(f"{what}: {n:,}")

            counted(0)
            try:
                row["entries"] = count_backing_entries(self.pulsar, row["backing"], counted)
            except (ProbeFailed, BrokerUnavailable, DataLoss) as e:
                row["entries"], row["entries_unknown"] = None, str(e)
                failed = f"the broker did not answer for segment {row['id']}"

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None


def count_backing_entries(client: pulsar.Client, backing: str,
                          on_count: Callable[[int], None] | None = None) -> int:
    """Messages stored in a backing topic (a scan: for describe, not for hot paths).
    A broker that does not answer raises (:class:`ProbeFailed`,
    :class:`BrokerUnavailable`): an unanswered probe is never "empty". ``on_count``:
    called every 1,000 messages."""
    last = last_entry_strict(client, backing)
    if last is None:
        return 0
    n = 0
    for _ in scan(client, backing, BEFORE_EARLIEST,
                  Position(last.ledger, last.entry, WHOLE_ENTRY), timeout_ms=2_000,
                  fail_on_data_loss=False):
        n += 1
        if on_count is not None and n % 1000 == 0:
            on_count(n)
    return n
