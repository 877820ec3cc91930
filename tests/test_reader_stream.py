"""A READ_COMMITTED stream's own upkeep, with stand-ins for the native reader and the
TransactionBuffer (no broker): how it closes, and what it keeps in memory.

Closing a reader whose connection is gone does not raise. A reader of a sealed segment
is closed by the scalable reader as soon as it is read to its end; pulsar-client 3.x
then often has no connection for it (the broker's end-of-topic command makes it reset
the connection, see docs/durability.md) and its close answers NotConnected. The
broker dropped that reader with the connection, so there is nothing left to close,
and the read that finished the segment must go on.
"""

from __future__ import annotations

from types import SimpleNamespace

import pulsar
import pytest

from pulsar_txn.readers import Reader


class _NativeReader:
    def __init__(self, error: Exception | None) -> None:
        self._reader, self._error, self.closed = self, error, 0

    def close(self) -> None:
        self.closed += 1
        if self._error is not None:
            raise self._error


def _reader(error: Exception | None) -> tuple[Reader, _NativeReader]:
    native = _NativeReader(error)
    side = SimpleNamespace(pulsar=SimpleNamespace(create_reader=lambda *a, **k: native),
                           buffer=SimpleNamespace(resyncs=0))
    return Reader(side, "persistent://public/default/sealed"), native


@pytest.mark.parametrize("gone", [pulsar.NotConnected("NotConnected"),
                                  pulsar.AlreadyClosed("AlreadyClosed")])
def test_closing_a_reader_whose_connection_is_gone_does_not_raise(gone):
    reader, native = _reader(gone)
    reader.close()
    assert native.closed == 1


def test_any_other_close_failure_is_still_raised():
    reader, _ = _reader(pulsar.Timeout("Timeout"))
    with pytest.raises(pulsar.Timeout):
        reader.close()


class _Buffer:
    """Every transaction committed, its one writer the winner."""

    resyncs = 0

    def classify(self, segment, entries):
        from pulsar_txn.buffer import Verdict
        return [Verdict.DELIVER for _ in entries]


def test_a_long_lived_reader_keeps_a_bounded_memo_of_transaction_verdicts():
    """One verdict per distinct (txn, writer) was kept for the reader's life: a reader
    of a busy topic grew without end. A forgotten verdict is asked again (the
    TransactionBuffer keeps final outcomes), so the memo is emptied past a bound."""
    from pulsar_txn.readers import VERDICT_MEMO

    reader, _ = _reader(None)
    reader.side = SimpleNamespace(buffer=_Buffer())
    for i in range(3 * VERDICT_MEMO):
        assert reader._verdict(f"v5:0:{i}", "w1").name == "DELIVER"
    assert len(reader._verdicts) <= VERDICT_MEMO and len(reader._ids) <= VERDICT_MEMO


def test_a_store_resync_during_a_wait_drops_every_remembered_verdict():
    """Waiting on T1's entry, the reader meets a resync (the store went back to an earlier
    copy, which lost T2's commit). Its memo said T2's entry is DELIVER: that verdict
    must not outlive the resync (fail closed on T2), also when T1's wait succeeds."""
    from pulsar_txn.buffer import Verdict

    class ResyncingBuffer:
        resyncs = 0

        def settle(self, segment, entries, wait_s):
            if not self.resyncs:
                self.resyncs += 1  # the store went back while this reader waited
            return [Verdict.DELIVER for _ in entries]

        def classify(self, segment, entries):
            return [Verdict.DELIVER if str(t) == "v5:0:1" else Verdict.SKIP
                    for t, _ in entries]

    reader, _ = _reader(None)
    reader.side = SimpleNamespace(buffer=ResyncingBuffer())
    reader._buf.extend([("A", 1, "v5:0:1", "w"), ("B", 2, "v5:0:2", "w")])
    reader._gate_id, reader._resyncs = 10, 0
    reader._verdicts[("v5:0:2", "w")] = Verdict.DELIVER  # remembered before the resync
    assert reader.next_raw(1000)[0] == "A"
    assert ("v5:0:2", "w") not in reader._verdicts
