"""The transaction state machine, as data.

Everything that decides whether a transition is legal lives here, so the
coordinator, the Lua end script and the tests agree on one table.
"""

from __future__ import annotations

from enum import Enum

from .errors import InvalidTxnTransition


class TxnState(str, Enum):
    OPEN = "OPEN"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"

    @property
    def is_terminal(self) -> bool:
        return self is not TxnState.OPEN


ALLOWED: dict[TxnState, frozenset[TxnState]] = {
    TxnState.OPEN: frozenset({TxnState.COMMITTED, TxnState.ABORTED}),
    TxnState.COMMITTED: frozenset(),
    TxnState.ABORTED: frozenset(),
}


def check_transition(txn_id: str, current: TxnState, target: TxnState) -> bool:
    """Return True if the move is a real transition, False for a repeat of the same end.

    Repeating an end is a success (idempotent); the opposite end is an error.
    """
    if current is target and current.is_terminal:
        return False
    if target not in ALLOWED[current]:
        raise InvalidTxnTransition(txn_id, current.value, target.value)
    return True


class SegmentState(str, Enum):
    """A scalable topic's segment, as its descriptor records it. The split/merge
    script seals only ACTIVE parents; a writer-run checks its segment is still
    ACTIVE right after registering (its fence), so no write joins a sealed one."""
    ACTIVE = "ACTIVE"
    SEALED = "SEALED"
