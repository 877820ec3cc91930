"""Decisions that a crash of the primary's host can no longer lose (``durability=waitaof``).

Why readers need this: the end CAS is visible to every client at once, and under
``appendfsync everysec`` its fsync follows up to about a second later (the committer
waits for it with WAITAOF on its own connection). A reader that delivered a decision
inside that window would show entries that a host crash then turns into an aborted
transaction, and a replay would return fewer rows (invariant 3). So in this mode a
reader acts on a decision only once it is known to be fsynced:

* the committer, once its WAITAOF confirmed, marks the header (``fs``,
  mark_fsynced.lua): a reader that finds the mark needs no round trip of its own, and
  decisions are immutable once fsynced, so readers cache them;
* a reader that finds an unmarked decision (the committer is still waiting, died
  before marking, or ended it in another mode) re-reads those headers, then writes one
  counter and sends WAITAOF, all on one connection: the AOF is written and fsynced in
  order, so a confirmed WAITAOF covers every header it re-read before its write. One
  wait per node for the whole batch, never one per entry; then it marks them.

Not confirmed (the wait timed out, the AOF is off): the decision is reported as not
taken yet (OPEN), and the reader keeps waiting for it, as for any open transaction.

``strict`` needs nothing: with ``appendfsync always`` Redis fsyncs the AOF before it
sends any reply, so no client reads a decision before it is on disk. ``relaxed``
promises nothing here (docs/durability.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import redis

from pulsar_txn.records import TxnHeader, TxnId, in_id_space

from .base import Collected, not_taken
from .keys import Keys
from .replies import header_from, translate
from .scripts import Scripts

READER_WAITAOF_MS = 2_000  # a reader's wait for an fsync (everysec: at most ~1 s)
FSYNCED = "fs"  # the header field mark_fsynced.lua sets


class RedisFsync:
    """Mixin of RedisMetadataStore: the headers readers may act on."""

    r: redis.Redis
    keys: Keys
    partitions: int
    durability: str
    cluster: bool
    scripts: Scripts

    @translate
    def final_headers(self, txn_ids: Sequence[TxnId]) -> dict[TxnId, TxnHeader | None]:
        """get_headers for readers: a decision is given only once a crash of the
        primary's host can no longer lose it (``waitaof``: marked fsynced, or confirmed
        here by one WAITAOF per node for the whole call); until then as not taken."""
        out: dict[TxnId, TxnHeader | None] = dict.fromkeys(txn_ids)  # forged ids: None
        ids = [t for t in out if in_id_space(t, self.partitions)]
        pipe = self.r.pipeline(transaction=False)
        for t in ids:
            pipe.hgetall(self.keys.header(t.partition, t.seq))
        unsure = []
        for t, h in zip(ids, pipe.execute()):
            out[t] = header_from(t, h) if h else None
            if (self.durability == "waitaof" and out[t] is not None
                    and out[t].state.is_terminal and h.get(FSYNCED) != "1"):
                unsure.append(t)
        if unsure:
            confirmed = self.confirm_fsynced(unsure)
            for t in unsure:
                out[t] = confirmed.get(t, not_taken(out[t]))
        return out

    def confirm_fsynced(self, txn_ids: Sequence[TxnId]) -> dict[TxnId, TxnHeader | None]:
        """Re-read these headers and wait for their fsync (see the module's docstring):
        the ones whose fsync WAITAOF confirmed, ended (OPEN ones are left out: not a
        decision), or None if the header is gone by now. Marks the ended ones."""
        by_node: dict[str, tuple[redis.Redis, list[TxnId]]] = {}
        for t in txn_ids:
            key = self.keys.header(t.partition, t.seq)
            if self.cluster:
                node = self.r.get_node_from_key(key)
                by_node.setdefault(node.name, (node.redis_connection, []))[1].append(t)
            else:
                by_node.setdefault("", (self.r, []))[1].append(t)
        out: dict[TxnId, TxnHeader | None] = {}
        for conn, ids in by_node.values():
            out.update(self._confirm_on(conn, ids))
        self._mark({t: h for t, h in out.items() if h is not None})
        return out

    def _confirm_on(self, conn: redis.Redis, ids: list[TxnId]
                    ) -> dict[TxnId, TxnHeader | None]:
        """One node: re-read, write, WAITAOF, on one connection (a pipeline; if it is
        retried on a new connection, the whole of it is, so the order holds)."""
        k = self.keys
        pipe = conn.pipeline(transaction=False)
        for t in ids:
            pipe.hgetall(k.header(t.partition, t.seq))
        pipe.incr(k.fsync_mark(ids[0].partition))
        pipe.execute_command("WAITAOF", 1, 0, READER_WAITAOF_MS)
        try:
            res = pipe.execute(raise_on_error=False)
        except redis.ResponseError:
            return {}
        waited = res[-1]
        if isinstance(res[-2], Exception) or isinstance(waited, Exception) or int(waited[0]) < 1:
            # not confirmed (a timeout, the AOF off), or the write failed (OOM, a slot
            # moved): a WAITAOF after a failed write covers nothing of these headers
            return {}
        out: dict[TxnId, TxnHeader | None] = {}
        for t, h in zip(ids, res):
            if isinstance(h, Exception):
                continue
            header = header_from(t, h) if h else None
            if header is None or header.state.is_terminal:
                out[t] = header
        return out

    def _mark(self, headers: dict[TxnId, TxnHeader]) -> None:
        """Best effort: a mark saves later readers a wait, its absence costs one."""
        by_partition: dict[int, list[TxnHeader]] = {}
        for t, h in headers.items():
            by_partition.setdefault(t.partition, []).append(h)
        for p, hs in by_partition.items():
            try:
                self.scripts.mark_fsynced(
                    keys=[self.keys.header(p, h.txn_id.seq) for h in hs],
                    args=[h.state.value for h in hs])
            except redis.RedisError:
                return

    def write_fsynced(self, writes: Sequence[tuple[str, tuple]]) -> bool:
        """Run single-key writes ``(key, command)`` and return whether they are on disk:
        per node, the node's writes and WAITAOF in one pipeline (one connection, so
        the wait covers them), every reply checked (a failed write, e.g. OOM or a
        moved slot, confirms nothing)."""
        by_node: dict[str, tuple[redis.Redis, list[tuple]]] = {}
        for key, command in writes:
            if self.cluster:
                node = self.r.get_node_from_key(key)
                by_node.setdefault(node.name, (node.redis_connection, []))[1].append(command)
            else:
                by_node.setdefault("", (self.r, []))[1].append(command)
        durable = True
        for conn, commands in by_node.values():
            pipe = conn.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            pipe.execute_command("WAITAOF", 1, 0, READER_WAITAOF_MS)
            try:
                res = pipe.execute(raise_on_error=False)
            except redis.ResponseError:
                return False
            if any(isinstance(r, Exception) for r in res[:-1]):
                raise res[next(i for i, r in enumerate(res[:-1]) if isinstance(r, Exception))]
            waited = res[-1]
            durable = durable and not isinstance(waited, Exception) and int(waited[0]) >= 1
        return durable

    def mark_fsynced_after_wait(self, conn: redis.Redis, header_key: str, state: str) -> None:
        """The committer's mark, on the connection whose WAITAOF confirmed the decision."""
        try:
            self.scripts.mark_fsynced(keys=[header_key], args=[state], client=conn)
        except redis.RedisError:
            pass  # best effort: readers confirm an unmarked decision themselves

    def collect_fsynced(self, txn_id: TxnId, gc: Callable[[str], Collected]) -> Collected:
        """gc_txn: under waitaof only a decision marked fsynced is collected (a collected
        id is delivered unless listed aborted); an unmarked one is confirmed first."""
        status = Collected.UNFSYNCED
        for _ in range(2):
            status = gc("1" if self.durability == "waitaof" else "0")
            if status is not Collected.UNFSYNCED:
                return status
            self.confirm_fsynced([txn_id])
        return status
