"""RedisMetadataStore: the typed façade over Redis (or Valkey) for the protocol.

Each multi-key step is one Lua script whose keys share one cluster slot (see
``keys.py``). Redis answers become typed values and errors in ``replies.py`` and
nowhere else: no Redis exception, status string or member encoding leaves the
store.

The façade is spread over a few modules so that each reads at once, as the
memory backend's is: this one (opening, transactions, Spark sinks, the
transaction watch), ``redis_writes`` (write records and the open-write index),
``redis_acks`` (claim tables and ack records), ``redis_layouts`` (scalable-topic
DAGs), ``redis_url`` (the URL, its options and the persistence check),
``replies`` (Redis answers as typed values and errors), ``scripts`` (the Lua
registry) and ``watch`` (the stream follower behind both watches).
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from pulsar_txn.errors import (
    ConfigError,
    MetastoreError,
    MetastoreUnavailable,
    NamespaceNotFound,
    PulsarTxnError,
    SinkBoundToOtherQuery,
    SinkFenced,
    SinkIdMovedAway,
    TxnIdStale,
    TxnNotFound,
    TxnRecordsLost,
)
from pulsar_txn.records import (
    WIRE_NAMES,
    WIRE_ONE,
    Position,
    SinkBatch,
    TxnEvent,
    TxnHeader,
    TxnId,
    check_wire_format,
    in_id_space,
    partition_of,
)
from pulsar_txn.state import TxnState, check_transition

from .base import CLOCK_BEHIND_MAX_US, Collected, Materialized, clock_behind, missing_namespace
from .keys import (
    LAYOUTS,
    SPREAD_LAYOUT,
    Keys,
    decode_gap,
    decode_open_write,
    is_pending_write,
)
from .redis_acks import RedisAcks
from .redis_fsync import RedisFsync
from .redis_layouts import RedisLayouts
from .redis_namespace import RedisNamespace
from .redis_starts import RedisServerStarts
from .redis_url import check_persistence, cluster_client, connection_pool, parse_store_url
from .redis_writes import RedisWrites
from .replies import COLLECTED, MATERIALIZED, header_from, translate
from .scripts import Scripts
from .watch import RedisWatch

# Re-exported: connector/spark/options.py still imports it from here.
__all__ = ["DEFAULT_PARTITIONS", "RedisMetadataStore"]

DEFAULT_PARTITIONS = 16
SEQ_BLOCK = 64  # ids a store takes per round trip (next_txn_id hands them out locally)
WAITAOF_MS = 10_000  # how long a decision waits for its fsync (durability=waitaof)


class RedisMetadataStore(RedisServerStarts, RedisNamespace, RedisFsync, RedisWrites, RedisAcks,
                         RedisLayouts):
    """Transaction metadata in Redis: headers, write/ack records, indexes, events."""

    def __init__(self, url: str, namespace: str = "ptxn", partitions: int | None = None,
                 event_maxlen: int = 100_000, socket_timeout: float = 10.0,
                 durability: str | None = None, create: bool = True) -> None:
        """``create`` False: a reader's open, which never creates the namespace (a
        missing one raises NamespaceNotFound naming the ones that exist)."""
        cfg = parse_store_url(url, namespace, durability)
        self.durability = cfg.durability
        self.url = cfg.shown
        self.cluster = cfg.cluster
        self.socket_timeout = socket_timeout
        self.event_maxlen = event_maxlen
        self.count_server_starts()
        self.pool = None if cfg.cluster else connection_pool(cfg.connect, socket_timeout)
        if self.pool is not None:
            self.pool.connection_kwargs["redis_connect_func"] = self.connect_hook
        try:
            self.r = (cluster_client(cfg.connect, cfg.shown, socket_timeout, self.met_server)
                      if cfg.cluster else redis.Redis(connection_pool=self.pool))
            self.scripts = Scripts(self.r)
            check_persistence(self.r, self.url, self.durability)
            self.partitions, layout, self.deployment, self.wire_format = self._first_use(
                cfg.namespace, partitions, create)
            self.opened_on_servers(self.server_run_id())
        except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterError,
                redis.exceptions.RedisClusterException) as e:
            raise MetastoreUnavailable(f"metadata store {self.url!r} (option 'metastore.url') "
                                       f"unreachable: {e}") from e
        except redis.ResponseError as e:  # e.g. NOPERM: an ACL user without the scripts
            raise MetastoreError(f"metadata store {self.url!r} (option 'metastore.url') "
                                 f"refused opening namespace {cfg.namespace!r}: {e}") from e
        self.keys = Keys(cfg.namespace, self.partitions, layout=layout)
        self.namespace = cfg.namespace
        self._seq_lock = threading.Lock()
        self._seq_blocks: dict[int, tuple[int, int]] = {}

    def _first_use(self, ns: str, wanted: int | None,
                   create: bool = True) -> tuple[int, str, str, int]:
        """(P, key layout, deployment id, wire format), fixed at the namespace's first
        use in one step (init_namespace.lua): ids and slots depend on P, every key on the layout,
        and every transactional append carries the deployment id, so an entry written
        under another deployment is never classified with this one's ids."""
        reply = self.scripts.init_namespace(
            keys=[Keys(ns, 1).config()],
            args=[wanted or DEFAULT_PARTITIONS, uuid.uuid4().hex[:12], SPREAD_LAYOUT,
                  WIRE_ONE, "1" if create else "0"])
        if not reply:
            self.close()
            raise NamespaceNotFound(missing_namespace(ns, self.url, self.namespaces()))
        stored, layout, dep, wire = reply
        if wanted is not None and wanted != int(stored):
            raise ConfigError(
                f"metastore partitions={wanted} but namespace {ns!r} was created with {stored}")
        if layout not in LAYOUTS:
            raise ConfigError(f"namespace {ns!r} uses key layout {layout!r}, which this version "
                              f"does not know ({', '.join(LAYOUTS)}): upgrade this process")
        return int(stored), layout, str(dep), check_wire_format(wire, ns)

    @translate
    def set_wire_format(self, wire: int) -> None:
        """Switch the form of the namespace's appends: WIRE_ONE once every process
        that reads it is of a build that reads that form, WIRE_THREE back if one of an
        earlier build must run again. Each partition's switch is one write that its
        registrations read in their script, so every writer (running or not) appends
        the new form from its next registration on; runs registered before may still
        append the other form until their transaction ends (txns_writing_other_form).
        Kept stores see ``still_current()`` turn false and reopen. Under ``waitaof``
        it returns once the switch is on disk on every node it wrote (a host crash must
        not undo a switch the operator was told happened), else raises
        MetastoreUnavailable."""
        wire = check_wire_format(wire, self.keys.ns)
        config = Keys(self.keys.ns, 1).config()
        writes = [(self.keys.wire(p), ("SET", self.keys.wire(p), wire))
                  for p in range(self.partitions)]
        writes.append((config, ("HSET", config, "wire", wire)))
        if self.durability != "waitaof":
            pipe = self.r.pipeline(transaction=False)
            for _, command in writes:
                pipe.execute_command(*command)
            pipe.execute()
        elif not self.write_fsynced(writes):
            self.wire_format = wire
            raise MetastoreUnavailable("the wire-format switch was written but not "
                                       "fsynced (WAITAOF); run the command again")
        self.wire_format = wire

    @translate
    def txns_writing_other_form(self, wire: int) -> list[TxnId]:
        """OPEN transactions with a run registered in a wire format other than ``wire``
        (register_write.lua marks the header): their writers may still append it."""
        ids = [t for t, _ in self.open_txns()]
        pipe = self.r.pipeline(transaction=False)
        for t in ids:
            pipe.hmget(self.keys.header(t.partition, t.seq), "st", *(f"wf{w}" for w in WIRE_NAMES))
        return [t for t, (st, *forms) in zip(ids, pipe.execute())
                if st == TxnState.OPEN.value
                and any(f for f, w in zip(forms, WIRE_NAMES) if w != wire)]

    def close(self) -> None:
        self.close_claim_tracking()
        if self.pool is None:
            self.r.close()
        else:
            self.pool.disconnect()

    def one_connection(self, key: str, timeout_s: float) -> redis.Redis:
        """A client on one fresh connection to the node serving ``key``, that never
        retries: WAITAOF waits for the writes of its own connection, and a retried
        WAITAOF on a new connection (no writes) would confirm at once what was never
        fsynced. ``timeout_s`` above WAITAOF's own limit. Close it after use."""
        pool = self.pool_of(key)
        kwargs = {**pool.connection_kwargs, "retry": Retry(NoBackoff(), 0),
                  "socket_timeout": timeout_s, "health_check_interval": 0}
        return redis.Redis(connection_pool=redis.ConnectionPool(
            connection_class=pool.connection_class, max_connections=1, **kwargs))

    # ---- transactions ----
    @translate
    def next_txn_id(self, owner: str = "", partition: int | None = None) -> TxnId:
        p = partition if partition is not None else (
            partition_of(owner, self.partitions) if owner else random.randrange(self.partitions))
        with self._seq_lock:
            nxt, end = self._seq_blocks.get(p, (0, -1))
            while nxt > end:
                k = self.keys
                res = self.scripts.alloc_ids(keys=[k.seq(p), k.gc(p), k.gaps(p)], args=[SEQ_BLOCK])
                if res[0] == "AHEAD":  # no id is handed out before the server's clock
                    wait_us = int(res[1])  # reaches it (alloc_ids.lua): microseconds
                    if wait_us > CLOCK_BEHIND_MAX_US:  # a server clock went back: say so
                        raise MetastoreError(clock_behind(self.url, wait_us / 1e6))
                    time.sleep(wait_us / 1e6)
                    continue
                nxt, end = int(res[1]), int(res[2])
            self._seq_blocks[p] = (nxt + 1, end)
        return TxnId(p, nxt)

    @translate
    def create_txn(self, txn_id: TxnId, timeout_ms: int, owner: str = "",
                   replace: TxnId | None = None) -> TxnHeader:
        p, k = txn_id.partition, self.keys
        if owner and partition_of(owner, self.partitions) != p:
            raise ValueError("an owned transaction must live in its owner's partition")
        res = self.scripts.create_txn(
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

    @translate
    def get_header(self, txn_id: TxnId) -> TxnHeader | None:
        return self.get_headers([txn_id])[txn_id]

    @translate
    def get_headers(self, txn_ids: Sequence[TxnId]) -> dict[TxnId, TxnHeader | None]:
        out: dict[TxnId, TxnHeader | None] = dict.fromkeys(txn_ids)  # forged ids: None
        ids = [t for t in out if in_id_space(t, self.partitions)]
        pipe = self.r.pipeline(transaction=False)
        for t in ids:
            pipe.hgetall(self.keys.header(t.partition, t.seq))
        out.update((t, header_from(t, h) if h else None) for t, h in zip(ids, pipe.execute()))
        return out

    @translate
    def find_owner(self, owner: str) -> TxnId | None:
        p = partition_of(owner, self.partitions)
        seq = self.r.hget(self.keys.owners(p), owner)
        return TxnId(p, int(seq)) if seq else None

    @translate
    def end_txn(self, txn_id: TxnId, target: TxnState, winners: Iterable[str] | None,
                segments: Iterable[str] | None = None, sink: SinkBatch | None = None,
                made: tuple[int, int] = (0, 0)) -> tuple[TxnHeader, bool, bool]:
        """The single CAS, O(1) in the segments written. Returns (header, changed, timed_out).

        ``winners`` None means every writer that recorded a position (a scan of
        the write records). ``segments`` is not needed by the CAS (kept for the API).
        ``sink``: a Spark sink batch whose progress the same CAS advances on commit.
        ``made``: the write registrations and ack record calls the committing process
        made; a commit that finds fewer aborts and raises TxnRecordsLost.
        """
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        win_arg = "*" if winners is None else json.dumps(sorted(set(winners)))
        keys = [k.header(p, seq), k.writes(p, seq), k.deadlines(p), k.finalized(p),
                k.unmaterialized(p), k.events(p), k.counters(p)]
        args = [seq, target.value, win_arg, self.event_maxlen, made[0], made[1]]
        if sink is not None:
            if partition_of(sink.sink_id, self.partitions) != p:
                raise ValueError(f"transaction {txn_id} is not in sink {sink.sink_id}'s partition")
            keys.append(k.sink(p, sink.sink_id))
            args += [sink.batch_id, sink.query_id]
        if self.durability == "waitaof":  # the wait must run on the decision's connection
            conn = self.one_connection(keys[0], WAITAOF_MS / 1000 + 5)
            try:
                res = self.scripts.end_txn(keys=keys, args=args, client=conn)
                if res[0] == "ALREADY":  # wrote nothing: WAITAOF must follow a write of ours
                    conn.incr(k.fsync_mark(p))
                local, _replicas = conn.execute_command("WAITAOF", 1, 0, WAITAOF_MS)
                if res[0] in ("OK", "ALREADY") and int(local) >= 1:
                    self.mark_fsynced_after_wait(conn, keys[0], res[1])  # readers trust it
            finally:
                conn.connection_pool.disconnect()
            if res[0] in ("OK", "ALREADY") and int(local) < 1:
                raise MetastoreUnavailable("the decision was not fsynced within 10 s "
                                           "(WAITAOF); ending the transaction again tells "
                                           "its outcome")
        else:
            res = self.scripts.end_txn(keys=keys, args=args)
        status = res[0]
        if status == "NOTFOUND":
            self.check_deployment()  # a header gone with the whole namespace: say so
            raise TxnNotFound(f"transaction {txn_id} not found")
        if status == "FENCED":
            raise SinkFenced(f"sink {sink.sink_id} now belongs to query {res[1]}; batch "
                             f"{sink.batch_id} of query {sink.query_id} is not committed")
        if status == "CONFLICT":
            check_transition(str(txn_id), TxnState(res[1]), target)  # raises
        fields = dict(zip(res[3::2], res[4::2]))
        if status == "OK" and res[2] == "2":
            raise TxnRecordsLost(str(txn_id), made, (int(fields.get("wv", 0)),
                                                    int(fields.get("an", 0))))
        return header_from(txn_id, fields), status == "OK", status == "OK" and res[2] == "1"

    @translate
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
            status = self.scripts.materialize_txn(
                keys=keys, args=[seq, self.event_maxlen, len(segs), *segs])[0]
            if status != "RETRY":
                return MATERIALIZED[status]
            segs = None  # the caller did not know every segment: read the records
        raise MetastoreUnavailable(f"transaction {txn_id}: could not list its segments")

    @translate
    def unmaterialized_txns(self, limit: int = 1000) -> list[TxnId]:
        pipe = self.r.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.zrange(self.keys.unmaterialized(p), 0, limit - 1)
        return [TxnId(p, int(s)) for p, seqs in enumerate(pipe.execute()) for s in seqs]

    @translate
    def expired_txns(self, limit: int = 1000) -> list[TxnId]:
        # every sweep starts here: a sweeper of a reset metastore stops (raises)
        # instead of aborting or collecting the new deployment's transactions
        self.check_deployment()
        now = self.server_time_ms()
        pipe = self.r.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.zrangebyscore(self.keys.deadlines(p), "-inf", now, start=0, num=limit)
        return [TxnId(p, int(s)) for p, seqs in enumerate(pipe.execute()) for s in seqs]

    @translate
    def open_txns(self) -> list[tuple[TxnId, int]]:
        pipe = self.r.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.zrange(self.keys.deadlines(p), 0, -1, withscores=True)
        return [(TxnId(p, int(s)), int(sc)) for p, rows in enumerate(pipe.execute())
                for s, sc in rows]

    @translate
    def finalized_txns(self, before_ms: int | None = None,
                       limit: int = 1000) -> list[tuple[TxnId, int]]:
        hi = "+inf" if before_ms is None else before_ms
        pipe = self.r.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.zrangebyscore(self.keys.finalized(p), "-inf", hi, start=0, num=limit,
                               withscores=True)
        return [(TxnId(p, int(s)), int(sc)) for p, rows in enumerate(pipe.execute())
                for s, sc in rows]

    @translate
    def gc_txn(self, txn_id: TxnId, cutoff_ms: int) -> Collected:
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        return self.collect_fsynced(txn_id, lambda fs: COLLECTED[self.scripts.gc_txn(
            keys=[k.header(p, seq), k.writes(p, seq), k.acks(p, seq), k.finalized(p),
                  k.owners(p), k.live(p), k.collected(p), k.gc(p), k.gaps(p), k.seq(p)],
            args=[seq, cutoff_ms, fs])[0]])

    @translate
    def collected(self, txn_ids: Sequence[TxnId]) -> set[TxnId]:
        """The ids known to be collected (fail closed): in the collected set, or at or
        below the watermark and outside every gap of possibly lost ids. A missing header
        of any other id is unknown: lost with a rollback of the store, or foreign."""
        k = self.keys
        txn_ids = [t for t in txn_ids if in_id_space(t, self.partitions)]
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
            in_gap = bool(gap) and decode_gap(gap[0])[1] >= t.seq
            if in_set is not None or (not in_gap and t.seq <= int(w or 0)):
                out.add(t)
        return out

    @translate
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
            for key in self.r.scan_iter(match=k.open_writes(p, "*"), count=1000):
                segment = k.open_writes_segment(p, key)
                members = self.r.zrange(key, 0, -1)
                first = [m for m in members if not is_pending_write(m)][:1]
                n, low = writes.get(segment, (0, None))
                pos = decode_open_write(first[0])[0] if first else None
                writes[segment] = (n + len(members),
                                   min(x for x in (low, pos) if x is not None)
                                   if (low or pos) else None)
            for key in self.r.scan_iter(match=k.sink(p, "*"), count=1000):
                batch = self.r.hget(key, "batch")
                if batch is not None:
                    sinks[k.sink_id(p, key)] = int(batch)
        return {"counters": counters, "open": n_open, "oldest_open_created_ms": oldest,
                "unmaterialized": unmat, "gc_backlog": backlog, "open_writes": writes,
                "sinks": sinks, "now_ms": self.server_time_ms()}

    @translate
    def server_time_ms(self) -> int:
        s, us = self.r.time()
        return s * 1000 + us // 1000

    # ---- Spark sink progress ----
    def _sink_key(self, sink_id: str) -> str:
        return self.keys.sink(partition_of(sink_id, self.partitions), sink_id)

    @translate
    def bind_sink(self, sink_id: str, query_id: str, rebind: bool = False) -> int:
        """Bind the sink id to the query (see bind_sink.lua); its last committed batch."""
        res = self.scripts.bind_sink(keys=[self._sink_key(sink_id)],
                                     args=[query_id, "1" if rebind else "0"])
        if res[0] == "OTHER":
            raise SinkBoundToOtherQuery(sink_id, res[1])
        if res[0] == "MOVED":
            raise SinkIdMovedAway(sink_id, res[1], int(res[2]))
        return int(res[1])

    @translate
    def sink_progress(self, sink_id: str) -> tuple[int, str | None]:
        """(last committed batchId or -1, the query id the sink belongs to or None)."""
        batch, qid = self.r.hmget(self._sink_key(sink_id), "batch", "qid")
        return (int(batch) if batch is not None else -1), qid

    def sink_last_batch(self, sink_id: str) -> int:
        return self.sink_progress(sink_id)[0]

    # ---- notification ----
    def watch(self, callback: Callable[[TxnEvent], None]) -> RedisWatch:
        w = RedisWatch(self, callback)
        w.start()
        w.ready.wait(5)
        return w
