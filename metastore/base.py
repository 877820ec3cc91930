"""The backend-agnostic metadata-store interface the transaction roles depend on.

It is shaped after PIP-473's capabilities rather than after Redis: every method
is one atomic step of the protocol (a CAS, a registration, an index query), so a
second backend (Oxia, an in-memory one for unit tests) implements this Protocol
without any change to the coordinator, buffer or pending-ack code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple, Protocol

from pulsar_txn.records import (
    OpenWrite,
    Position,
    Segment,
    SinkBatch,
    TxnEvent,
    TxnHeader,
    TxnId,
    WriteRecord,
)
from pulsar_txn.state import TxnState

from .claims import AckRecord, ClaimReads, Claims, ClaimView


def missing_namespace(ns: str, url: str, existing: Sequence[str]) -> str:
    """The error of a reader that named a namespace the store does not hold."""
    there = ", ".join(repr(n) for n in existing) if existing else "none"
    return (f"metastore namespace {ns!r} (option 'metastore.namespace') does not exist in "
            f"the metadata store {url!r} (option 'metastore.url'); namespaces there: {there}. "
            "A reader never creates one: check both options (only writers create a namespace)")


def deployment_changed(ns: str, url: str, opened: str, now: str | None) -> str:
    """The error of a process whose metastore was reset or replaced under it."""
    what = f"deployment {now!r}" if now else "no deployment (wiped)"
    return (f"the metadata store {url!r} (option 'metastore.url') now holds {what} in "
            f"namespace {ns!r}, not deployment {opened!r} this process opened: it was reset "
            "or replaced. Stopped without reading, writing or acking across the change; open "
            "a new client (restart the query) to use the new deployment")


CLOCK_BEHIND_MAX_US = 2_000_000  # a longer wait for the server's clock: it went back


def clock_behind(url: str, seconds: float) -> str:
    """The error of a store whose server clock is behind the ids it handed out."""
    return (f"the metadata store {url!r} (option 'metastore.url'): its server clock is "
            f"{seconds:.1f} s behind the transaction ids it already handed out (ids follow "
            "the server's clock, so that none is reused after a restore); fix the server's "
            "clock (NTP) and retry")


class Materialized(Enum):
    """What ``materialize_txn`` found (the cleanup of an ended transaction)."""
    DONE = "done"            # this call removed its index entries and listed its losers
    ALREADY = "already"      # an earlier call did
    GONE = "gone"            # no header (collected, or never created)
    OPEN = "open"            # not ended: nothing to clean yet


def not_taken(header: TxnHeader) -> TxnHeader:
    """A decision not known durable (``durability=waitaof``), as a reader must see it:
    not taken yet."""
    return dataclasses.replace(header, state=TxnState.OPEN, finalized_ms=None,
                               winners=frozenset())


class Collected(Enum):
    """What ``gc_txn`` did with a finalized transaction's records."""
    DONE = "done"                      # removed; its id is recorded as collected
    KEPT = "kept"                      # id in a gap of unknown ids: header kept, off the indexes
    GONE = "gone"                      # already removed
    OPEN = "open"                      # not ended
    UNMATERIALIZED = "unmaterialized"  # its losers are not listed yet (H2): materialize first
    YOUNG = "young"                    # finalized after the cutoff
    ACKS_PENDING = "acks_pending"      # committed acks not yet applied to the broker
    UNFSYNCED = "unfsynced"            # waitaof: its decision is not known fsynced yet


class LayoutVerdict(Enum):
    APPLIED = "applied"
    STALE = "stale"            # another change won the epoch: plan again
    NOT_FOUND = "not_found"    # no such scalable topic
    NOT_ACTIVE = "not_active"  # a parent segment is sealed already


@dataclass(frozen=True)
class LayoutChange:
    """The split/merge CAS's answer: ``epoch`` (APPLIED, STALE) or the segment id
    that is not ACTIVE (NOT_ACTIVE)."""
    verdict: LayoutVerdict
    value: str = ""


class LayoutRecord(NamedTuple):
    """One consistent read of a scalable topic's DAG. ``version`` grows with every
    change (split, merge, end fixed), so a cache can tell the newer of two reads
    even within one epoch."""
    epoch: int
    next_id: int
    segments: dict[int, Segment]
    version: int
    hash_fn: str


class Watch(Protocol):
    def close(self) -> None: ...


class MetadataStore(Protocol):
    partitions: int
    namespace: str  # the deployment's key prefix (option 'metastore.namespace')
    url: str  # where the store is, as errors show it: never a secret
    deployment: str  # carried by every transactional append (see records.PROP_TXN)
    wire_format: int  # the form of those appends' properties (records.WIRE_*)

    def still_current(self) -> bool: ...  # same deployment, server, wire format as opened
    def check_deployment(self) -> None: ...  # raises DeploymentChanged after a reset
    # the message of the first check that saw a change (sticky), else None
    deployment_lost: str | None
    # New server starts this store's own connections have met since it opened. A start
    # may come back from an earlier copy (a restore, a host crash under a weaker fsync
    # mode, a failover to a lagging replica) and lose decisions, so what a client cached
    # from the store before one is not trusted after it, even before the watch's RESYNC
    # arrives (it rides another connection, and may come later than a reader's query).
    server_starts: int
    def add_foreign_skipped(self, n: int) -> None: ...  # other deployments' entries passed
    def foreign_skipped(self) -> int: ...
    def set_wire_format(self, wire: int) -> None: ...  # WIRE_ONE once every reader reads it
    def txns_writing_other_form(self, wire: int) -> list[TxnId]: ...  # may append the other

    # ---- transactions (coordinator) ----
    def next_txn_id(self, owner: str = "", partition: int | None = None) -> TxnId: ...
    def create_txn(self, txn_id: TxnId, timeout_ms: int, owner: str = "",
                   replace: TxnId | None = None) -> TxnHeader: ...
    def get_header(self, txn_id: TxnId) -> TxnHeader | None: ...
    def get_headers(self, txn_ids: Sequence[TxnId]) -> dict[TxnId, TxnHeader | None]: ...
    def final_headers(self, txn_ids: Sequence[TxnId]) -> dict[TxnId, TxnHeader | None]:
        """get_headers for readers: a decision a crash of the primary's host could
        still lose (durability=waitaof, fsync not confirmed) is given as OPEN."""
    def find_owner(self, owner: str) -> TxnId | None: ...
    # made: (write registrations, ack record calls) the committing process made; a
    # commit finding fewer aborts and raises TxnRecordsLost
    def end_txn(self, txn_id: TxnId, target: TxnState, winners: Iterable[str] | None,
                segments: Iterable[str] | None = None, sink: SinkBatch | None = None,
                made: tuple[int, int] = (0, 0)) -> tuple[TxnHeader, bool, bool]: ...
    def materialize_txn(self, txn_id: TxnId,
                        segments: Iterable[str] | None = None) -> Materialized: ...
    def unmaterialized_txns(self, limit: int = 1000) -> list[TxnId]: ...
    def expired_txns(self, limit: int = 1000) -> list[TxnId]: ...
    def open_txns(self) -> list[tuple[TxnId, int]]: ...
    def finalized_txns(self, before_ms: int | None = None,
                       limit: int = 1000) -> list[tuple[TxnId, int]]: ...
    def gc_txn(self, txn_id: TxnId, cutoff_ms: int) -> Collected: ...
    def collected(self, txn_ids: Sequence[TxnId]) -> set[TxnId]: ...
    def metrics_snapshot(self, max_open: int = 10_000) -> dict: ...
    def server_time_ms(self) -> int: ...

    # ---- writes (transaction buffer) ----
    def register_write(self, txn_id: TxnId, segment: str, writer: str) -> int: ...  # wire
    def record_write(self, txn_id: TxnId, segment: str, writer: str,
                     first: Position | None, last: Position | None) -> None: ...
    def list_writes(self, txn_id: TxnId) -> tuple[list[WriteRecord], int]: ...
    def open_writes(self, segment: str, skip: Iterable[TxnId] = ()) -> list[OpenWrite]: ...
    def aborted_writers(self, segment: str, pairs: Iterable[tuple[TxnId, str]]
                        ) -> set[tuple[TxnId, str]]: ...

    def withdraw_write(self, txn_id: TxnId, segment: str, writer: str) -> bool: ...

    # ---- scalable topics (segment DAG; one atomic step per change) ----
    def create_topic(self, topic: str, segments: Sequence[Segment], next_id: int,
                     hash_fn: str = "murmur3") -> bool: ...
    def get_layout(self, topic: str) -> LayoutRecord | None: ...
    def get_segment(self, topic: str, segment_id: int) -> Segment | None: ...
    def change_layout(self, topic: str, expected_epoch: int, parents: Sequence[int],
                      children: Sequence[Segment], next_id: int) -> LayoutChange: ...
    def seal_end(self, topic: str, segment_id: int, end: Position) -> Position:
        """Fix a sealed segment's last entry once (``BEFORE_EARLIEST``: it holds none);
        the end that stands (raises TopicNotFound, or ConfigError for an ACTIVE
        segment)."""
    def list_topics(self) -> list[str]: ...
    def watch_topics(self, topics: Callable[[], Iterable[str]],
                     callback: Callable[[str | None], None]) -> Watch: ...

    # ---- acks (pending-ack store) ----
    # Messages are Positions; claims compare in ack order (claims.ack_order: a whole
    # entry after its batch indexes). Conflicts raise AckConflict with its reason.
    def claim_acks(self, txn_id: TxnId, segment: str, subscription: str,
                   positions: Sequence[Position], cumulative: bool,
                   given: Sequence[Position] = ()) -> None:
        """``given``: for a cumulative claim, the messages up to it that its consumer
        was handed (a committed ack of one of them conflicts: a redelivery)."""
    def release_acks(self, holder: TxnId, segment: str, subscription: str,
                     positions: Sequence[Position] = (), committed: bool = False,
                     cumulative: bool = False) -> int:
        """Settle ``holder``'s claims of ``positions`` and (``cumulative``) its
        cumulative claim, or every claim of it when neither is given: delete them, or
        (``committed``) turn them into tombstones. The number settled."""
    def record_acks(self, txn_id: TxnId, segment: str, subscription: str,
                    positions: Sequence[Position], cumulative: bool) -> None: ...
    def list_acks(self, txn_id: TxnId) -> dict[tuple[str, str], AckRecord]: ...
    def list_claims(self, segment: str, subscription: str) -> Claims: ...
    def has_claims(self, segment: str, subscription: str) -> bool:
        """Whether the claim table holds anything (a plain consumer's is empty: its
        received messages need no look-up)."""
    def claims_of(self, segment: str, subscription: str,
                  positions: Sequence[Position]) -> ClaimView:
        """The claim-table rows of these messages (one round trip): whether each is
        free, held by a txn, or consumed under a committed one."""
    def claim_reads(self, segment: str, subscription: str) -> ClaimReads:
        """Reads of the claim table that also tell whether it changed since (see
        ClaimReads); one per consumer."""
    def mark_acks_applied(self, txn_id: TxnId, segment: str, subscription: str) -> None: ...
    def trim_tombstones(self, segment: str, subscription: str, horizon: Position,
                        tombstones: Sequence[tuple[Position, TxnId]]) -> int:
        """Drop these (message, holder) tombstones at or below ``horizon`` still held
        by that holder; claims at or below the horizon keep conflicting."""

    # ---- Spark sink progress ----
    def bind_sink(self, sink_id: str, query_id: str, rebind: bool = False) -> int: ...
    def sink_progress(self, sink_id: str) -> tuple[int, str | None]: ...
    def sink_last_batch(self, sink_id: str) -> int: ...

    # ---- notification ----
    def watch(self, callback: Callable[[TxnEvent], None]) -> Watch: ...

    def close(self) -> None: ...
