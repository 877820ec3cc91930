"""TransactionCoordinator (v5): new, end, timeout sweep, GC sweep.

It holds no state of its own and never calls participants: the header CAS in
the metadata store *is* the decision, and participants learn it by watching.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable

from pulsar_txn.errors import (
    ConfigError,
    DeploymentChanged,
    InvalidTxnTransition,
    PulsarTxnError,
    TxnIdStale,
    TxnNotFound,
    TxnRecordsLost,
    TxnTimedOut,
)
from pulsar_txn.metastore.base import Collected, Materialized, MetadataStore
from pulsar_txn.pending_ack import settle_committed_acks
from pulsar_txn.records import SinkBatch, TxnHeader, TxnId
from pulsar_txn.state import TxnState

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 60_000
DEFAULT_RETENTION_MS = 3_600_000
_DUE: dict[tuple[str, str], tuple[float, float]] = {}  # sweep_if_due: last runs per store
_DUE_LOCK = threading.Lock()


class TransactionCoordinator:
    def __init__(self, store: MetadataStore, materialize_inline: bool = False) -> None:
        """``materialize_inline``: clean indexes in the caller's thread after each end
        (CLI, tests); otherwise a background worker does it, so commit returns at the CAS.
        """
        self.store = store
        self.materialize_inline = materialize_inline
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()
        self._queue: queue.SimpleQueue | None = None
        self._worker: threading.Thread | None = None
        if not materialize_inline:
            self._queue = queue.SimpleQueue()
            self._worker = threading.Thread(target=self._materialize_loop, daemon=True,
                                            name="pulsar-txn-materializer")
            self._worker.start()

    def _materialize_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self.materialize(*item)
            except PulsarTxnError as e:  # the sweeper retries from the index
                log.warning("materializing %s failed (sweeper will retry): %s", item[0], e)

    def new_transaction(self, timeout_ms: int = DEFAULT_TIMEOUT_MS, owner: str = "") -> TxnHeader:
        """Create an OPEN txn. With an owner, repeated calls return the owner's txn.

        An owner whose txn was ABORTED gets a fresh one (a failed batch is retried);
        a COMMITTED one is returned as is, so a replayed batch commits nothing new.
        """
        if int(timeout_ms) <= 0:
            raise ConfigError(f"transaction timeout must be > 0 ms, got {timeout_ms}")
        header = self._create(int(timeout_ms), owner)
        if owner and header.state is TxnState.OPEN and self._expired(header):
            # An earlier attempt of this owner died and nothing swept its txn: end it
            # here (the same CAS as the sweeper) instead of failing every retry on it.
            header = self._abort_expired(header)
        if owner and header.state is TxnState.ABORTED:
            header = self._create(int(timeout_ms), owner, replace=header.txn_id)
        return header

    def _create(self, timeout_ms: int, owner: str, replace: TxnId | None = None) -> TxnHeader:
        txn_id = self.store.next_txn_id(owner)
        for _ in range(3):
            try:
                return self.store.create_txn(txn_id, timeout_ms, owner, replace)
            except TxnIdStale:  # a pre-allocated id the GC watermark passed: a fresh one
                txn_id = self.store.next_txn_id(owner, txn_id.partition)
        raise TxnIdStale("could not allocate a fresh transaction id")

    def end_transaction(self, txn_id: TxnId, target: TxnState,
                        winners: Iterable[str] | None = None,
                        segments: Iterable[str] | None = None,
                        sink: SinkBatch | None = None,
                        made: tuple[int, int] = (0, 0)) -> TxnHeader:
        """One CAS. Repeating the same end succeeds; the opposite end raises.

        ``winners`` (commit only) names the writers whose entries become visible;
        None means every writer that recorded a position.
        """
        try:
            header, _changed, timed_out = self.store.end_txn(txn_id, target, winners,
                                                             segments, sink, made)
        except TxnRecordsLost:  # aborted by the same CAS: clean up as after any end
            self._after_end(txn_id, segments)
            raise
        if timed_out:
            self._after_end(txn_id, segments)
            raise TxnTimedOut(str(txn_id))
        self._after_end(txn_id, segments)
        return header

    def _expired(self, header: TxnHeader) -> bool:
        """By the server's clock only: a local clock may be off by any amount."""
        return header.deadline_ms < self.store.server_time_ms()

    def _abort_expired(self, header: TxnHeader) -> TxnHeader:
        try:
            ended, changed, _ = self.store.end_txn(header.txn_id, TxnState.ABORTED, None)
        except InvalidTxnTransition:  # committed concurrently: that end stands
            return self.get(header.txn_id)
        if changed:
            log.info("aborted %s (owner %s): past its deadline, found by a retry",
                     header.txn_id, header.owner)
            self._after_end(header.txn_id, None)
        return ended

    def _after_end(self, txn_id: TxnId, segments: Iterable[str] | None) -> None:
        """Materialize now, off the decision path: the CAS already decided (O(1)).

        A crash here leaves the txn in the unmaterialized index; the sweeper
        finishes it. Readers stay correct meanwhile (the gate is only held back).
        """
        if self.materialize_inline:
            try:
                self.materialize(txn_id, segments)
            except PulsarTxnError as e:  # decided already: the sweeper finishes it
                log.warning("materializing %s failed (a sweep finishes it): %s", txn_id, e)
        elif self._queue is not None:
            self._queue.put((txn_id, None if segments is None else tuple(segments)))

    def materialize(self, txn_id: TxnId,
                    segments: Iterable[str] | None = None) -> Materialized:
        return self.store.materialize_txn(txn_id, segments)

    def sweep_materialize(self) -> int:
        done = 0
        for txn_id in self.store.unmaterialized_txns():
            if self.materialize(txn_id) is Materialized.DONE:
                done += 1
        return done

    def commit(self, txn_id: TxnId, winners: Iterable[str] | None = None,
               segments: Iterable[str] | None = None, sink: SinkBatch | None = None,
               made: tuple[int, int] = (0, 0)) -> TxnHeader:
        """``sink``: a Spark sink batch; its progress advances in the same CAS.
        ``made``: the write registrations and ack record calls of the caller's process
        (Transaction.commit): fewer in the store aborts it (TxnRecordsLost)."""
        return self.end_transaction(txn_id, TxnState.COMMITTED, winners, segments, sink,
                                    made)

    def abort(self, txn_id: TxnId, segments: Iterable[str] | None = None) -> TxnHeader:
        return self.end_transaction(txn_id, TxnState.ABORTED, None, segments)

    def get(self, txn_id: TxnId) -> TxnHeader:
        header = self.store.get_header(txn_id)
        if header is None:
            raise TxnNotFound(f"transaction {txn_id} not found")
        return header

    # ---- sweeps ----
    def sweep_timeouts(self) -> list[TxnId]:
        """Abort every OPEN txn past its deadline (the same CAS as a client abort)."""
        aborted = []
        for txn_id in self.store.expired_txns():
            try:
                _, changed, _ = self.store.end_txn(txn_id, TxnState.ABORTED, None)
                if changed:
                    aborted.append(txn_id)
                    self.materialize(txn_id)
            except PulsarTxnError as e:  # ended concurrently: the other end won
                log.debug("timeout sweep skipped %s: %s", txn_id, e)
        return aborted

    def sweep_gc(self, retention_ms: int = DEFAULT_RETENTION_MS) -> int:
        """Remove records of txns finalized more than ``retention_ms`` ago.

        Aborted and losing writers stay listed per segment (H2), so entries that
        are still retained keep their classification after the header is gone.
        """
        cutoff = self.store.server_time_ms() - retention_ms
        removed = 0
        for txn_id, _ in self.store.finalized_txns(before_ms=cutoff):
            status = self.store.gc_txn(txn_id, cutoff)
            if status is Collected.UNMATERIALIZED:  # never drop a header before its losers listed
                self.materialize(txn_id)
                status = self.store.gc_txn(txn_id, cutoff)
            if status is Collected.ACKS_PENDING:
                # its consumers died before writing the tombstones; they need no broker,
                # and they make every consumer ack the messages on delivery: an
                # unapplied ack never pins the watermark past the retention (hole 4)
                settle_committed_acks(self.store, txn_id)
                status = self.store.gc_txn(txn_id, cutoff)
            if status is Collected.DONE:
                removed += 1
        return removed

    def sweep_all(self, retention_ms: int = DEFAULT_RETENTION_MS) -> dict[str, int]:
        """The background work every deployment must do: abort expired txns, finish
        index cleanups a dead committer left, collect txns past the retention."""
        return {"aborted": len(self.sweep_timeouts()), "materialized": self.sweep_materialize(),
                "collected": self.sweep_gc(retention_ms)}

    def sweep_if_due(self, retention_ms: int = DEFAULT_RETENTION_MS, every_s: float = 1.0,
                     gc_every_s: float = 10.0) -> None:
        """For deployments with no thread of their own (a Spark driver's per-trigger
        calls): the sweeps at most every ``every_s`` (GC every ``gc_every_s``) per
        process and store; failures are logged, the next call retries."""
        key = (getattr(self.store, "url", ""), getattr(getattr(self.store, "keys", None), "ns",
                                                       ""))
        now = time.monotonic()
        with _DUE_LOCK:
            last, last_gc = _DUE.get(key, (-1e9, -1e9))
            if now - last < every_s:
                return
            gc = now - last_gc >= gc_every_s
            _DUE[key] = (now, now if gc else last_gc)
        try:
            for t in self.sweep_timeouts():
                log.info("aborted %s: past its deadline", t)
            self.sweep_materialize()
            if gc:
                self.sweep_gc(retention_ms)
        except PulsarTxnError as e:
            log.warning("transaction sweep failed (the next call retries): %s", e)

    def start_sweeper(self, interval_s: float = 1.0,
                      retention_ms: int = DEFAULT_RETENTION_MS) -> None:
        """Background timeout + GC sweeps; several sweepers may run (the CAS arbitrates)."""
        if self._sweeper is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.sweep_all(retention_ms)
                except DeploymentChanged as e:
                    # nothing of the new deployment is this process's to sweep; the check
                    # left the change on the store, where writers and readers stop on it
                    log.error("transaction sweeps stopped: %s", e)
                    return
                except PulsarTxnError as e:
                    log.warning("transaction sweep failed (will retry): %s", e)

        self._sweeper = threading.Thread(target=loop, name="pulsar-txn-sweeper", daemon=True)
        self._sweeper.start()

    def close(self) -> None:
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=2)
        if self._queue is not None:
            self._queue.put(None)
            self._worker.join(timeout=5)
