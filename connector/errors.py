"""Typed errors. Redis and Pulsar exceptions are translated at the boundary.

``retriable`` tells a caller whether the same call may succeed if repeated
(after a reconnect or a backoff) without changing anything else.
"""

from __future__ import annotations

from enum import Enum


class PulsarTxnError(Exception):
    """Root of every error this package raises."""

    retriable: bool = False


class ConfigError(PulsarTxnError, ValueError):
    """A bad option or argument; the message names it."""


class BrokerUnavailable(PulsarTxnError, ConnectionError):
    """The Pulsar broker did not answer (unreachable, refused, or too slow); the
    message names the option and the address."""

    retriable = True


class MetastoreUnavailable(PulsarTxnError):
    """The metadata store could not be reached (or did not confirm in time). A write
    it interrupted may or may not have been applied: a transactional send or ack that
    raised this leaves its transaction unable to commit, and a ``commit()``/``abort()``
    that raised it has an unknown outcome until the same end is called again once the
    store is back (repeating an end succeeds, the opposite end raises
    ``InvalidTxnTransition``)."""

    retriable = True


class TxnNotFound(PulsarTxnError):
    """No header for this transaction (never created, or garbage-collected)."""


class TxnIdStale(PulsarTxnError):
    """A pre-allocated id fell below the collected watermark (or into a gap of possibly
    lost ids) before it was used: allocate a fresh one."""

    retriable = True


class TxnNotOpen(PulsarTxnError):
    """The transaction is already COMMITTED or ABORTED: the write or ack is fenced."""

    def __init__(self, txn_id: str, state: str) -> None:
        super().__init__(f"transaction {txn_id} is {state}, not OPEN")
        self.txn_id = txn_id
        self.state = state


class TxnTimedOut(TxnNotOpen):
    """The transaction passed its deadline; it is (or will be) ABORTED."""

    def __init__(self, txn_id: str) -> None:
        PulsarTxnError.__init__(self, f"transaction {txn_id} passed its deadline and was aborted")
        self.txn_id = txn_id
        self.state = "ABORTED"


class TxnRecordsLost(TxnNotOpen):
    """The commit found fewer of the transaction's write registrations or ack records
    than the committing process made: the metadata store came back from an earlier
    copy (a restore, a host crash under a weaker fsync mode, a failover). Committing
    would show its entries without its acks (or the other way round), so the same CAS
    aborted it (fail closed, DESIGN §3)."""

    def __init__(self, txn_id: str, made: tuple[int, int], found: tuple[int, int]) -> None:
        PulsarTxnError.__init__(
            self, f"transaction {txn_id}: the metadata store holds {found[0]} write "
            f"registration(s) and {found[1]} ack record call(s) of it, but this process "
            f"made {made[0]} and {made[1]}; the store lost records (restored from an "
            "earlier copy?), so the transaction was aborted instead of committed")
        self.txn_id = txn_id
        self.state = "ABORTED"


class TxnConflict(PulsarTxnError):
    """The requested end contradicts the recorded one, or an ack is held by another txn."""


class InvalidTxnTransition(TxnConflict):
    def __init__(self, txn_id: str, current: str, target: str) -> None:
        super().__init__(f"transaction {txn_id}: cannot move {current} -> {target}")
        self.txn_id = txn_id
        self.current = current
        self.target = target


class AckConflictReason(Enum):
    HELD = "held"            # claimed by a transaction that may still end either way
    COMMITTED = "committed"  # acknowledged under a committed transaction: final
    ON_CURSOR = "on_cursor"  # committed, and the subscription's cursor is past it
    AGAIN = "again"          # another copy of a message this same transaction acked
    CONTENDED = "contended"  # aborted claimers kept coming back: retry the transaction


class AckConflict(TxnConflict):
    """An ack the pending-ack store refused: ``position`` (a ``Position``), the
    transaction that holds it (``holder_id``; None when unknown: on the cursor, or
    contended) and why (``reason``). ``holder`` is the holder as text, for messages."""

    _VERBS = {
        AckConflictReason.HELD: "is pending ack under transaction {h}",
        AckConflictReason.COMMITTED: "was acknowledged by committed transaction {h}",
        AckConflictReason.ON_CURSOR: "was acknowledged by a committed transaction "
                                     "(the subscription's cursor is past it)",
        AckConflictReason.AGAIN: "was already acknowledged (another copy of it: a "
                                 "redelivery) under this same transaction {h}",
        AckConflictReason.CONTENDED: "is claimed by concurrently re-claiming "
                                     "transactions: retry",
    }

    def __init__(self, position, holder, reason: AckConflictReason) -> None:
        text = position.text() if hasattr(position, "text") else str(position)
        self.holder = str(holder) if holder is not None else "(unknown)"
        super().__init__(f"message {text} " + self._VERBS[reason].format(h=self.holder))
        self.position = position
        self.holder_id = holder
        self.reason = reason

    @property
    def committed(self) -> bool:
        """The holder's ack is final (a tombstone, or on the cursor)."""
        return self.reason in (AckConflictReason.COMMITTED, AckConflictReason.ON_CURSOR)

    @property
    def again(self) -> bool:
        """The holder is the acking transaction itself (a second copy)."""
        return self.reason is AckConflictReason.AGAIN


class AckNotAllowed(PulsarTxnError):
    """An ack the subscription cannot take (e.g. cumulative on Shared or Key_Shared):
    refused when made, never discovered when the commit applies it."""


class InvalidTxnId(PulsarTxnError, ValueError):
    """Not a v5 (metadata-driven) transaction id; v4 ids are refused here (H5)."""


class ReadTimeout(PulsarTxnError, TimeoutError):
    """No committed message became readable within the timeout."""

    retriable = True


class SegmentSealed(PulsarTxnError):
    """The segment was sealed by a split or merge: re-route to its children."""

    retriable = True


class SinkBoundToOtherQuery(ConfigError):
    """An explicit ``sink.id`` already belongs to another Spark query (checkpoint)."""

    def __init__(self, sink_id: str, query_id: str) -> None:
        super().__init__(
            f"option 'sink.id' = {sink_id!r} belongs to another streaming query ({query_id}); "
            "a new checkpoint is a new query and would skip the batches the old one committed. "
            "Use a new sink.id, or set option 'sink.id.rebind' = true to move this id to the "
            "new query and start its progress over")
        self.sink_id = sink_id
        self.query_id = query_id


class SinkIdMovedAway(SinkBoundToOtherQuery):
    """This query's ``sink.id`` was moved to another query by ``sink.id.rebind``: it can
    never take it back (its replayed batches would not be recognised once their
    transactions are collected, and would commit a second time)."""

    def __init__(self, sink_id: str, query_id: str, last_batch: int) -> None:
        ConfigError.__init__(
            self,
            f"option 'sink.id' = {sink_id!r} was moved from this streaming query to another "
            f"one ({query_id or 'none now'}) by option 'sink.id.rebind'; this query "
            f"committed batches up to {last_batch} under it and can never take it back, "
            "with or without 'sink.id.rebind' (a replayed batch would be committed a second "
            "time). Keep 'sink.id.rebind' only for the one restart that moves the id, and "
            "give this query its own sink.id and a new checkpoint")
        self.sink_id = sink_id
        self.query_id = query_id
        self.last_batch = last_batch


class SinkFenced(PulsarTxnError):
    """The sink id was re-bound to another query: this query's batch is not committed."""


class MetastoreError(PulsarTxnError):
    """The metadata store rejected a request as malformed or failed inside a
    script: a bug or a misconfigured server, so repeating it will not help."""


class TopicNotFound(PulsarTxnError, LookupError):
    """No such scalable topic (its DAG is not in the metadata store)."""


class ProbeFailed(PulsarTxnError):
    """The broker did not tell a topic's last entry (no answer, or no usable one)."""


class DataLoss(PulsarTxnError):
    """Entries of a planned range can no longer be read (deleted topic or ledgers)."""


class AdminError(PulsarTxnError):
    """The broker's REST admin API refused or failed a call (``status``: HTTP code)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AppendFailed(PulsarTxnError):
    """Appends of a writer-run or a task were refused or never acknowledged: the
    transaction (or the Spark task's batch) must not commit them."""


class LayoutContention(PulsarTxnError):
    """A scalable topic's layout kept changing under a split, merge or route."""

    retriable = True


class SinkBatchMismatch(PulsarTxnError):
    """A Spark sink batch's tasks reported different transactions: the batch fails."""


class SweeperAbsent(PulsarTxnError):
    """An OPEN transaction outlived its deadline plus a sweep's grace: no process
    is running the timeout sweep for its deployment."""

    retriable = True


class NamespaceNotFound(ConfigError):
    """A reader named a metastore namespace that does not exist (readers never create
    one): a typo in ``metastore.namespace``, or ``metastore.url`` names another store.
    The message lists the namespaces that do exist there."""


class DeploymentChanged(PulsarTxnError):
    """The metastore at ``metastore.url`` was wiped, reset or replaced while this
    process kept using it: its deployment id is not the one this process opened.
    Everything that would read, write or ack under the old id stops here; open a new
    client (or restart the query) to work with the new deployment."""


class ForeignDeploymentEntries(PulsarTxnError):
    """Transactional entries written under another deployment (another namespace or
    metastore, or this one before a reset) were met: never delivered, and not passed
    over unless the reader was told to (``skip_foreign_deployments`` /
    ``read.foreignDeployments=skip``). ``deployments``: the ids seen."""

    def __init__(self, message: str, deployments: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.deployments = deployments
