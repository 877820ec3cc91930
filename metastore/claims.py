"""What the pending-ack half of the store answers, typed: claims, ack records, conflicts.

Why apart from the encodings (keys.py): the roles reason about messages and
transactions, never about hash fields. Each backend decodes its own form into
these values, so the PendingAckStore and the consumer read one vocabulary on
Redis and in memory alike, and a third backend changes nothing above it.

One rule of order belongs to acks, not to positions: a whole-entry ack (batch
-1) covers every batch index of its entry, so in ack order it sorts *after*
them (``ack_order``), where a ``Position`` tuple sorts it before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from pulsar_txn.records import WHOLE_ENTRY, Position, TxnId

SUBSCRIPTION_SEP = "|"  # joins segment and subscription in the store's keys and fields


def check_subscription(subscription: str) -> None:
    """A subscription is part of a claim table's key and an ack record's field."""
    if SUBSCRIPTION_SEP in subscription:
        raise ValueError(f"subscription {subscription!r} must not contain "
                         f"'{SUBSCRIPTION_SEP}'")


def ack_order(p: Position) -> tuple[int, int, int]:
    """The order claims compare in: entry, then batch index, the whole entry last."""
    return p.ledger, p.entry, WHOLE_ENTRY if p.batch < 0 else p.batch


def covers(horizon: Position | None, p: Position) -> bool:
    """Whether ``p`` is at or below ``horizon`` in ack order (None covers nothing)."""
    return horizon is not None and ack_order(p) <= ack_order(horizon)


class ClaimKind(Enum):
    FREE = "free"
    HELD = "held"            # claimed by a transaction that may still end either way
    COMMITTED = "committed"  # consumed under a committed transaction (final)


@dataclass(frozen=True)
class Holding:
    """A transaction's hold on the messages up to ``position`` (a cumulative claim, or
    the highest committed cumulative ack)."""
    holder: TxnId
    position: Position


@dataclass(frozen=True)
class Claims:
    """A claim table read whole (``list_claims``)."""

    live: Mapping[Position, TxnId]        # individual claims of transactions not ended
    tombstones: Mapping[Position, TxnId]  # individual acks of committed transactions
    cumulative: Holding | None = None     # the live cumulative claim
    committed: Holding | None = None      # the highest committed cumulative ack
    trimmed: Position | None = None       # tombstones at or below were dropped

    @property
    def committed_horizon(self) -> Position | None:
        """Every later claim at or below it conflicts (None: no committed cumulative)."""
        return self.committed.position if self.committed else None


@dataclass(frozen=True)
class ClaimView:
    """Some messages' rows of a claim table (``claims_of``): what a consumer must know
    before it hands a received message out or acks it without a transaction."""

    rows: Mapping[Position, tuple[ClaimKind, TxnId | None]]  # individual rows only
    cumulative: Holding | None
    committed: Holding | None
    trimmed: Position | None

    def of(self, p: Position) -> tuple[ClaimKind, TxnId | None]:
        """COMMITTED (holder None once the cursor passed it), HELD by a transaction that
        may end either way, or FREE."""
        if covers(self.trimmed, p):
            return ClaimKind.COMMITTED, None
        if self.committed and covers(self.committed.position, p):
            return ClaimKind.COMMITTED, self.committed.holder
        row = self.rows.get(p)
        if row is not None:
            return row
        if self.cumulative and covers(self.cumulative.position, p):
            return ClaimKind.HELD, self.cumulative.holder
        return ClaimKind.FREE, None


@dataclass(frozen=True)
class AckRecord:
    """A transaction's acks on one (segment, subscription) (``list_acks``)."""

    individual: tuple[Position, ...]
    cumulative: Position | None
    applied: bool  # its tombstones are written (see pending_ack.py)

    @property
    def empty(self) -> bool:
        return not self.individual and self.cumulative is None


class ClaimReads(Protocol):
    """Reads of one claim table by one consumer, and whether it changed since.

    A consumer checks each message against the table as it hands it out (one taken
    by another consumer's committed txn meanwhile is never handed out). Asking the
    server every time costs a round trip a message; ``unchanged`` answers from what
    the server pushed (Redis: CLIENT TRACKING invalidations), so the question is
    asked only when a write to the table may have changed the answer."""

    def read(self, positions: Sequence[Position]) -> ClaimView:
        """``claims_of`` these messages, and watch the table from this read on."""

    def unchanged(self) -> bool:
        """True only if nothing was written to the table since the last ``read``
        (no round trip). False whenever that is not known."""
