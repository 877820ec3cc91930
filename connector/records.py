"""Frozen records of the protocol, and the encodings shared with the Lua scripts."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from .errors import ConfigError, InvalidTxnId
from .state import SegmentState, TxnState

SCHEMA_VERSION = 1

# The one message property every transactional append carries (the only trace of a
# transaction in the data stream: no markers are ever written):
#   __ptxn.txn = "<txn id>;<writer>;<deployment>"
# The deployment (metastore namespace + store) the txn id belongs to: an entry of another
# deployment is never classified with this one's ids. One property, not three: each
# property is a map entry the client converts and the batch serializes per message,
# and three of them cost a producer ~10% of its messages/s (docs/benchmarks.md). The
# name is the one earlier builds used for the txn id alone, so their readers (and the
# external-reader rule they followed) find no v5 id there and never deliver such an
# entry: a mixed-version deployment fails closed.
PROP_TXN = "__ptxn.txn"
TAG_SEP = ";"  # in none of a txn id, a writer id (_WRITER_ID) or a deployment id
# The three-property form of earlier builds (PROP_TXN holding the id alone): always
# read; written only in a namespace of an earlier build until an operator upgrades it
# (MetadataStore.wire_format), so its readers never miss an entry.
PROP_WRITER = "__ptxn.writer"
PROP_DEPLOYMENT = "__ptxn.dep"
WIRE_THREE = 1  # the namespace's appends carry the three-property form
WIRE_ONE = 2    # ... the one-property form
WIRE_NAMES = {WIRE_THREE: "three-property", WIRE_ONE: "one-property"}
PROTOCOL_PREFIX = "__ptxn."  # every property of the protocol: reserved, never shown
FOREIGN = "!"  # prefix a reader gives a foreign entry's txn id: never parses, never shown


def check_wire_format(wire, where: str) -> int:
    """A recorded wire format this build writes; a later build's is never overwritten."""
    try:
        known = int(wire) in WIRE_NAMES
    except (TypeError, ValueError):
        known = False
    if not known:
        raise ConfigError(f"namespace {where!r} uses wire format {wire!r}, which this "
                          f"version does not know ({', '.join(map(str, WIRE_NAMES))}): "
                          "upgrade this process")
    return int(wire)


def txn_properties(txn_id: TxnId, writer: str, deployment: str,
                   wire: int = WIRE_ONE) -> dict[str, str]:
    """The protocol's properties of a transactional append by ``writer``, in the
    namespace's wire format. Raises for a writer id the property cannot carry."""
    check_writer_id(writer)
    if wire == WIRE_THREE:
        return {PROP_TXN: str(txn_id), PROP_WRITER: writer, PROP_DEPLOYMENT: deployment}
    return {PROP_TXN: f"{txn_id}{TAG_SEP}{writer}{TAG_SEP}{deployment}"}


def entry_txn(props: dict, deployment: str) -> tuple[str | None, str]:
    """(txn id text, writer) of an entry as this deployment must classify it; (None, "")
    for a plain entry. An entry of another deployment, or with a malformed protocol
    property, gets a text that never parses as a txn id (FOREIGN first): never delivered
    (fail closed). Reads the one-property form and the older three-property one."""
    tag = props.get(PROP_TXN)
    if tag is None:
        return None, ""
    if TAG_SEP in tag:
        parts = tag.split(TAG_SEP)
        if len(parts) != 3 or PROP_WRITER in props or PROP_DEPLOYMENT in props:
            return FOREIGN + tag, ""  # malformed, or a mix of both forms: trust neither
        t, writer, dep = parts
        if not _WRITER_ID.fullmatch(writer):
            return FOREIGN + tag, ""  # no writer: forged or corrupt, never a winner
        return (t if dep == deployment else FOREIGN + t), writer
    # the three-property form; its oldest entries carry no deployment: this one's
    if props.get(PROP_DEPLOYMENT, deployment) != deployment:
        return FOREIGN + tag, props.get(PROP_WRITER, "")
    return tag, props.get(PROP_WRITER, "")


def entry_txn_cached(props: dict, deployment: str,
                     cache: dict[str, tuple[str | None, str]]) -> tuple[str | None, str]:
    """``entry_txn``, parsed once per distinct value while the entry has no other
    property (the usual transactional entry): a reader's per-message cost. ``cache``
    is the caller's, per deployment, and is emptied when it reaches 4,096 values."""
    tag = props.get(PROP_TXN)
    if tag is None:
        return None, ""
    if len(props) != 1:
        return entry_txn(props, deployment)
    tw = cache.get(tag)
    if tw is None:
        if len(cache) >= 4096:
            cache.clear()
        tw = cache[tag] = entry_txn(props, deployment)
    return tw


# Canonical text only (ASCII digits, no sign, no leading zero, nothing after): an entry's
# property is written by anyone, and an alias of a real id ("v5:01:7", "v5:1:7\n", other
# scripts' digits) must not be classified as that id. Used with fullmatch.
_TXN_ID = re.compile(r"v5:(0|[1-9][0-9]{0,4}):(0|[1-9][0-9]{0,18})")
_WRITER_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,200}")
MAX_SEQ = 2**63 - 1  # Redis' INCR stops here: no store hands out a larger sequence


def in_id_space(txn_id: TxnId, partitions: int) -> bool:
    """Whether a store of ``partitions`` partitions can have handed out this id (sequences
    start at 1). Any other id, which a plain producer can still write in an entry's
    property, names no transaction of the store: its entries are never delivered."""
    return 0 <= txn_id.partition < partitions and 1 <= txn_id.seq <= MAX_SEQ


class Position(NamedTuple):
    """A message of a segment: (ledgerId, entryId, batchIndex), batch -1 = the entry as
    a whole (or before its first batched message, as a range bound). The one position
    type: a named tuple, so positions compare and hash in C, and a plain 3-tuple of the
    same numbers is equal to it. Two codecs: ``text``/``parse`` (the checkpoint's
    ``l:e:b``, kept byte-identical) and ``encode``/``decode`` (the store's fixed-width
    hex). The native ``MessageId`` stays inside the broker-I/O edge (``of``)."""

    ledger: int
    entry: int
    batch: int = -1

    def text(self) -> str:
        """``l:e:b`` with the batch always written: Spark's checkpoints hold this text."""
        return f"{self[0]}:{self[1]}:{self[2]}"

    @classmethod
    def parse(cls, s: str) -> Position:
        """``l:e`` or ``l:e:b`` (``text`` and ``str`` forms, the DAG's segment ends)."""
        parts = s.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"position {s!r} is not ledgerId:entryId[:batchIndex]")
        return cls(*(int(p) for p in parts))

    def encode(self) -> str:
        """Fixed-width hex (32 chars) so the store's lexicographic order is numeric order."""
        return f"{self.ledger:016x}{self.entry:016x}"

    @classmethod
    def decode(cls, s: str) -> Position:
        base, _, batch = s.partition(":")
        return cls(int(base[:16], 16), int(base[16:32], 16), int(batch) if batch else -1)

    @classmethod
    def of(cls, message_id) -> Position:  # pulsar.MessageId or _pulsar.MessageId
        return cls(message_id.ledger_id(), message_id.entry_id(), message_id.batch_index())

    @property
    def entry_position(self) -> Position:
        return Position(self.ledger, self.entry)

    def previous(self) -> Position:
        """The entry just before this one (the gate sits one below the first OPEN write)."""
        if self.entry > 0:
            return Position(self.ledger, self.entry - 1)
        return Position(self.ledger - 1, END_OF_LEDGER) if self.ledger > 0 else BEFORE_EARLIEST

    def __str__(self) -> str:
        """``l:e``, with ``:b`` only for a batched message (logs, the DAG's ends)."""
        return f"{self.ledger}:{self.entry}" + (f":{self.batch}" if self.batch >= 0 else "")


BEFORE_EARLIEST = Position(-1, -1)
WHOLE_ENTRY = 2**31 - 1  # a batch index above every real one: "the whole entry"
END_OF_LEDGER = 2**63 - 1  # an entry id after every entry of its ledger
BEFORE = BEFORE_EARLIEST  # a range bound: before the first message of a segment
AFTER_LAST = Position(2**62, 0, 0)  # a range bound after every entry a topic can hold


@dataclass(frozen=True)
class Segment:
    """One segment of a scalable topic's DAG (scalable/dag.py has the rules): an
    inclusive key-hash range backed by an ordinary ``persistent://`` topic. A record
    of the store (its encoding is the store's); the DAG's vocabulary."""

    id: int
    lo: int  # inclusive hash range
    hi: int
    backing: str
    state: SegmentState = SegmentState.ACTIVE
    parents: tuple[int, ...] = ()
    children: tuple[int, ...] = ()
    created_epoch: int = 1
    sealed_epoch: int | None = None
    # Last entry of a sealed segment: None = not fixed yet (seal in progress),
    # BEFORE_EARLIEST = it holds no entry. Readers move to the children only
    # after reading up to it, which is what keeps per-key order across changes.
    end: Position | None = None
    sealed_ms: int | None = None  # the seal CAS's server time

    @property
    def active(self) -> bool:
        return self.state is SegmentState.ACTIVE

    def covers(self, h: int) -> bool:
        return self.lo <= h <= self.hi


@dataclass(frozen=True)
class TxnId:
    """A v5 (metadata-driven) transaction id: the metastore partition and a sequence."""

    partition: int
    seq: int

    def __str__(self) -> str:
        return f"v5:{self.partition}:{self.seq}"

    @classmethod
    def parse(cls, s: str) -> TxnId:
        m = _TXN_ID.fullmatch(s) if isinstance(s, str) else None
        if not m or int(m.group(2)) > MAX_SEQ:
            raise InvalidTxnId(
                f"{s!r} is not a pulsar-txn v5 transaction id (expected 'v5:<partition>:<seq>'); "
                "v4 (TxnID mostBits/leastBits) transactions are not accepted on this path"
            )
        return cls(int(m.group(1)), int(m.group(2)))


OWNER_SEP = "|"


def partition_of(owner: str, partitions: int) -> int:
    """Stable partition for an owner key, so an owner's txns and its index share a slot.

    Only the owner's group (the text before the first ``|``) counts: every batch of a
    Spark sink (``<sink id>|<query id>|<batchId>``) lives in the partition of its sink
    id, where its progress record is, so one CAS decides and advances both."""
    return zlib.crc32(owner.split(OWNER_SEP, 1)[0].encode()) % partitions


def sink_owner(sink_id: str, query_id: str, batch_id: int) -> str:
    """The owner of a Spark sink batch's transaction: one per (sink, query, batchId)."""
    return f"{sink_id}{OWNER_SEP}{query_id}{OWNER_SEP}{batch_id}"


@dataclass(frozen=True)
class SinkBatch:
    """A Spark sink batch whose commit also advances the sink's progress."""

    sink_id: str
    query_id: str
    batch_id: int


def check_writer_id(writer: str) -> str:
    if not isinstance(writer, str) or not _WRITER_ID.fullmatch(writer):
        raise ConfigError(f"writer id {writer!r} (option 'writer_id') must match "
                          f"{_WRITER_ID.pattern}")
    return writer


@dataclass(frozen=True)
class TxnHeader:
    """The transaction's decision record: the source of truth for every participant."""

    txn_id: TxnId
    state: TxnState
    deadline_ms: int
    created_ms: int
    finalized_ms: int | None = None
    owner: str = ""
    # Writers whose entries are visible; fixed by the commit CAS (empty unless COMMITTED).
    winners: frozenset[str] = field(default_factory=frozenset)
    open_ack_records: int = 0
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True)
class WriteRecord:
    """One writer-run on one segment: registered before its first append (H1)."""

    segment: str
    writer: str
    first: Position | None = None
    last: Position | None = None


@dataclass(frozen=True)
class OpenWrite:
    """An entry of the per-segment open-write index, as seen by a gate query."""

    txn_id: TxnId
    writer: str
    first: Position | None  # None: registered, append position not yet recorded


class EventKind(str, Enum):
    """Why a watcher was woken (a str, as the event streams carry it)."""
    END = "end"        # a decision: the header changed state
    POS = "pos"        # a write's first position: a gate may move
    MAT = "mat"        # a cleanup: open-write entries removed, losers listed
    RESYNC = "resync"  # events may have been missed: re-read what you wait for


@dataclass(frozen=True)
class TxnEvent:
    """A wake-up. The header stays the source of truth; events may be lost and resynced."""

    kind: EventKind
    txn_id: TxnId | None = None
    state: TxnState | None = None
    segments: tuple[str, ...] = ()
