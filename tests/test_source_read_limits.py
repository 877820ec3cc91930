"""minRecordsPerTrigger with maxRecordsPerTrigger behaves like Kafka's min + max: a batch
waits until `min` rows are there (or `maxTriggerDelay` passed), then reads at most `max`.

The planner is a stand-in for one segment of single-message entries 0..available-1 on
ledger 7 (the arithmetic under test is the stream reader's, not the broker's)."""

from __future__ import annotations

from types import SimpleNamespace

from pyspark.sql.streaming.datasource import ReadMaxRows, ReadMinRows

from pulsar_txn.spark.offsets import BEFORE, from_offset, to_offset
from pulsar_txn.spark.planning import Unit
from pulsar_txn.spark.source_reader import PulsarTxnStreamReader

SEG = "persistent://public/default/t"
SIZE = 100  # payload bytes of each message


class OneSegment:
    def __init__(self, available: int) -> None:
        self.available = available
        self.store = SimpleNamespace(check_deployment=lambda: None, foreign_skipped=lambda: 0)
        self.coordinator = SimpleNamespace(sweep_if_due=lambda ms: None)

    def units(self, cur):
        return [Unit(topic=SEG, segment=SEG)]

    def gate_and_lac(self, segment, start, lac):
        last = (7, self.available - 1, 2**31 - 1)
        return (last if self.available else BEFORE), (7, self.available - 1), 0

    def count_until(self, segment, start, end, budget, byte_budget=None):
        """Messages of SIZE bytes each; at least one, as the real planner."""
        first = 0 if start == BEFORE else start[1] + 1
        if byte_budget is not None:
            budget = min(budget, max(1, byte_budget // SIZE))
        n = max(0, min(budget, end[1] + 1 - first))
        return ((7, first + n - 1, 2**31 - 1) if n < end[1] + 1 - first else end), n, n * SIZE


def _reader(available: int, **options) -> PulsarTxnStreamReader:
    opts = {"service.url": "pulsar://localhost:6650", "metastore.url": "redis://localhost:1",
            "topic": SEG, **{k.lower(): v for k, v in options.items()}}
    r = PulsarTxnStreamReader(opts)
    r._planner = OneSegment(available)
    return r


def _rows(reader, limit) -> int:
    end = from_offset(reader.latestOffset(to_offset({SEG: BEFORE}), limit))[SEG]
    return 0 if end == BEFORE else end[1] + 1


def test_min_and_max_together_wait_for_min_then_read_at_most_max():
    r = _reader(5, minRecordsPerTrigger="10", maxRecordsPerTrigger="20", maxTriggerDelay="1h")
    limit = r.getDefaultReadLimit()
    assert _rows(r, limit) == 0          # 5 < min: the batch waits
    r._planner.available = 50
    assert _rows(r, limit) == 20         # enough: at most max


def test_min_with_a_byte_limit_never_starves_a_full_batch():
    """A batch the byte limit filled is full, however few its rows: it goes at once
    (it waited the whole maxTriggerDelay each time when the rows were counted after
    the cap)."""
    r = _reader(100, minRecordsPerTrigger="10", maxBytesPerTrigger="300", maxTriggerDelay="1h")
    assert _rows(r, r.getDefaultReadLimit()) == 3
    r._planner.available = 2  # not full, and under the min: waits
    assert _rows(r, r.getDefaultReadLimit()) == 0


def test_min_alone_still_waits_and_the_delay_lets_it_through():
    r = _reader(5, minRecordsPerTrigger="10", maxTriggerDelay="0")
    assert isinstance(r.getDefaultReadLimit(), ReadMinRows)
    assert _rows(r, r.getDefaultReadLimit()) == 5   # delay 0: the few rows go now


def test_max_alone_caps_without_waiting():
    r = _reader(5, maxRecordsPerTrigger="3")
    assert isinstance(r.getDefaultReadLimit(), ReadMaxRows)
    assert _rows(r, r.getDefaultReadLimit()) == 3


def test_available_now_never_waits_for_min():
    """Trigger.AvailableNow must end: its last batch holds what is left, however few."""
    r = _reader(5, minRecordsPerTrigger="10", maxTriggerDelay="1h")
    r._target = {SEG: (7, 4, 2**31 - 1)}
    assert _rows(r, r.getDefaultReadLimit()) == 5


def test_a_trigger_logs_nothing_at_info(caplog, monkeypatch):
    """A healthy query's per-trigger lines are DEBUG (PULSAR_TXN_LOG_LEVEL=DEBUG)."""
    import logging

    from pulsar_txn.spark.logs import level

    r = _reader(5)
    with caplog.at_level(logging.DEBUG, logger="pulsar_txn"):
        for available in (5, 9, 12):
            r._planner.available = available
            _rows(r, r.getDefaultReadLimit())
    assert [rec for rec in caplog.records if rec.levelno >= logging.INFO] == []
    assert any("behind latest" in rec.getMessage() for rec in caplog.records)
    monkeypatch.setenv("PULSAR_TXN_LOG_LEVEL", "debug")
    assert level() == logging.DEBUG
    monkeypatch.setenv("PULSAR_TXN_LOG_LEVEL", "LOUD")
    assert level() == logging.INFO
