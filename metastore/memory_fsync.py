"""The memory backend's model of ``durability=waitaof`` (see redis_fsync.py for Redis).

Why a model at all: the history machine (tests/test_history_stateful.py) checks that
no reader acts on a decision a crash of the metastore's host can still lose, and the
memory backend is where it runs. The server keeps what its last fsync wrote
(``Server.disk``); a commit answers once its decision is there (the committer's
WAITAOF), readers act on a decision only once it is (their own WAITAOF), and a
stalled disk confirms nothing. ``Server.host_crash`` starts the server again on the
disk's copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pulsar_txn.errors import MetastoreUnavailable, TxnRecordsLost
from pulsar_txn.records import SinkBatch, TxnHeader, TxnId
from pulsar_txn.state import TxnState

from .base import not_taken
from .memory_state import Server


class MemoryFsync:
    """Mixin of MemoryMetadataStore: the decisions' fsync under ``waitaof``."""

    _s: Server
    durability: str

    # get_headers and end_cas: MemoryMetadataStore's

    def final_headers(self, txn_ids: Sequence[TxnId]) -> dict[TxnId, TxnHeader | None]:
        """get_headers; under ``waitaof`` a decision not on disk yet is fsynced here
        (the reader's WAITAOF) or, if the disk stalls, given as not taken."""
        out = self.get_headers(txn_ids)
        if self.durability != "waitaof":
            return out
        unsure = [t for t, h in out.items() if h is not None and h.state.is_terminal
                  and not self._s.on_disk(t)]
        if unsure and not self._s.fsync():
            for t in unsure:
                out[t] = not_taken(out[t])  # type: ignore[arg-type]
        return out

    def decision_on_disk(self, txn_id: TxnId) -> bool:
        """waitaof: the decision is on disk, or is now (the committer's WAITAOF)."""
        return self.durability != "waitaof" or self._s.on_disk(txn_id) or self._s.fsync()

    def end_txn(self, txn_id: TxnId, target: TxnState, winners: Iterable[str] | None,
                segments: Iterable[str] | None = None, sink: SinkBatch | None = None,
                made: tuple[int, int] = (0, 0)) -> tuple[TxnHeader, bool, bool]:
        """end_txn.lua: the single CAS. (header, changed, timed_out). Under ``waitaof``
        the answer waits for the decision's fsync, as on Redis."""
        try:
            out = self.end_cas(txn_id, target, winners, sink, made)
        except TxnRecordsLost:
            self.decision_on_disk(txn_id)
            raise
        if not self.decision_on_disk(txn_id):
            raise MetastoreUnavailable("the decision was not fsynced (the disk stalls); "
                                       "ending the transaction again tells its outcome")
        return out

