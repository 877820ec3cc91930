"""The transaction handle: the writer-runs and ack participants of one v5 transaction.

It owns what a commit must wait for (every writer-run's appends, the sends a
scalable producer must re-route first) and the one CAS that ends it. Producers
and consumers of any kind join it through the public methods below; none of
them needs the client façade, and the handle needs only the coordinator and
the store.

A Spark task writes under its micro-batch's transaction but never ends it (the
driver does, once, for all tasks): ``Transaction.join`` gives such a handle.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.errors import (
    AppendFailed,
    ConfigError,
    DeploymentChanged,
    PulsarTxnError,
    TxnNotOpen,
)
from pulsar_txn.metastore.base import MetadataStore
from pulsar_txn.records import TxnHeader, TxnId
from pulsar_txn.state import TxnState
from pulsar_txn.writer import WriterRun

log = logging.getLogger(__name__)


class Flushable(Protocol):
    def flush(self) -> None: ...


class AckParticipant(Protocol):
    """A pending-ack store that applies (or releases) this transaction's acks."""
    segment: str

    def on_end(self, txn_id: TxnId, state: TxnState) -> None: ...
    def recorded(self, txn_id: TxnId) -> int: ...  # ack record calls that succeeded


class Transaction:
    """A v5 transaction. Commit flushes what joined it, then one CAS."""

    def __init__(self, store: MetadataStore, header: TxnHeader,
                 coordinator: TransactionCoordinator | None) -> None:
        """``coordinator`` None: a joined handle (see ``join``), which never ends it."""
        self._coordinator = coordinator
        self._store = store
        self.header = header
        self.id: TxnId = header.txn_id
        self._runs: dict[tuple[str, str], WriterRun] = {}
        self._participants: set[AckParticipant] = set()
        self._flushers: list[Flushable] = []  # scalable producers: re-route refused sends
        self._lock = threading.Lock()
        self._state = TxnState.OPEN
        self._failed_send: str | None = None  # the first send that raised (see send_failed)
        self._committing = False  # commit() began: its flush may have passed a sender

    @classmethod
    def join(cls, store: MetadataStore, txn_id: TxnId) -> JoinedTransaction:
        """A handle that writes under an OPEN transaction another party ends."""
        return JoinedTransaction(store, txn_id)

    def __str__(self) -> str:
        return str(self.id)

    @property
    def state(self) -> TxnState:
        return self._state

    @property
    def committing(self) -> bool:
        """``commit()`` began (still OPEN until its CAS): a sender whose sends wait for
        the commit's flush to be made (a buffered one) must refuse new ones now."""
        return self._committing

    def ensure_open(self) -> None:
        if self._state is not TxnState.OPEN:
            raise TxnNotOpen(str(self.id), self._state.value)

    def check_deployment(self) -> None:
        """Raise DeploymentChanged once this process saw its metastore reset (sticky on
        the store, no round trip): a send that waits to be appended is refused as an
        appending one is (writer.WriterRun), so no send is taken across the change."""
        lost = self._store.deployment_lost
        if lost is not None:
            raise DeploymentChanged(lost)

    # ---- what joins a transaction ----
    def run_for(self, segment: str, writer: str, producer, fence=None) -> WriterRun:
        """The writer-run of (segment, writer) in this transaction, made on first use.

        ``producer``: the pulsar-client producer of the segment; ``fence``: a check
        called before the run's registration (a scalable segment still ACTIVE)."""
        key = (segment, writer)
        with self._lock:
            self.ensure_open()
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = WriterRun(self._store, self.id, segment, writer,
                                                  producer, fence)
            return run

    def has_appended(self, segment: str, writer: str) -> bool:
        """Whether (segment, writer)'s first append is positioned (it pins the gate)."""
        run = self._runs.get((segment, writer))
        return run is not None and run.first is not None

    def flush_before_commit(self, flusher: Flushable) -> None:
        """``flusher.flush()`` runs before the runs are flushed and the CAS is made.
        Refused once the commit began: its flushers may have run already, and a sender
        that needs one must not take a send it would leave behind."""
        with self._lock:
            if self._committing:
                raise TxnNotOpen(str(self.id), "committing")
            if flusher not in self._flushers:
                self._flushers.append(flusher)

    def send_failed(self, error: BaseException, what: str = "a send") -> None:
        """A send (or an ack whose record may or may not exist) under this transaction
        raised: the transaction can no longer commit, whether or not the caller caught
        the error and went on (as Kafka's ``commitTransaction`` after a failed send).
        Its caller was told the operation may be missing, so a COMMITTED answer would
        contradict what it heard."""
        with self._lock:
            if self._failed_send is None:
                self._failed_send = f"{what} raised {error!r}"

    def enlist(self, participant: AckParticipant) -> None:
        """An ack store that learns the outcome at once (not only by event)."""
        with self._lock:
            self.ensure_open()
            self._participants.add(participant)

    @property
    def segments(self) -> set[str]:
        return {seg for seg, _ in self._runs}

    @property
    def writers(self) -> set[str]:
        return {w for _, w in self._runs}

    def flush(self) -> None:
        """Wait until every send that joined is positioned (or raise)."""
        with self._lock:
            flushers = list(self._flushers)
        for flusher in flushers:
            flusher.flush()
        for run in list(self._runs.values()):
            run.flush()

    # ---- the end ----
    def commit(self) -> TxnHeader:
        """Flush, then the CAS. A transaction in which a send raised, or whose appends
        did not all land, is aborted instead and the error raised."""
        self.ensure_open()
        with self._lock:  # a flusher registered after this is refused (flush_before_commit)
            self._committing = True
        try:
            if self._failed_send is not None:
                raise AppendFailed(f"transaction {self.id}: {self._failed_send}, so the "
                                   "transaction cannot commit; it is aborted")
            self.flush()
        except BaseException:
            self.abort()
            raise
        try:
            header = self._ender().commit(self.id, self.writers, self.segments,
                                          made=self._made())
        except TxnNotOpen as e:
            self._state = TxnState(e.state)
            if self._state is TxnState.ABORTED:  # timed out, records lost: release now
                self._tell_participants(self._state)
            raise
        self._finish(header)
        return header

    def _made(self) -> tuple[int, int]:
        """The write registrations and ack record calls this process made under the
        txn: the commit CAS refuses to commit a txn whose store holds fewer (records
        lost by a restore of the store would otherwise commit half of it)."""
        with self._lock:
            runs, parts = list(self._runs.values()), list(self._participants)
        return (sum(1 for r in runs if r.registered),
                sum(p.recorded(self.id) for p in parts))

    def abort(self) -> TxnHeader:
        if self._state is TxnState.ABORTED:
            return self.header
        header = self._ender().abort(self.id, self.segments)
        self._finish(header)
        return header

    def _ender(self) -> TransactionCoordinator:
        if self._coordinator is None:
            raise ConfigError(f"transaction {self.id} was joined: its owner ends it")
        return self._coordinator

    def _finish(self, header: TxnHeader) -> None:
        """After the decision: nothing here may fail the end, which already happened
        (a caller that saw an error would retry and duplicate). What fails is finished
        by recovery: a restarted consumer re-applies committed acks from the index."""
        self.header = header
        self._state = header.state
        self._tell_participants(header.state)

    def _tell_participants(self, state: TxnState) -> None:
        for p in self._participants:  # same-process participants need not wait for events
            try:
                p.on_end(self.id, state)
            except Exception as e:  # noqa: BLE001 - pulsar-client raises plain errors too
                log.warning("transaction %s is %s; applying its acks on %s failed (recovery "
                            "finishes it): %s", self.id, state.value, p.segment, e)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.commit()
        elif self._state is TxnState.OPEN:
            try:
                self.abort()
            except PulsarTxnError:  # fenced already (timed out / ended elsewhere)
                log.debug("abort after failure of %s did not apply", self.id)
        return False


class JoinedTransaction(Transaction):
    """Writes under a transaction whose end belongs to someone else (a Spark task
    under its batch's transaction: the driver ends it once, for every task).
    Leaving its ``with`` block flushes; it never commits or aborts."""

    def __init__(self, store: MetadataStore, txn_id: TxnId) -> None:
        super().__init__(store, TxnHeader(txn_id, TxnState.OPEN, 0, 0), None)

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.flush()
        return False
