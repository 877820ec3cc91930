"""RedisMetadataStore: the typed façade over Redis (or Valkey) for the protocol.

Each multi-key step is one Lua script whose keys share one cluster slot (see
``keys.py``); scripts return status tuples that are turned into typed errors
here and nowhere else. Redis exceptions never leave this module untranslated.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from pulsar_txn.errors import (
    AckConflict,
    ConfigError,
    MetastoreError,
    MetastoreUnavailable,
    PulsarTxnError,
    SinkBoundToOtherQuery,
    SinkFenced,
    TopicNotFound,
    TxnIdStale,
    TxnNotFound,
    TxnNotOpen,
    TxnTimedOut,
)
from pulsar_txn.records import (
    OpenWrite,
    Position,
    SinkBatch,
    TxnEvent,
    TxnHeader,
    TxnId,
    WriteRecord,
    partition_of,
)
from pulsar_txn.state import TxnState, check_transition

from .base import Collected, LayoutChange, LayoutVerdict, Materialized
from .keys import Keys
from .watch import RedisTopicWatch, RedisWatch

log = logging.getLogger(__name__)

DEFAULT_PARTITIONS = 16
DURABILITY = ("strict", "waitaof", "relaxed")


def redact_url(url: str) -> str:
    """The URL as it may appear in messages and logs: no password (userinfo or query)."""
    p = urlparse(url)
    netloc = p.netloc
    if p.password is not None:
        netloc = netloc.replace(f":{p.password}@", ":***@", 1)
    query = parse_qs(p.query, keep_blank_values=True)
    for k in query:
        if "pass" in k.lower() or "secret" in k.lower() or "token" in k.lower():
            query[k] = ["***"]
    return urlunparse(p._replace(netloc=netloc, query=urlencode(query, doseq=True)))
SEQ_BLOCK = 64
_RETRIED = (redis.ConnectionError, redis.TimeoutError)


def _load_lua(name: str) -> str:
    """A script's text, with shared preludes (``--#include <name>``) inlined."""
    lua = resources.files("pulsar_txn.metastore").joinpath("lua")
    text = lua.joinpath(f"{name}.lua").read_text()
    for line in [ln for ln in text.splitlines() if ln.startswith("--#include ")]:
        text = text.replace(line, lua.joinpath(f"_{line.split()[1]}.lua").read_text())
    return text


def _translate(fn):
    """Map transport failures to MetastoreUnavailable at the store boundary."""

    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PulsarTxnError:
            raise
        except (redis.ConnectionError, redis.TimeoutError) as e:
            where = getattr(args[0], "url", "?") if args else "?"
            raise MetastoreUnavailable(f"metadata store {where!r} (option 'metastore.url') "
                                       f"unreachable: {e}") from e
        except redis.ResponseError as e:
            # A script error or a rejected command: repeating it cannot help (a
            # server that is still loading or a failover in progress is a
            # ConnectionError above, or BUSY/LOADING/TRYAGAIN here).
            where = getattr(args[0], "url", "?") if args else "?"
            if str(e).split(" ", 1)[0] in ("BUSY", "LOADING", "TRYAGAIN", "MASTERDOWN"):
                raise MetastoreUnavailable(f"metadata store {where!r} (option 'metastore.url') "
                                           f"is not ready: {e}") from e
            raise MetastoreError(f"metadata store {where!r} (option 'metastore.url') refused "
                                 f"the request: {e}") from e

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


# The scripts' status replies, as the boundary's typed answers.
_MATERIALIZED = {"OK": Materialized.DONE, "ALREADY": Materialized.ALREADY,
                 "GONE": Materialized.GONE, "OPEN": Materialized.OPEN}
_COLLECTED = {"OK": Collected.DONE, "KEPT": Collected.KEPT, "GONE": Collected.GONE,
              "OPEN": Collected.OPEN, "UNMATERIALIZED": Collected.UNMATERIALIZED,
              "YOUNG": Collected.YOUNG, "ACKS_PENDING": Collected.ACKS_PENDING}
_LAYOUT = {"OK": LayoutVerdict.APPLIED, "STALE": LayoutVerdict.STALE,
           "NOTFOUND": LayoutVerdict.NOT_FOUND, "NOTACTIVE": LayoutVerdict.NOT_ACTIVE}


def _header_from(txn_id: TxnId, h: dict[str, str]) -> TxnHeader:
    win = h.get("win") or "[]"
    return TxnHeader(
        txn_id=txn_id,
        state=TxnState(h["st"]),
        deadline_ms=int(h.get("dl", 0)),
        created_ms=int(h.get("cr", 0)),
        finalized_ms=int(h["fin"]) if h.get("fin") else None,
        owner=h.get("own", ""),
        winners=frozenset(json.loads(win)),
        open_ack_records=int(h.get("ao", 0)),
        schema_version=int(h.get("v", 1)),
    )


def _split_record(field: str) -> tuple[str, str]:
    seg, _, rest = field.rpartition("|")
    return seg, rest


class _Script:
    """A registered script that survives a server restart's empty script cache even
    when the reload races the restart (redis-py retries NOSCRIPT only once)."""

    def __init__(self, script) -> None:
        self._script = script

    def __call__(self, keys, args, client=None):
        if client is not None:  # queued in a pipeline, which loads missing scripts itself
            return self._script(keys=keys, args=args, client=client)
        for attempt in range(3):
            try:
                return self._script(keys=keys, args=args)
            except redis.exceptions.NoScriptError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


class RedisMetadataStore:
    """Transaction metadata in Redis: headers, write/ack records, indexes, events."""

    def __init__(self, url: str, namespace: str = "ptxn", partitions: int | None = None,
                 event_maxlen: int = 100_000, socket_timeout: float = 10.0,
                 durability: str | None = None) -> None:
        parsed = urlparse(url)
        shown = redact_url(url)
        if parsed.scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(
                f"metastore.url {shown!r}: scheme must be redis://, rediss:// (TLS) or unix://")
        query = parse_qs(parsed.query)
        namespace = query.pop("namespace", [namespace])[0]
        durability = query.pop("durability", [durability or "strict"])[0]
        if durability not in DURABILITY:
            raise ConfigError(f"metastore.url {shown!r}: durability={durability!r}; expected one "
                              f"of {', '.join(DURABILITY)}")
        self.durability = durability
        url = urlunparse(parsed._replace(query=urlencode(query, doseq=True)))
        self.url = shown
        self.pool = redis.ConnectionPool.from_url(
            url, decode_responses=True, socket_timeout=socket_timeout,
            socket_connect_timeout=5, health_check_interval=30,
            retry=Retry(ExponentialBackoff(cap=1.0, base=0.02), 4),
            retry_on_error=list(_RETRIED),
        )
        self.r = redis.Redis(connection_pool=self.pool)
        self.event_maxlen = event_maxlen
        try:
            self._check_persistence()
            self.partitions = self._agree_partitions(namespace, partitions)
            self.deployment = self._deployment_id(namespace)
            self._run_id = self._server_run_id()
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise MetastoreUnavailable(f"metadata store {shown!r} (option 'metastore.url') "
                                       f"unreachable: {e}") from e
        self.keys = Keys(namespace, self.partitions)
        self._seq_lock = threading.Lock()
        self._seq_blocks: dict[int, tuple[int, int]] = {}
        self._s = {name: _Script(self.r.register_script(_load_lua(name))) for name in (
            "create_txn", "register_write", "record_write", "end_txn", "materialize_txn",
            "gc_txn", "bind_sink", "alloc_ids",
            "claim_acks", "release_acks", "record_acks", "mark_acks_applied", "trim_acks",
            "withdraw_write", "create_topic", "change_layout", "seal_end")}

    def _check_persistence(self) -> None:
        """Refuse a server that would lose acknowledged decisions, unless the URL opts
        into a documented weaker mode (docs/durability.md): ``strict`` needs AOF with
        ``appendfsync always``; ``waitaof`` needs AOF and waits for the fsync of each
        decision (WAITAOF); ``relaxed`` checks nothing (lost decisions fail closed)."""
        if self.durability == "relaxed":
            return
        hint = ("add ?durability=relaxed to metastore.url to accept it (lost decisions come "
                "back as unknown: their txns are never shown), or see docs/durability.md")
        try:
            cfg = self.r.config_get("append*")
        except redis.ResponseError as e:
            raise ConfigError(f"metastore.url {self.url!r}: cannot read the server's "
                              f"persistence settings ({e}); {hint}") from None
        if cfg.get("appendonly") != "yes":
            raise ConfigError(f"metastore.url {self.url!r}: the server runs without AOF "
                              f"(appendonly {cfg.get('appendonly')}); {hint}")
        if self.durability == "waitaof":
            try:
                self.r.execute_command("WAITAOF", 0, 0, 1)
            except redis.ResponseError as e:
                raise ConfigError(f"metastore.url {self.url!r}: durability=waitaof needs a "
                                  f"server with WAITAOF (Redis 7.2+, Valkey): {e}") from None
        if self.durability == "strict" and cfg.get("appendfsync") != "always":
            raise ConfigError(
                f"metastore.url {self.url!r}: appendfsync is {cfg.get('appendfsync')!r}, so an "
                "acknowledged commit can be lost; use appendfsync always, or add "
                "?durability=waitaof (each decision waits for its fsync); or " + hint)

    def _agree_partitions(self, ns: str, wanted: int | None) -> int:
        """P is fixed per deployment at first use: ids and slots depend on it."""
        key = Keys(ns, 1).config()
        self.r.hsetnx(key, "partitions", wanted or DEFAULT_PARTITIONS)
        stored = int(self.r.hget(key, "partitions"))
        if wanted is not None and wanted != stored:
            raise ConfigError(
                f"metastore partitions={wanted} but namespace {ns!r} was created with {stored}")
        return stored

    def _deployment_id(self, ns: str) -> str:
        """A random id fixed at the namespace's first use and carried by every
        transactional append: an entry written under another deployment (another
        namespace or store) is never classified with this one's ids (fail closed)."""
        key = Keys(ns, 1).config()
        self.r.hsetnx(key, "deployment", uuid.uuid4().hex[:12])
        return str(self.r.hget(key, "deployment"))

    def _server_run_id(self) -> str:
        return str(self.r.info("server").get("run_id", ""))

    def still_current(self) -> bool:
        """Whether the server still holds this namespace as it was opened: the same
        deployment id and partitions, and the same server process. A process that keeps
        a store for later jobs (a Spark worker) asks before each reuse; a wiped or
        replaced metastore at the same URL, or a restarted server, needs a fresh open
        (deployment id, partitions, persistence check), never the remembered ones."""
        try:
            deployment, partitions = self.r.hmget(Keys(self.keys.ns, 1).config(),
                                                  "deployment", "partitions")
            return (deployment == self.deployment and partitions is not None
                    and int(partitions) == self.partitions
                    and self._server_run_id() == self._run_id)
        except (redis.RedisError, ValueError):
            return False

    def close(self) -> None:
        self.pool.disconnect()

    # ---- transactions ----
    @_translate
    def next_txn_id(self, owner: str = "", partition: int | None = None) -> TxnId:
        if partition is None:
            partition = (partition_of(owner, self.partitions) if owner
                         else random.randrange(self.partitions))
        p = partition
        with self._seq_lock:
            nxt, end = self._seq_blocks.get(p, (0, -1))
            if nxt > end:
                k = self.keys
                end = int(self._s["alloc_ids"](keys=[k.seq(p), k.gc(p), k.gaps(p)],
                                               args=[SEQ_BLOCK]))
                nxt = end - SEQ_BLOCK + 1
            self._seq_blocks[p] = (nxt + 1, end)
        return TxnId(p, nxt)

    @_translate
    def create_txn(self, txn_id: TxnId, timeout_ms: int, owner: str = "",
                   replace: TxnId | None = None) -> TxnHeader:
        p, k = txn_id.partition, self.keys
        if owner and partition_of(owner, self.partitions) != p:
            raise ValueError("an owned transaction must live in its owner's partition")
        res = self._s["create_txn"](
            keys=[k.header(p, txn_id.seq), k.deadlines(p), k.owners(p), k.seq(p), k.live(p),
                  k.gc(p), k.gaps(p), k.counters(p)],
            args=[txn_id.seq, int(timeout_ms), owner, replace.seq if replace else ""])
        if res[0] == "STALE":  # below the collected watermark or in a gap: a fresh id
            with self._seq_lock:
                self._seq_blocks.pop(p, None)
            raise TxnIdStale(f"transaction id {txn_id} can no longer be created")
        if res[0] == "OWNED":
            existing = self.get_header(TxnId(p, int(res[1])))
            if existing is None:  # collected between the two reads: the mapping is stale
                return self.create_txn(txn_id, timeout_ms, owner, TxnId(p, int(res[1])))
            return existing
        if res[0] == "DUP":  # a retried create whose first attempt landed
            header = self.get_header(txn_id)
            if header is None or header.owner != owner:
                raise PulsarTxnError(f"transaction id {txn_id} already in use")
            return header
        return TxnHeader(txn_id, TxnState.OPEN, int(res[2]), int(res[3]), owner=owner)

    @_translate
    def get_header(self, txn_id: TxnId) -> TxnHeader | None:
        h = self.r.hgetall(self.keys.header(txn_id.partition, txn_id.seq))
        return _header_from(txn_id, h) if h else None

    @_translate
    def get_headers(self, txn_ids: Sequence[TxnId]) -> dict[TxnId, TxnHeader | None]:
        pipe = self.r.pipeline(transaction=False)
        for t in txn_ids:
            pipe.hgetall(self.keys.header(t.partition, t.seq))
        return {t: (_header_from(t, h) if h else None) for t, h in zip(txn_ids, pipe.execute())}

    @_translate
    def find_owner(self, owner: str) -> TxnId | None:
        p = partition_of(owner, self.partitions)
        seq = self.r.hget(self.keys.owners(p), owner)
        return TxnId(p, int(seq)) if seq else None

    @_translate
    def end_txn(self, txn_id: TxnId, target: TxnState, winners: Iterable[str] | None,
                segments: Iterable[str] | None = None, sink: SinkBatch | None = None
                ) -> tuple[TxnHeader, bool, bool]:
        """The single CAS, O(1) in the segments written. Returns (header, changed, timed_out).

        ``winners`` None means every writer that recorded a position (a scan of
        the write records). ``segments`` is not needed by the CAS (kept for the API).
        ``sink``: a Spark sink batch whose progress the same CAS advances on commit.
        """
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        win_arg = "*" if winners is None else json.dumps(sorted(set(winners)))
        keys = [k.header(p, seq), k.writes(p, seq), k.deadlines(p), k.finalized(p),
                k.unmaterialized(p), k.events(p), k.counters(p)]
        args = [seq, target.value, win_arg, self.event_maxlen]
        if sink is not None:
            if partition_of(sink.sink_id, self.partitions) != p:
                raise ValueError(f"transaction {txn_id} is not in sink {sink.sink_id}'s partition")
            keys.append(k.sink(p, sink.sink_id))
            args += [sink.batch_id, sink.query_id]
        if self.durability == "waitaof":  # the wait must run on the decision's connection
            pipe = self.r.pipeline(transaction=False)
            self._s["end_txn"](keys=keys, args=args, client=pipe)
            pipe.execute_command("WAITAOF", 1, 0, 10_000)
            res, (local, _replicas) = pipe.execute()
            if res[0] == "ALREADY":  # wrote nothing: WAITAOF must follow a write of ours
                pipe = self.r.pipeline(transaction=False)
                pipe.incr(k.fsync_mark(p))
                pipe.execute_command("WAITAOF", 1, 0, 10_000)
                _, (local, _replicas) = pipe.execute()
            if res[0] in ("OK", "ALREADY") and int(local) < 1:
                raise MetastoreUnavailable("the decision was not fsynced within 10 s "
                                           "(WAITAOF); ending the transaction again tells "
                                           "its outcome")
        else:
            res = self._s["end_txn"](keys=keys, args=args)
        status = res[0]
        if status == "NOTFOUND":
            raise TxnNotFound(f"transaction {txn_id} not found")
        if status == "FENCED":
            raise SinkFenced(f"sink {sink.sink_id} now belongs to query {res[1]}; batch "
                             f"{sink.batch_id} of query {sink.query_id} is not committed")
        if status == "CONFLICT":
            check_transition(str(txn_id), TxnState(res[1]), target)  # raises
        fields = dict(zip(res[3::2], res[4::2]))
        return _header_from(txn_id, fields), status == "OK", status == "OK" and res[2] == "1"

    @_translate
    def materialize_txn(self, txn_id: TxnId,
                        segments: Iterable[str] | None = None) -> Materialized:
        """Clean an ended txn's open-write entries and list its losers (idempotent)."""
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        segs = sorted(set(segments)) if segments is not None else None
        for _ in range(4):
            if segs is None:
                segs = sorted({r.segment for r in self.list_writes(txn_id)[0]})
            keys = [k.header(p, seq), k.writes(p, seq), k.unmaterialized(p), k.events(p)]
            for s in segs:
                keys += [k.open_writes(p, s), k.aborted_writers(p, s)]
            status = self._s["materialize_txn"](
                keys=keys, args=[seq, self.event_maxlen, len(segs), *segs])[0]
            if status != "RETRY":
                return _MATERIALIZED[status]
            segs = None  # the caller did not know every segment: read the records
        raise MetastoreUnavailable(f"transaction {txn_id}: could not list its segments")

    @_translate
    def unmaterialized_txns(self, limit: int = 1000) -> list[TxnId]:
        pipe = self.r.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.zrange(self.keys.unmaterialized(p), 0, limit - 1)
        return [TxnId(p, int(s)) for p, seqs in enumerate(pipe.execute()) for s in seqs]

    @_translate
    def expired_txns(self, limit: int = 1000) -> list[TxnId]:
        now = self.server_time_ms()
        pipe = self.r.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.zrangebyscore(self.keys.deadlines(p), "-inf", now, start=0, num=limit)
        return [TxnId(p, int(s)) for p, seqs in enumerate(pipe.execute()) for s in seqs]

    @_translate
    def open_txns(self) -> list[tuple[TxnId, int]]:
        pipe = self.r.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.zrange(self.keys.deadlines(p), 0, -1, withscores=True)
        return [(TxnId(p, int(s)), int(sc)) for p, rows in enumerate(pipe.execute())
                for s, sc in rows]

    @_translate
    def finalized_txns(self, before_ms: int | None = None,
                       limit: int = 1000) -> list[tuple[TxnId, int]]:
        hi = "+inf" if before_ms is None else before_ms
        pipe = self.r.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.zrangebyscore(self.keys.finalized(p), "-inf", hi, start=0, num=limit,
                               withscores=True)
        return [(TxnId(p, int(s)), int(sc)) for p, rows in enumerate(pipe.execute())
                for s, sc in rows]

    @_translate
    def gc_txn(self, txn_id: TxnId, cutoff_ms: int) -> Collected:
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        return _COLLECTED[self._s["gc_txn"](
            keys=[k.header(p, seq), k.writes(p, seq), k.acks(p, seq), k.finalized(p),
                  k.owners(p), k.live(p), k.collected(p), k.gc(p), k.gaps(p), k.seq(p)],
            args=[seq, cutoff_ms])[0]]

    @_translate
    def collected(self, txn_ids: Sequence[TxnId]) -> set[TxnId]:
        """The ids known to be collected (fail closed): in the collected set, or at or
        below the watermark and outside every gap of possibly lost ids. A missing header
        of any other id is unknown: lost with a rollback of the store, or foreign."""
        k = self.keys
        pipe = self.r.pipeline(transaction=False)
        for t in txn_ids:
            p = t.partition
            pipe.zscore(k.collected(p), t.seq)
            pipe.hget(k.gc(p), "w")
            pipe.zrevrangebyscore(k.gaps(p), t.seq, "-inf", start=0, num=1)
        res = pipe.execute()
        out = set()
        for i, t in enumerate(txn_ids):
            in_set, w, gap = res[3 * i: 3 * i + 3]
            in_gap = bool(gap) and int(gap[0].split(":")[1]) >= t.seq
            if in_set is not None or (not in_gap and t.seq <= int(w or 0)):
                out.add(t)
        return out

    @_translate
    def metrics_snapshot(self, max_open: int = 10_000) -> dict:
        """What operators watch, read in a few pipelined round trips (Prometheus).

        counters: opened, committed, aborted, timed_out (kept exactly by the scripts);
        open: OPEN txns, and the creation time of the oldest (of up to ``max_open``);
        unmaterialized / gc_backlog: ended txns awaiting their cleanup / collection;
        open_writes: per segment, the number of open writes and the lowest recorded
        first position (entries at or above it are held back from readers);
        sinks: per Spark sink id, its last committed batch.
        """
        k = self.keys
        pipe = self.r.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.hgetall(k.counters(p))
            pipe.zrange(k.deadlines(p), 0, max_open - 1)
            pipe.zcard(k.deadlines(p))
            pipe.zcard(k.unmaterialized(p))
            pipe.zcard(k.finalized(p))
        res = pipe.execute()
        counters = {"opened": 0, "committed": 0, "aborted": 0, "timed_out": 0}
        open_ids, n_open, unmat, backlog = [], 0, 0, 0
        for p in range(self.partitions):
            c, ids, n, u, f = res[5 * p: 5 * p + 5]
            for name in counters:
                counters[name] += int(c.get(name, 0))
            open_ids += [(p, int(s)) for s in ids]
            n_open, unmat, backlog = n_open + n, unmat + u, backlog + f
        oldest = None
        if open_ids:
            pipe = self.r.pipeline(transaction=False)
            for p, seq in open_ids:
                pipe.hget(k.header(p, seq), "cr")
            created = [int(c) for c in pipe.execute() if c is not None]
            oldest = min(created) if created else None
        writes: dict[str, tuple[int, Position | None]] = {}
        sinks: dict[str, int] = {}
        for p in range(self.partitions):
            for key in self.r.scan_iter(match=f"{k.tag(p)}:ow:*", count=1000):
                segment = key.split(":ow:", 1)[1]
                members = self.r.zrange(key, 0, -1)
                first = [m for m in members if not m.startswith("!")][:1]
                n, low = writes.get(segment, (0, None))
                pos = Position.decode(first[0].split("|", 1)[0]) if first else None
                writes[segment] = (n + len(members),
                                   min(x for x in (low, pos) if x is not None)
                                   if (low or pos) else None)
            for key in self.r.scan_iter(match=f"{k.tag(p)}:sink:*", count=1000):
                batch = self.r.hget(key, "batch")
                if batch is not None:
                    sinks[key.split(":sink:", 1)[1]] = int(batch)
        return {"counters": counters, "open": n_open, "oldest_open_created_ms": oldest,
                "unmaterialized": unmat, "gc_backlog": backlog, "open_writes": writes,
                "sinks": sinks, "now_ms": self.server_time_ms()}

    @_translate
    def server_time_ms(self) -> int:
        s, us = self.r.time()
        return s * 1000 + us // 1000

    # ---- writes ----
    def _raise_status(self, txn_id: TxnId, res: list) -> None:
        status = res[0]
        if status == "NOTFOUND":
            raise TxnNotFound(f"transaction {txn_id} not found")
        if status == "NOTOPEN":
            raise TxnNotOpen(str(txn_id), res[1])
        if status == "TIMEDOUT":
            raise TxnTimedOut(str(txn_id))
        if status == "NOTREG":
            raise PulsarTxnError(f"transaction {txn_id}: write recorded before registration")

    @_translate
    def register_write(self, txn_id: TxnId, segment: str, writer: str) -> None:
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        res = self._s["register_write"](
            keys=[k.header(p, seq), k.writes(p, seq), k.open_writes(p, segment)],
            args=[seq, segment, writer])
        if res[0] not in ("OK", "DUP"):
            self._raise_status(txn_id, res)

    @_translate
    def record_write(self, txn_id: TxnId, segment: str, writer: str,
                     first: Position | None, last: Position | None) -> None:
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        res = self._s["record_write"](
            keys=[k.header(p, seq), k.writes(p, seq), k.open_writes(p, segment), k.events(p)],
            args=[seq, segment, writer, first.encode() if first else "",
                  last.encode() if last else "", self.event_maxlen])
        if res[0] != "OK":
            self._raise_status(txn_id, res)

    @_translate
    def withdraw_write(self, txn_id: TxnId, segment: str, writer: str) -> bool:
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        res = self._s["withdraw_write"](keys=[k.writes(p, seq), k.open_writes(p, segment)],
                                        args=[seq, segment, writer])
        return res[0] == "OK"

    @_translate
    def list_writes(self, txn_id: TxnId) -> tuple[list[WriteRecord], int]:
        p, seq = txn_id.partition, txn_id.seq
        pipe = self.r.pipeline(transaction=True)  # MULTI: records and count agree
        pipe.hgetall(self.keys.writes(p, seq))
        pipe.hget(self.keys.header(p, seq), "wv")
        recs, wv = pipe.execute()
        out = []
        for field, value in recs.items():
            seg, writer = _split_record(field)
            first, _, last = value.partition(",")
            out.append(WriteRecord(seg, writer, Position.decode(first) if first else None,
                                   Position.decode(last) if last else None))
        return out, int(wv or 0)

    @_translate
    def open_writes(self, segment: str, skip: Iterable[TxnId] = ()) -> list[OpenWrite]:
        """Per partition: every pending registration and the lowest recorded first
        position, leaving out the txns in ``skip`` (ended ones whose cleanup has not
        run: the next write of their partition must show instead).

        One command per partition in the common case: '!' (pending) sorts before
        every hex position, so the first member says whether a second look is needed.
        A partition holding a skipped txn is read a page at a time up to its first
        member of another txn (a txn has a member per writer).
        """
        k = self.keys
        skipped: dict[int, set[str]] = {}
        for t in skip:
            skipped.setdefault(t.partition, set()).add(str(t.seq))
        pipe = self.r.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.zrange(k.open_writes(p, segment), 0, 0)
        firsts = pipe.execute()
        members: list[tuple[int, str]] = []
        for p, gone in skipped.items():
            members += [(p, m) for m in self._first_writes(k.open_writes(p, segment), gone)]
        pending = [p for p, m in enumerate(firsts)
                   if p not in skipped and m and m[0].startswith("!")]
        for p, m in enumerate(firsts):
            if m and p not in pending and p not in skipped:
                members.append((p, m[0]))
        if pending:
            pipe = self.r.pipeline(transaction=False)
            for p in pending:
                ow = k.open_writes(p, segment)
                pipe.zrange(ow, "[!", '("', bylex=True, offset=0, num=64)
                pipe.zrange(ow, "[0", "+", bylex=True, offset=0, num=1)
            res = pipe.execute()
            for i, p in enumerate(pending):
                members += [(p, m) for m in res[2 * i] + res[2 * i + 1]]
        out: list[OpenWrite] = []
        for p, member in members:
            pos, seq, writer = member.split("|")
            out.append(OpenWrite(TxnId(p, int(seq)), writer,
                                 None if pos == "!" else Position.decode(pos)))
        return out

    def _first_writes(self, key: str, gone: set[str], page: int = 128) -> list[str]:
        """Pending members (up to 64) and the lowest recorded one of an open-write
        index, leaving out the members of the ``gone`` txn seqs, a page at a time."""
        pending: list[str] = []
        start = 0
        while True:
            ms = self.r.zrange(key, start, start + page - 1)
            for m in ms:
                if m.split("|", 2)[1] in gone:
                    continue
                if m.startswith("!"):
                    if len(pending) < 64:
                        pending.append(m)
                    continue
                return pending + [m]
            if len(ms) < page:
                return pending
            start += page

    @_translate
    def aborted_writers(self, segment: str, pairs: Iterable[tuple[TxnId, str]]
                        ) -> set[tuple[TxnId, str]]:
        pairs = list(pairs)
        pipe = self.r.pipeline(transaction=False)
        for t, w in pairs:
            pipe.sismember(self.keys.aborted_writers(t.partition, segment), f"{t.seq}|{w}")
        return {pair for pair, hit in zip(pairs, pipe.execute()) if hit}

    # ---- acks ----
    @_translate
    def claim_acks(self, txn_id: TxnId, segment: str, subscription: str,
                   positions: Sequence[str], cumulative: bool,
                   given: Sequence[str] = ()) -> None:
        res = self._s["claim_acks"](
            keys=[self.keys.ack_claims(segment, subscription)],
            args=[str(txn_id), "cum" if cumulative else "ind", *positions,
                  *(given if cumulative else ())])
        if res[0] == "CONFLICT":
            raise AckConflict(res[1], res[2], committed=res[3] == "COMMITTED")

    @_translate
    def release_acks(self, holder: TxnId | str, segment: str, subscription: str,
                     positions: Sequence[str] = (), committed: bool = False) -> int:
        """Settle a holder's claims: delete them, or (``committed``) turn them into
        tombstones that conflict with every later claim of those messages."""
        return int(self._s["release_acks"](
            keys=[self.keys.ack_claims(segment, subscription)],
            args=[str(holder), "commit" if committed else "release", *positions]))

    @_translate
    def record_acks(self, txn_id: TxnId, segment: str, subscription: str,
                    positions: Sequence[str], cumulative: bool) -> None:
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        res = self._s["record_acks"](
            keys=[k.header(p, seq), k.acks(p, seq)],
            args=[f"{segment}|{subscription}", "cum" if cumulative else "ind", *positions])
        if res[0] != "OK":
            self._raise_status(txn_id, res)

    @_translate
    def list_acks(self, txn_id: TxnId) -> dict[tuple[str, str], dict]:
        raw = self.r.hgetall(self.keys.acks(txn_id.partition, txn_id.seq))
        out = {}
        for field, value in raw.items():
            rec = json.loads(value)
            if isinstance(rec.get("ind"), dict):  # cjson encodes an empty array as {}
                rec["ind"] = []
            out[_split_record(field)] = rec
        return out

    @_translate
    def list_claims(self, segment: str, subscription: str) -> dict[str, str]:
        return self.r.hgetall(self.keys.ack_claims(segment, subscription))

    @_translate
    def trim_tombstones(self, segment: str, subscription: str, horizon: str,
                        tombstones: Sequence[tuple[str, str]]) -> int:
        """Drop the (position, holder) tombstones at or below ``horizon`` still held by
        that holder; the horizon stays a conflict for later claims (trim_acks.lua)."""
        return int(self._s["trim_acks"](keys=[self.keys.ack_claims(segment, subscription)],
                                        args=[horizon, *(f"{p}|{h}" for p, h in tombstones)]))

    @_translate
    def mark_acks_applied(self, txn_id: TxnId, segment: str, subscription: str) -> None:
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        self._s["mark_acks_applied"](keys=[k.header(p, seq), k.acks(p, seq)],
                                     args=[f"{segment}|{subscription}"])

    # ---- Spark sink progress ----
    def _sink_key(self, sink_id: str) -> str:
        return self.keys.sink(partition_of(sink_id, self.partitions), sink_id)

    @_translate
    def bind_sink(self, sink_id: str, query_id: str, rebind: bool = False) -> int:
        """Bind the sink id to the query (see bind_sink.lua); its last committed batch."""
        res = self._s["bind_sink"](keys=[self._sink_key(sink_id)],
                                   args=[query_id, "1" if rebind else "0"])
        if res[0] == "OTHER":
            raise SinkBoundToOtherQuery(sink_id, res[1])
        return int(res[1])

    @_translate
    def sink_progress(self, sink_id: str) -> tuple[int, str | None]:
        """(last committed batchId or -1, the query id the sink belongs to or None)."""
        batch, qid = self.r.hmget(self._sink_key(sink_id), "batch", "qid")
        return (int(batch) if batch is not None else -1), qid

    def sink_last_batch(self, sink_id: str) -> int:
        return self.sink_progress(sink_id)[0]

    # ---- scalable topics (segment DAG) ----
    @_translate
    def create_topic(self, topic: str, segments: Sequence[str], next_id: int,
                     hash_fn: str = "murmur3") -> bool:
        """Create the DAG at epoch 1 with its key hash function; False if the topic
        already exists."""
        k = self.keys
        res = self._s["create_topic"](keys=[k.topic_dag(topic), k.topic_events(topic)],
                                      args=[self.event_maxlen, next_id, hash_fn, *segments])
        self.r.sadd(k.topics(), topic)  # listing aid only: the DAG above is the truth
        return res[0] == "OK"

    @_translate
    def get_layout(self, topic: str) -> tuple[int, int, dict[int, str], int, str] | None:
        """(epoch, next segment id, {id: descriptor JSON}, version, key hash function)
        in one read, or None.

        The version grows with every change (split, merge, end fixed), so a cache
        can tell the newer of two reads even within one epoch. A topic created before
        the hash function was recorded reads as 'crc32' (what it was routed by)."""
        raw = self.r.hgetall(self.keys.topic_dag(topic))
        if not raw:
            return None
        segs = {int(f[4:]): v for f, v in raw.items() if f.startswith("seg:")}
        return (int(raw["epoch"]), int(raw["next"]), segs, int(raw.get("ver", 0)),
                raw.get("hash", "crc32"))

    @_translate
    def get_segment(self, topic: str, segment_id: int) -> str | None:
        return self.r.hget(self.keys.topic_dag(topic), f"seg:{segment_id}")

    @_translate
    def change_layout(self, topic: str, expected_epoch: int, parents: Sequence[int],
                      children: Sequence[str], next_id: int) -> LayoutChange:
        """The split/merge CAS (epoch-checked)."""
        k = self.keys
        res = self._s["change_layout"](
            keys=[k.topic_dag(topic), k.topic_events(topic)],
            args=[expected_epoch, self.event_maxlen, next_id, json.dumps(list(parents)),
                  *children])
        return LayoutChange(_LAYOUT[res[0]], res[1] if len(res) > 1 else "")

    @_translate
    def seal_end(self, topic: str, segment_id: int, end: str) -> str:
        """Fix a sealed segment's last entry once; returns the value that stands."""
        k = self.keys
        res = self._s["seal_end"](keys=[k.topic_dag(topic), k.topic_events(topic)],
                                  args=[segment_id, end, self.event_maxlen])
        if res[0] in ("OK", "ALREADY"):
            return res[1]
        if res[0] == "NOTFOUND":
            raise TopicNotFound(f"scalable topic topic://{topic} has no segment {segment_id}")
        raise ConfigError(f"topic://{topic}: segment {segment_id} is still ACTIVE; only a "
                          "sealed segment's end can be fixed")

    @_translate
    def list_topics(self) -> list[str]:
        return sorted(self.r.smembers(self.keys.topics()))

    def watch_topics(self, topics: Callable[[], Iterable[str]],
                     callback: Callable[[str | None], None]) -> RedisTopicWatch:
        """Follow the layout events of the topics ``topics()`` names (re-read each turn)."""
        w = RedisTopicWatch(self, topics, callback)
        w.start()
        return w

    # ---- notification ----
    def watch(self, callback: Callable[[TxnEvent], None]) -> RedisWatch:
        w = RedisWatch(self, callback)
        w.start()
        w.ready.wait(5)
        return w
