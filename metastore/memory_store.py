"""MemoryMetadataStore: the metadata store held in this process's memory.

Why a second backend: the roles (coordinator, buffer, pending acks, writer runs)
depend only on the MetadataStore Protocol, and PIP-473's own classes are tested
against an in-memory metadata store. This one lets the roles' logic be tested in
milliseconds, and keeps the Protocol honest: tests/test_store_contract.py runs one
suite against it and against Redis. It is a backend, not a mock: the Lua scripts
in ``lua/`` are its specification, each method naming the script it follows, with
the same answers and the same typed errors as RedisMetadataStore. Every method
holds the one lock of the state and checks everything before its first change, so
each call is one atomic step, as a script is.

Server time is the injectable ``clock`` (ms), read where the scripts read TIME
(ids follow the wall clock, as theirs follow TIME). Never durable; tests restore a
saved copy (``save_state``/``restore_state``), which opens gaps of lost ids as Redis does.

Five modules, each under the size a reader takes in at once: this façade
(transactions, writes, sinks), ``memory_state`` (the records and indexes),
``memory_acks`` (claim tables and ack records), ``memory_layouts`` (scalable-topic
DAGs) and ``memory_watch`` (the watch threads).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import parse_qs, urlparse

from pulsar_txn.errors import (
    ConfigError,
    PulsarTxnError,
    SinkBoundToOtherQuery,
    SinkFenced,
    SinkIdMovedAway,
    TxnIdStale,
    TxnNotFound,
    TxnRecordsLost,
)
from pulsar_txn.records import (
    WIRE_ONE,
    EventKind,
    OpenWrite,
    Position,
    SinkBatch,
    TxnEvent,
    TxnHeader,
    TxnId,
    WriteRecord,
    in_id_space,
    partition_of,
)
from pulsar_txn.state import TxnState, check_transition

from .base import Collected, Materialized
from .keys import Keys
from .memory_acks import AckTables
from .memory_fsync import MemoryFsync
from .memory_layouts import Layouts
from .memory_namespace import NAMED as _NAMED  # noqa: F401 (tests reset states through it)
from .memory_namespace import MemoryNamespace, named_server
from .memory_state import Partition, Server, Txn, by_score, wall_ms, wall_us
from .memory_watch import MemoryWatch

DEFAULT_PARTITIONS = 16  # the Redis store's: ids and owners' partitions depend on P
PENDING_LISTED = 64  # open_writes lists at most this many pending registrations per partition



class MemoryMetadataStore(MemoryFsync, MemoryNamespace, AckTables, Layouts):
    """Transaction metadata in this process: headers, records, indexes, events.

    ``name``: clients built with the same name and namespace share one state, as
    clients of one Redis server do (None: a private state). ``clock``: server time
    in ms, fixed by the state's first client.
    """

    def __init__(self, name: str | None = None, namespace: str = "ptxn",
                 partitions: int | None = None, clock: Callable[[], int] | None = None,
                 wire_format: int = WIRE_ONE, create: bool = True,
                 durability: str = "strict") -> None:
        """``create`` False: a reader's open of a named state, which never creates the
        namespace (as RedisMetadataStore); a private state is always new.
        ``durability``: as Redis URLs' option; ``waitaof`` models a disk that lags
        (appendfsync everysec): decisions wait for their fsync as on Redis, and
        ``Server.host_crash`` falls back to the last one (tests)."""
        if durability not in ("strict", "waitaof", "relaxed"):
            raise ConfigError(f"metastore.url option durability={durability!r}: use strict, "
                              "waitaof or relaxed")
        Keys(namespace, 1)  # the same namespace rule as Redis
        if name is None:
            server = Server(partitions or DEFAULT_PARTITIONS, clock or wall_ms, wire_format)
        else:
            server = named_server(name, namespace, create, lambda: Server(
                partitions or DEFAULT_PARTITIONS, clock or wall_ms, wire_format))
        if partitions is not None and partitions != server.partitions:
            raise ConfigError(f"metastore partitions={partitions} but namespace {namespace!r} "
                              f"was created with {server.partitions}")
        if clock is not None and clock is not server.clock:
            raise ConfigError(f"memory store {name!r}: its clock was fixed by its first client")
        self._s = server
        # a private state gets a URL of its own: per-store throttles key on it
        self.url = f"memory://{name if name is not None else 'private-' + uuid.uuid4().hex[:8]}"
        self.keys = Keys(namespace, server.partitions)  # this backend's own, as Redis's
        self.namespace = namespace
        self.partitions = server.partitions
        self.deployment = server.deployment
        self.wire_format = server.wire_format
        self.durability = durability
        if durability == "waitaof" and server.disk is None:
            server.fsync()
        self._closed = False
        self._watches: list = []

    @classmethod
    def from_url(cls, url: str, namespace: str = "ptxn", partitions: int | None = None,
                 create: bool = True) -> MemoryMetadataStore:
        """``memory://`` (a private state) or ``memory://<name>`` (shared in the
        process); ``?namespace=`` as for Redis URLs."""
        parsed = urlparse(url)
        if parsed.scheme != "memory":
            raise ConfigError(f"metastore.url {url!r}: not a memory:// URL")
        query = parse_qs(parsed.query)
        namespace = query.get("namespace", [namespace])[0]
        name = (parsed.netloc + parsed.path).strip("/") or None
        return cls(name, namespace=namespace, partitions=partitions, create=create,
                   durability=query.get("durability", ["strict"])[0])

    def still_current(self) -> bool:
        """The state lives as long as the process, so only this client's close ends it
        (a worker that keeps stores between jobs then opens a fresh one)."""
        return not self._closed and self.wire_format == self._s.wire_format

    def close(self) -> None:
        """Stops the watches this client started: nothing else holds their threads."""
        self._closed = True
        for w in self._watches:
            w.close()
        self._watches.clear()

    # ---- transactions ----
    def next_txn_id(self, owner: str = "", partition: int | None = None) -> TxnId:
        """alloc_ids.lua with a block of one: no cache of ids to go stale; an id is
        handed out once the clock reaches it (waits a few microseconds at most)."""
        if partition is None:
            partition = (partition_of(owner, self.partitions) if owner
                         else random.randrange(self.partitions))
        while True:
            with self._s.lock:
                part = self._s.part(partition)
                self._s.check_epoch(part)
                if part.counter < wall_us():
                    part.counter += 1
                    return TxnId(partition, part.counter)
            time.sleep(1e-6)

    def create_txn(self, txn_id: TxnId, timeout_ms: int, owner: str = "",
                   replace: TxnId | None = None) -> TxnHeader:
        """create_txn.lua."""
        p, seq = txn_id.partition, txn_id.seq
        if owner and partition_of(owner, self.partitions) != p:
            raise ValueError("an owned transaction must live in its owner's partition")
        with self._s.lock:
            part = self._s.part(p)
            self._s.check_epoch(part)
            if owner:
                existing = part.owners.get(owner)
                if existing is not None and existing != (replace.seq if replace else None):
                    txn = part.txns.get(existing)
                    if txn is not None:
                        return txn.header(TxnId(p, existing))
                    # a mapping to a collected header is stale: Redis replaces it
            txn = part.txns.get(seq)
            if txn is not None:  # a retried create whose first attempt landed
                if txn.owner != owner:
                    raise PulsarTxnError(f"transaction id {txn_id} already in use")
                return txn.header(txn_id)
            if seq <= part.watermark or part.in_gap(seq) or seq > wall_us():
                raise TxnIdStale(f"transaction id {txn_id} can no longer be created")
            now = self._s.now()
            txn = part.txns[seq] = Txn(now + int(timeout_ms), now, owner)
            part.deadlines[seq] = txn.deadline
            if owner:
                part.owners[owner] = seq
            part.counter = max(part.counter, seq)
            part.counters["opened"] += 1
            return txn.header(txn_id)

    def get_header(self, txn_id: TxnId) -> TxnHeader | None:
        if not in_id_space(txn_id, self.partitions):
            return None  # no transaction of this store (e.g. an entry's forged id)
        with self._s.lock:
            txn = self._s.part(txn_id.partition).txns.get(txn_id.seq)
            return txn.header(txn_id) if txn is not None else None

    def get_headers(self, txn_ids: Sequence[TxnId]) -> dict[TxnId, TxnHeader | None]:
        with self._s.lock:
            return {t: self.get_header(t) for t in txn_ids}

    def find_owner(self, owner: str) -> TxnId | None:
        p = partition_of(owner, self.partitions)
        with self._s.lock:
            seq = self._s.part(p).owners.get(owner)
            return TxnId(p, seq) if seq is not None else None

    def end_cas(self, txn_id: TxnId, target: TxnState, winners: Iterable[str] | None,
                sink: SinkBatch | None, made: tuple[int, int]
                ) -> tuple[TxnHeader, bool, bool]:
        p, seq = txn_id.partition, txn_id.seq
        if sink is not None and partition_of(sink.sink_id, self.partitions) != p:
            raise ValueError(f"transaction {txn_id} is not in sink {sink.sink_id}'s partition")
        chosen = None if winners is None else tuple(sorted(set(winners)))
        with self._s.lock:
            part = self._s.part(p)
            txn = part.txns.get(seq)
            if txn is None:
                raise TxnNotFound(f"transaction {txn_id} not found")
            if sink is not None and target is TxnState.COMMITTED:
                bound = part.sinks.get(sink.sink_id, {}).get("qid")
                if bound is not None and bound != sink.query_id:
                    raise SinkFenced(f"sink {sink.sink_id} now belongs to query {bound}; batch "
                                     f"{sink.batch_id} of query {sink.query_id} is not committed")
            if txn.state is target:
                if target is TxnState.COMMITTED:
                    self._advance_sink(part, sink, seq)
                return txn.header(txn_id), False, False
            if txn.state is not TxnState.OPEN:
                check_transition(str(txn_id), txn.state, target)  # raises
            now = self._s.now()
            timed_out = target is TxnState.COMMITTED and now > txn.deadline
            found = (txn.write_version, txn.ack_calls)
            lost = (target is TxnState.COMMITTED and not timed_out
                    and (found[0] < made[0] or found[1] < made[1]))
            final = TxnState.ABORTED if timed_out or lost else target
            if final is TxnState.COMMITTED:
                txn.winners = chosen if chosen is not None else tuple(dict.fromkeys(
                    w for (_, w), (first, _) in txn.writes.items() if first))
            txn.state, txn.finalized, txn.materialized = final, now, False
            if final is TxnState.COMMITTED:
                self._advance_sink(part, sink, seq)
            part.deadlines.pop(seq, None)
            part.finalized[seq] = part.unmaterialized[seq] = now
            self._s.publish(TxnEvent(EventKind.END, txn_id, final))
            part.counters["committed" if final is TxnState.COMMITTED else "aborted"] += 1
            if final is TxnState.ABORTED and now > txn.deadline:
                part.counters["timed_out"] += 1
            if lost:
                raise TxnRecordsLost(str(txn_id), made, found)
            return txn.header(txn_id), True, timed_out

    @staticmethod
    def _advance_sink(part: Partition, sink: SinkBatch | None, seq: int) -> None:
        if sink is None:
            return
        if sink.batch_id > part.sinks.get(sink.sink_id, {}).get("batch", -1):
            part.sinks.setdefault(sink.sink_id, {}).update(
                batch=sink.batch_id, txn=seq, qid=sink.query_id)

    def materialize_txn(self, txn_id: TxnId,
                        segments: Iterable[str] | None = None) -> Materialized:
        """materialize_txn.lua. ``segments`` is only a hint (Redis needs the keys up
        front): the write records say where the txn wrote."""
        p, seq = txn_id.partition, txn_id.seq
        named = sorted(set(segments)) if segments is not None else None
        with self._s.lock:
            part = self._s.part(p)
            txn = part.txns.get(seq)
            if txn is None:
                return Materialized.GONE
            if txn.state is TxnState.OPEN:
                return Materialized.OPEN
            if txn.materialized:
                return Materialized.ALREADY
            recorded = sorted({s for s, _ in txn.writes})
            segs = named if named is not None and set(recorded) <= set(named) else recorded
            winners = set(txn.winners) if txn.state is TxnState.COMMITTED else set()
            for segment, writer in txn.writes:
                index = part.open_writes.get(segment, {})
                index.pop((seq, writer), None)
                if not index:
                    part.open_writes.pop(segment, None)
                if writer not in winners:
                    part.aborted.setdefault(segment, set()).add((seq, writer))
            txn.materialized = True
            part.unmaterialized.pop(seq, None)
            self._s.publish(TxnEvent(EventKind.MAT, txn_id, None, tuple(segs)))
            return Materialized.DONE

    def _ids(self, index: str, hi: int | None, limit: int | None) -> list[tuple[TxnId, int]]:
        with self._s.lock:
            return [(TxnId(p, seq), score) for p in range(self.partitions)
                    for seq, score in by_score(getattr(self._s.part(p), index), hi, limit)]

    def unmaterialized_txns(self, limit: int = 1000) -> list[TxnId]:
        return [t for t, _ in self._ids("unmaterialized", None, limit)]

    def expired_txns(self, limit: int = 1000) -> list[TxnId]:
        return [t for t, _ in self._ids("deadlines", self._s.now(), limit)]

    def open_txns(self) -> list[tuple[TxnId, int]]:
        return self._ids("deadlines", None, None)

    def finalized_txns(self, before_ms: int | None = None,
                       limit: int = 1000) -> list[tuple[TxnId, int]]:
        return self._ids("finalized", before_ms, limit)

    def gc_txn(self, txn_id: TxnId, cutoff_ms: int) -> Collected:
        """gc_txn.lua: remove the records, record the id as collected, move the
        watermark up to the oldest live id. The aborted-writer sets stay (H2)."""
        seq = txn_id.seq
        with self._s.lock:
            part = self._s.part(txn_id.partition)
            self._s.check_epoch(part)
            txn = part.txns.get(seq)
            if txn is None or txn.kept:
                part.finalized.pop(seq, None)
                return Collected.GONE
            if txn.state is TxnState.OPEN:
                return Collected.OPEN
            if not txn.materialized:
                return Collected.UNMATERIALIZED
            if txn.finalized > cutoff_ms:
                return Collected.YOUNG
            if not self.decision_on_disk(txn_id):  # a collected id reads as committed
                return Collected.UNFSYNCED
            if txn.state is TxnState.COMMITTED and txn.open_acks > 0:
                return Collected.ACKS_PENDING
            if txn.owner and part.owners.get(txn.owner) == seq:
                del part.owners[txn.owner]
            kept = part.collect(seq)  # KEPT: lived across a server change (gc_txn.lua)
            return Collected.KEPT if kept else Collected.DONE

    def collected(self, txn_ids: Sequence[TxnId]) -> set[TxnId]:
        out = set()
        with self._s.lock:
            for t in txn_ids:
                if not in_id_space(t, self.partitions):
                    continue
                part = self._s.part(t.partition)
                if t.seq in part.collected or (t.seq <= part.watermark
                                               and not part.in_gap(t.seq)):
                    out.add(t)
        return out

    def metrics_snapshot(self, max_open: int = 10_000) -> dict:
        """As the Redis store's (see there for what each entry means)."""
        with self._s.lock:
            counters = {"opened": 0, "committed": 0, "aborted": 0, "timed_out": 0}
            created: list[int] = []
            n_open = unmat = backlog = 0
            writes: dict[str, tuple[int, Position | None]] = {}
            sinks: dict[str, int] = {}
            for p in range(self.partitions):
                part = self._s.part(p)
                for name in counters:
                    counters[name] += part.counters[name]
                created += [part.txns[s].created for s, _ in
                            by_score(part.deadlines, None, max_open) if s in part.txns]
                n_open += len(part.deadlines)
                unmat += len(part.unmaterialized)
                backlog += len(part.finalized)
                for segment, index in part.open_writes.items():
                    n, low = writes.get(segment, (0, None))
                    firsts = [Position.decode(f) for f in index.values() if f]
                    lows = [x for x in (low, min(firsts, default=None)) if x is not None]
                    writes[segment] = (n + len(index), min(lows) if lows else None)
                sinks.update({s: r["batch"] for s, r in part.sinks.items() if "batch" in r})
            return {"counters": counters, "open": n_open,
                    "oldest_open_created_ms": min(created) if created else None,
                    "unmaterialized": unmat, "gc_backlog": backlog, "open_writes": writes,
                    "sinks": sinks, "now_ms": self._s.now()}

    # ---- writes ----
    def register_write(self, txn_id: TxnId, segment: str, writer: str) -> int:
        """register_write.lua: the H1/H3 fence, before the first append; the wire
        format the run's appends carry."""
        with self._s.lock:
            part = self._s.part(txn_id.partition)
            txn = self._s.open_txn(txn_id, check_deadline=True)
            wire = self._s.wire_format
            txn.wire_forms.add(wire)
            if (segment, writer) in txn.writes:
                return wire
            txn.writes[(segment, writer)] = ["", ""]
            txn.write_version += 1
            part.open_writes.setdefault(segment, {})[(txn_id.seq, writer)] = ""
            return wire

    def record_write(self, txn_id: TxnId, segment: str, writer: str,
                     first: Position | None, last: Position | None) -> None:
        """record_write.lua: the first position is kept once recorded."""
        with self._s.lock:
            part = self._s.part(txn_id.partition)
            txn = self._s.open_txn(txn_id, check_deadline=False)
            rec = txn.writes.get((segment, writer))
            if rec is None:
                raise PulsarTxnError(f"transaction {txn_id}: write recorded before registration")
            if not rec[0] and first is not None:
                rec[0] = first.encode()
                part.open_writes.setdefault(segment, {})[(txn_id.seq, writer)] = rec[0]
                self._s.publish(TxnEvent(EventKind.POS, txn_id, None, (segment,)))
            if last is not None:
                rec[1] = last.encode()

    def withdraw_write(self, txn_id: TxnId, segment: str, writer: str) -> bool:
        """withdraw_write.lua: only a registration with no position recorded."""
        with self._s.lock:
            part = self._s.part(txn_id.partition)
            txn = part.txns.get(txn_id.seq)
            if txn is None or txn.writes.get((segment, writer)) != ["", ""]:
                return False
            del txn.writes[(segment, writer)]
            index = part.open_writes.get(segment, {})
            index.pop((txn_id.seq, writer), None)
            if not index:
                part.open_writes.pop(segment, None)
            return True

    def list_writes(self, txn_id: TxnId) -> tuple[list[WriteRecord], int]:
        with self._s.lock:
            txn = self._s.part(txn_id.partition).txns.get(txn_id.seq)
            if txn is None:
                return [], 0
            return [WriteRecord(s, w, Position.decode(f) if f else None,
                                Position.decode(la) if la else None)
                    for (s, w), (f, la) in txn.writes.items()], txn.write_version

    def open_writes(self, segment: str, skip: Iterable[TxnId] = ()) -> list[OpenWrite]:
        """Per partition, as Redis answers: the pending registrations (up to 64) and
        the lowest recorded first position, leaving out the txns in ``skip``."""
        gone: dict[int, set[int]] = {}
        for t in skip:
            gone.setdefault(t.partition, set()).add(t.seq)
        out: list[OpenWrite] = []
        with self._s.lock:
            for p in range(self.partitions):
                index = self._s.part(p).open_writes.get(segment, {})
                members = sorted((f"{first or '!'}|{seq}|{w}", seq, w, first)
                                 for (seq, w), first in index.items()
                                 if seq not in gone.get(p, ()))
                pending = 0
                for _, seq, w, first in members:
                    if first:
                        out.append(OpenWrite(TxnId(p, seq), w, Position.decode(first)))
                        break
                    if pending < PENDING_LISTED:
                        out.append(OpenWrite(TxnId(p, seq), w, None))
                        pending += 1
        return out

    def aborted_writers(self, segment: str, pairs: Iterable[tuple[TxnId, str]]
                        ) -> set[tuple[TxnId, str]]:
        with self._s.lock:
            return {(t, w) for t, w in pairs if in_id_space(t, self.partitions)
                    and (t.seq, w) in self._s.part(t.partition).aborted.get(segment, ())}

    # ---- Spark sink progress ----
    def bind_sink(self, sink_id: str, query_id: str, rebind: bool = False) -> int:
        """bind_sink.lua."""
        with self._s.lock:
            sinks = self._s.part(partition_of(sink_id, self.partitions)).sinks
            bound = sinks.get(sink_id, {}).get("qid")
            if bound == query_id:
                return sinks[sink_id].get("batch", -1)
            rec = sinks.setdefault(sink_id, {})
            if f"moved:{query_id}" in rec:
                raise SinkIdMovedAway(sink_id, bound or "", rec[f"moved:{query_id}"])
            if bound is not None and not rebind:
                raise SinkBoundToOtherQuery(sink_id, bound)
            if bound is not None:  # kept, never erased: that query can never come back
                rec[f"moved:{bound}"] = rec.get("batch", -1)
            rec.pop("txn", None)
            rec.update(qid=query_id, batch=-1)
            return -1

    def sink_progress(self, sink_id: str) -> tuple[int, str | None]:
        with self._s.lock:
            rec = self._s.part(partition_of(sink_id, self.partitions)).sinks.get(sink_id, {})
            return rec.get("batch", -1), rec.get("qid")

    def sink_last_batch(self, sink_id: str) -> int:
        return self.sink_progress(sink_id)[0]

    # ---- notification ----
    def watch(self, callback: Callable[[TxnEvent], None]) -> MemoryWatch:
        w = MemoryWatch(self._s.txn_watches, self._s.lock, callback).begin()
        self._watches.append(w)
        return w
