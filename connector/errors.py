"""Typed errors. Redis and Pulsar exceptions are translated at the boundary.

``retriable`` tells a caller whether the same call may succeed if repeated
(after a reconnect or a backoff) without changing anything else.
"""

from __future__ import annotations


class PulsarTxnError(Exception):
    """Root of every error this package raises."""

    retriable: bool = False


class ConfigError(PulsarTxnError, ValueError):
    """A bad option or argument; the message names it."""


class MetastoreUnavailable(PulsarTxnError):
    """The metadata store could not be reached; nothing was decided."""

    retriable = True


class TxnNotFound(PulsarTxnError):
    """No header for this transaction (never created, or garbage-collected)."""


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


class TxnConflict(PulsarTxnError):
    """The requested end contradicts the recorded one, or an ack is held by another txn."""


class InvalidTxnTransition(TxnConflict):
    def __init__(self, txn_id: str, current: str, target: str) -> None:
        super().__init__(f"transaction {txn_id}: cannot move {current} -> {target}")
        self.txn_id = txn_id
        self.current = current
        self.target = target


class AckConflict(TxnConflict):
    """``committed``: the holder's ack already reached the cursor (a tombstone, final);
    otherwise the holder is a transaction that may still end either way."""

    def __init__(self, position: str, holder: str, committed: bool = False) -> None:
        verb = "was acknowledged by committed" if committed else "is pending ack under"
        super().__init__(f"message {position} {verb} transaction {holder}")
        self.position = position
        self.holder = holder
        self.committed = committed


class InvalidTxnId(PulsarTxnError, ValueError):
    """Not a v5 (metadata-driven) transaction id; v4 ids are refused here (H5)."""


class ReadTimeout(PulsarTxnError, TimeoutError):
    """No committed message became readable within the timeout."""

    retriable = True


class SegmentSealed(PulsarTxnError):
    """The segment was sealed by a split or merge: re-route to its children."""

    retriable = True
