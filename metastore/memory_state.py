"""The in-memory store's state: what a Redis server holds for one namespace.

Why apart from the façade: these are the records and indexes the Lua scripts
read and write (keys.py names their Redis keys), kept as plain Python values, and
the store's mixins (memory_acks, memory_layouts) share them. Sorted sets become
dicts of member -> score, read in Redis's order (see ``by_score``).
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections.abc import Callable

from pulsar_txn.errors import MetastoreError, TxnNotFound, TxnNotOpen, TxnTimedOut
from pulsar_txn.records import WIRE_ONE, EventKind, TxnEvent, TxnHeader, TxnId
from pulsar_txn.state import TxnState


def wall_ms() -> int:
    return int(time.time() * 1000)


def wall_us() -> int:
    """The clock ids are tied to (_epoch.lua reads the server's TIME): the wall clock,
    never the injectable one, which tests hold still while they hand out ids."""
    return time.time_ns() // 1000


def decode(raw: str) -> dict:
    try:
        return json.loads(raw)
    except ValueError as e:  # cjson fails the script the same way
        raise MetastoreError(f"malformed segment descriptor {raw!r}: {e}") from None


def by_score(zset: dict[int, int], hi: int | None = None,
              limit: int | None = None) -> list[tuple[int, int]]:
    """A sorted set's (member, score) pairs as Redis orders them: by score, then by
    the member's text (ids compare as strings there)."""
    rows = sorted((score, str(seq), seq) for seq, score in zset.items()
                  if hi is None or score <= hi)
    return [(seq, score) for score, _, seq in rows[:limit]]


class Txn:
    """A header with its write and ack records, which share its fate (gc_txn)."""

    def __init__(self, deadline: int, created: int, owner: str) -> None:
        self.state = TxnState.OPEN
        self.deadline, self.created, self.owner = deadline, created, owner
        self.finalized: int | None = None
        self.winners: tuple[str, ...] = ()
        self.materialized = False
        self.write_version = 0  # registrations so far (list_writes' count)
        self.open_acks = 0  # ack records not marked applied
        self.ack_calls = 0  # record_acks calls (end_txn's records-lost check)
        self.wire_forms: set[int] = set()  # the forms its runs registered in
        self.writes: dict[tuple[str, str], list[str]] = {}  # (segment, writer) -> [first, last]
        self.acks: dict[tuple[str, str], dict] = {}  # (segment, subscription) -> record
        self.kept = False  # lived across a server change: collected, its header kept

    def header(self, txn_id: TxnId) -> TxnHeader:
        return TxnHeader(txn_id, self.state, self.deadline, self.created, self.finalized,
                         self.owner, frozenset(self.winners), self.open_acks)


class Partition:
    """One partition's records and indexes (a hash-tag slot in Redis, keys.py)."""

    def __init__(self) -> None:
        self.counter = 0
        self.watermark = 0  # every id at or below it is collected or can never be created
        self.collected: set[int] = set()  # collected ids above the watermark
        self.run: str | None = None  # the server start this state was last used on
        self.gaps: list[tuple[int, int]] = []  # id ranges that may have been lost (ordered)
        self.txns: dict[int, Txn] = {}
        self.deadlines: dict[int, int] = {}  # OPEN txns
        self.finalized: dict[int, int] = {}
        self.unmaterialized: dict[int, int] = {}
        self.owners: dict[str, int] = {}
        self.counters = {"opened": 0, "committed": 0, "aborted": 0, "timed_out": 0}
        # segment -> {(seq, writer): first position ('' = registered, none recorded)}
        self.open_writes: dict[str, dict[tuple[int, str], str]] = {}
        self.aborted: dict[str, set[tuple[int, str]]] = {}  # segment -> {(seq, writer)}
        self.sinks: dict[str, dict] = {}  # sink id -> batch, txn, qid

    def in_gap(self, seq: int) -> bool:
        return any(first <= seq <= last for first, last in self.gaps)

    def collect(self, seq: int) -> bool:
        """gc_txn.lua's removal and durable trace of an ended txn; True: kept (its id
        lies in a gap, it lived across a server change: its header stays the truth)."""
        kept = self.in_gap(seq)
        if kept:
            txn = self.txns[seq]
            txn.kept, txn.writes, txn.acks = True, {}, {}
        else:
            del self.txns[seq]
        self.finalized.pop(seq, None)
        if seq > self.watermark and not kept:
            self.collected.add(seq)
        live = [s for s, t in self.txns.items() if not t.kept]
        mark = min(live) - 1 if live else self.counter
        if mark > self.watermark:
            self.watermark = mark
            self.collected = {s for s in self.collected if s > mark or self.in_gap(s)}
        return kept


class Topic:
    def __init__(self, segs: dict[int, str], next_id: int, created: int, hash_fn: str) -> None:
        self.epoch, self.next, self.created, self.version = 1, next_id, created, 1
        self.hash_fn = hash_fn
        self.segs = segs  # id -> descriptor JSON


class Server:
    """What a Redis server holds for one namespace: shared by every client of it."""

    def __init__(self, partitions: int, clock: Callable[[], int],
                 wire_format: int = WIRE_ONE) -> None:
        self.lock = threading.RLock()
        self.partitions = partitions
        self.wire_format = wire_format
        self.clock = clock
        self.deployment = uuid.uuid4().hex[:12]
        self.run_id = uuid.uuid4().hex  # a server start; a restore is a new one
        self.starts = 0  # restores so far (MemoryMetadataStore.server_starts)
        self.parts: dict[int, Partition] = {}
        self.claims: dict[tuple[str, str], dict[str, str]] = {}
        self.topics: dict[str, Topic] = {}
        self.topic_names: set[str] = set()
        self.txn_watches: list = []
        self.topic_watches: list = []
        # the disk under appendfsync everysec (stores opened with durability=waitaof):
        # the records as of the last fsync, which a crash of the host falls back to;
        # a stalled disk confirms no fsync (Redis's WAITAOF times out)
        self.disk: dict | None = None
        self.disk_stalled = False

    def now(self) -> int:
        return int(self.clock())

    # ---- server starts (_epoch.lua) ----
    def check_epoch(self, part: Partition) -> None:
        """_epoch.lua: on the first use of a partition's state by this server start,
        the ids that may have been handed out and lost become a gap, and the counter
        jumps to the clock (see there why the clock)."""
        if part.run == self.run_id:
            return
        top = max(part.counter, wall_us())
        first = max(part.watermark, part.gaps[-1][1] if part.gaps else 0) + 1
        if top >= first:
            part.gaps.append((first, top))
        part.counter, part.run = top, self.run_id

    def save(self) -> dict:
        """A copy of what a backup holds (the records, not the clients or watches)."""
        with self.lock:
            return copy.deepcopy({"parts": self.parts, "claims": self.claims,
                                  "topics": self.topics, "topic_names": self.topic_names,
                                  "deployment": self.deployment,
                                  "wire_format": self.wire_format})

    def restore(self, saved: dict) -> None:
        """Start again from a saved copy: a new server start on an earlier state."""
        state = copy.deepcopy(saved)
        with self.lock:
            if self.disk is not None:  # the restored copy is what the disk holds now
                self.disk = copy.deepcopy(saved)
            self.parts, self.claims = state["parts"], state["claims"]
            self.topics, self.topic_names = state["topics"], state["topic_names"]
            self.deployment, self.wire_format = state["deployment"], state["wire_format"]
            self.run_id = uuid.uuid4().hex
            self.starts += 1
            self.publish(TxnEvent(EventKind.RESYNC))  # watchers missed what was lost

    def wipe(self) -> None:
        """Every record deleted (an operator's reset of the namespace's keys)."""
        with self.lock:
            self.parts, self.claims, self.topics, self.topic_names = {}, {}, {}, set()
            self.disk = None

    # ---- the disk (durability=waitaof) ----
    def fsync(self) -> bool:
        """Write what the server holds to disk; False if the disk stalls."""
        with self.lock:
            if self.disk_stalled:
                return False
            self.disk = self.save()
            return True

    def on_disk(self, txn_id: TxnId) -> bool:
        """Whether the disk holds ``txn_id``'s decision."""
        with self.lock:
            part = (self.disk or {}).get("parts", {}).get(txn_id.partition)
            txn = part.txns.get(txn_id.seq) if part is not None else None
            return txn is not None and txn.state.is_terminal

    def host_crash(self) -> None:
        """The host dies: the server starts again on what the disk holds."""
        with self.lock:
            self.restore(self.disk if self.disk is not None else self.save())

    def part(self, p: int) -> Partition:
        if not 0 <= p < self.partitions:  # as Redis's key builder (Keys.tag) refuses it
            raise ValueError(f"partition {p} is not one of the namespace's "
                             f"0..{self.partitions - 1}")
        return self.parts.setdefault(p, Partition())

    def open_txn(self, txn_id: TxnId, check_deadline: bool) -> Txn:
        """The OPEN header a write or an ack needs, or the scripts' refusals."""
        txn = self.part(txn_id.partition).txns.get(txn_id.seq)
        if txn is None:
            raise TxnNotFound(f"transaction {txn_id} not found")
        if txn.state is not TxnState.OPEN:
            raise TxnNotOpen(str(txn_id), txn.state.value)
        if check_deadline and self.now() > txn.deadline:
            raise TxnTimedOut(str(txn_id))
        return txn

    def publish(self, ev: TxnEvent) -> None:
        for w in self.txn_watches:
            w.push(ev)

    def publish_topic(self, topic: str) -> None:
        for w in self.topic_watches:
            w.push(topic)
