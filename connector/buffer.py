"""TransactionBuffer (reader side): max read position per segment and classification.

PIP-473 keeps the buffer in the broker; pulsar-client has no hook there, so the
same role runs next to each reader: it gates on the metadata store's open-write
index and classifies entries from the headers, with a cache that events keep
current. Recovery is just "open the watch and read the index": no replay.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from pulsar_txn.metastore.base import MetadataStore
from pulsar_txn.records import (
    BEFORE_EARLIEST,
    EventKind,
    OpenWrite,
    Position,
    TxnEvent,
    TxnId,
    in_id_space,
)
from pulsar_txn.state import TxnState


class Verdict(Enum):
    """What a reader does with a (txn, writer)'s entries below the gate."""
    DELIVER = "deliver"  # committed winner, or no transaction
    SKIP = "skip"        # aborted, or a losing writer: never shown
    WAIT = "wait"        # still OPEN: its outcome decides


def max_read_position(received_upto: Position, open_writes: Sequence[OpenWrite],
                      previous: Position,
                      seen_first: Callable[[TxnId, str], Position | None] | None = None
                      ) -> Position:
    """The gate: every entry at or below it has a final classification.

    ``received_upto`` is the last entry the reader held *before* it queried the
    index: a txn that appended at or below it registered before that append, so
    the query saw it (H1: registration precedes the append).

    A registration without a recorded position may already have appended. A
    reader that receives *every* entry in order (``seen_first`` given) knows
    where: at the first entry it holds from that txn and writer, or beyond
    ``received_upto`` if it holds none. Any other reader cannot place the
    entry, so its gate does not move until the position is recorded. The gate
    never moves backwards (invariant 3).
    """
    gate = received_upto
    for w in open_writes:
        if w.first is not None:
            gate = min(gate, w.first.previous())
        elif seen_first is None:
            return previous
        else:
            at = seen_first(w.txn_id, w.writer)
            if at is not None:
                gate = min(gate, at.previous())
    return max(gate, previous)


@dataclass(frozen=True)
class Outcome:
    state: TxnState | None  # None: header collected (GC) — consult the aborted-writer set
    winners: frozenset[str]


class TransactionBuffer:
    """Gate and classification for the segments one client reads."""

    def __init__(self, store: MetadataStore, cache_size: int = 100_000) -> None:
        self.store = store
        self._final: OrderedDict[TxnId, Outcome] = OrderedDict()
        self._cache_size = cache_size
        self._cond = threading.Condition()
        self._generation = 0
        self.events_seen = 0
        self.resyncs = 0  # RESYNC events seen: readers drop their verdict memos past one
        self._starts = store.server_starts

    # ---- Notification (called from the watch thread) ----
    def on_event(self, ev: TxnEvent) -> None:
        if ev.kind is EventKind.RESYNC:
            # events were missed: the store may also have come back from an earlier copy
            # (a restore loses decisions), so no cached outcome is trusted past it
            self._final.clear()
            self.resyncs += 1
        with self._cond:
            self._generation += 1
            self.events_seen += 1
            self._cond.notify_all()

    def check_server_starts(self) -> bool:
        """Drop every cached outcome once the store has met a new server start (True:
        dropped): called after a store call and before the cache is used, so an answer
        of the new start is never mixed with outcomes an earlier copy held (the watch's
        RESYNC, which does the same, may arrive after a reader's query)."""
        starts = self.store.server_starts
        if starts == self._starts:
            return False
        self._starts = starts
        self._final.clear()
        self.resyncs += 1
        return True

    @property
    def generation(self) -> int:
        return self._generation

    def wait_for_change(self, seen_generation: int, timeout: float) -> bool:
        """Block until an event arrives after ``seen_generation`` (push, no polling)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._generation != seen_generation, timeout)

    # ---- Gate ----
    def gate(self, segment: str, received_upto: Position,
             previous: Position = BEFORE_EARLIEST,
             seen_first: Callable[[TxnId, str], Position | None] | None = None) -> Position:
        return max_read_position(received_upto, self.live_writes(segment), previous,
                                 seen_first)

    def live_writes(self, segment: str) -> list[OpenWrite]:
        """The open-write index of a segment without the txns known to have ended. An
        ended txn's entries are final (a writer it did not name a winner is skipped
        wherever it appends), so its index entries, which its committer's cleanup
        removes later, need not hold readers back until then. The index is read
        again past them: the next write of the same id partition may be OPEN."""
        skip: set[TxnId] = set()
        writes = self.store.open_writes(segment)
        self.check_server_starts()
        for _ in range(8):
            unknown = list({w.txn_id for w in writes if w.txn_id not in self._final})
            if unknown:
                self._load(unknown)
            ended = {w.txn_id for w in writes if self._ended(w.txn_id)}
            if not ended:
                return writes
            skip |= ended
            writes = self.store.open_writes(segment, skip)
        # many ended txns await their cleanup: hold at all of them (safe, only slower)
        return self.store.open_writes(segment)

    def _ended(self, t: TxnId) -> bool:
        o = self._final.get(t)
        return o is not None and o is not _UNKNOWN and o.state is not None

    # ---- Classification ----
    def classify(self, segment: str, entries: Iterable[tuple[TxnId, str]]) -> list[Verdict]:
        """The verdict for each (txn, writer) of a segment (WAIT: still OPEN)."""
        entries = list(entries)
        self.check_server_starts()
        missing = list({t for t, _ in entries if t not in self._final})
        if missing:
            self._load(missing)
            if self.check_server_starts():  # met during the load: nothing cached holds
                self._load(list({t for t, _ in entries}))
        collected = [(t, w) for t, w in entries if self._final.get(t, _OPEN).state is None]
        aborted = self.store.aborted_writers(segment, collected) if collected else set()
        out = []
        for t, w in entries:
            o = self._final.get(t)
            if o is None:
                out.append(Verdict.WAIT)
            elif o.state is None:
                out.append(Verdict.SKIP if (t, w) in aborted else Verdict.DELIVER)
            elif o.state is TxnState.COMMITTED and w in o.winners:
                out.append(Verdict.DELIVER)
            else:
                out.append(Verdict.SKIP)
        return out

    def _load(self, txn_ids: list[TxnId]) -> None:
        # an id the store can never have handed out (an entry's property is anyone's to
        # write, e.g. a partition >= P): no transaction, never delivered, store not asked
        parts = self.store.partitions
        if not all(in_id_space(t, parts) for t in txn_ids):
            for t in txn_ids:
                if not in_id_space(t, parts):
                    self._remember(t, _UNKNOWN)
            txn_ids = [t for t in txn_ids if in_id_space(t, parts)]
            if not txn_ids:
                return
        # a decision is final once a crash of the store's host can no longer lose it
        # (durability=waitaof: fsynced; else given as OPEN, and waited for)
        headers = self.store.final_headers(txn_ids)
        missing = [t for t, h in headers.items() if h is None]
        collected = self.store.collected(missing) if missing else set()
        if len(collected) < len(missing):
            # never delivered, so a consumer acks it away: first make sure the headers
            # are not missing because the metastore was reset under this process
            self.store.check_deployment()
        for t, h in headers.items():
            if h is None:
                # fail closed: only a recorded collection means "committed unless listed
                # aborted"; any other missing header (lost, foreign) is never delivered
                self._remember(t, Outcome(None, frozenset()) if t in collected else _UNKNOWN)
            elif h.state.is_terminal:
                self._remember(t, Outcome(h.state, h.winners))

    def _remember(self, t: TxnId, o: Outcome) -> None:
        self._final[t] = o
        if len(self._final) > self._cache_size:
            self._final.popitem(last=False)

    def settle(self, segment: str, entries: Sequence[tuple[TxnId, str]],
               wait_s: Callable[[TxnId], float]) -> list[Verdict]:
        """Classify, then wait: the one rule of both readers (the client API's and the
        Spark source's executors). Final verdicts come at once; the entry of an OPEN
        transaction waits for its end, woken by the store's events, for ``wait_s(txn)``
        seconds (the caller's patience: a read's timeout, or the txn's deadline plus a
        sweep's grace), and is classified again. WAIT: still OPEN after that; after the
        first wait that runs out, the entries after it are not waited for (the caller
        fails at once, not after one patience per stuck transaction)."""
        verdicts = self.classify(segment, entries)
        for i, (txn, writer) in enumerate(entries):
            if verdicts[i] is not Verdict.WAIT:
                continue
            if not self.wait_for_outcome(txn, wait_s(txn)):
                break  # past the caller's patience: the others are not waited for either
            verdicts[i] = self.classify(segment, [(txn, writer)])[0]
        return verdicts

    def wait_for_outcome(self, txn_id: TxnId, timeout: float) -> bool:
        """H1 fallback: an OPEN txn's entry below the gate waits for its end."""
        deadline = time.monotonic() + timeout
        while True:
            gen = self._generation
            self._load([txn_id])
            if txn_id in self._final:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.wait_for_change(gen, min(left, 1.0))


_OPEN = Outcome(TxnState.OPEN, frozenset())
_UNKNOWN = Outcome(TxnState.ABORTED, frozenset())  # never delivered: no winner can match
