"""A scrape never waits on the broker longer than its probe budget.

The gate lag needs each segment's last entry from the broker. The probes run on
background workers; a scrape waits for them at most ``probe_budget_s`` and, for a
probe that hangs, fails or answers late, shows the last value it knows, marked with
``ptxn_segment_gate_lag_stale`` = 1 and its age — never a made-up 0.
"""

from __future__ import annotations

import threading
import time

import pytest

from pulsar_txn.metastore import MemoryMetadataStore
from pulsar_txn.metrics import StoreCollector
from pulsar_txn.records import Position

BUDGET_S = 0.3


@pytest.fixture
def store():
    s = MemoryMetadataStore(partitions=2)
    yield s
    s.close()


def _open_write(store, segment: str, ledger: int, entry: int) -> None:
    t = store.create_txn(store.next_txn_id("", None), 600_000, "").txn_id
    store.register_write(t, segment, "w")
    store.record_write(t, segment, "w", Position(ledger, entry), None)


def _scrape(collector) -> tuple[dict, float]:
    """Samples by (name, segment label or None), and how long the scrape took."""
    start = time.monotonic()
    out = {}
    for family in collector.collect():
        for s in family.samples:
            out[(s.name, s.labels.get("segment"))] = s.value
    return out, time.monotonic() - start


class _Broker:
    """The injected ``last_entry(segment)``: answers, fails or hangs on command."""

    def __init__(self) -> None:
        self.last = {"s": Position(1, 9)}
        self.mode = "answer"
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, segment: str):
        self.calls += 1
        if self.mode == "hang":
            self.release.wait(30)
        if self.mode == "fail":
            raise TimeoutError("broker down")
        return self.last[segment]


def test_a_scrape_returns_within_the_budget_when_a_probe_hangs_and_marks_the_lag_stale(store):
    _open_write(store, "s", 1, 5)
    broker = _Broker()
    broker.mode = "hang"
    collector = StoreCollector(store, broker, probe_budget_s=BUDGET_S)
    try:
        m, took = _scrape(collector)
        assert took < BUDGET_S + 1.0
        assert m[("ptxn_segment_open_writes", "s")] == 1
        assert m[("ptxn_segment_gate_lag_stale", "s")] == 1
        # never measured: no value at all, never 0
        assert ("ptxn_segment_gate_lag_entries", "s") not in m
        assert ("ptxn_segment_gate_lag_age_seconds", "s") not in m
        m, took = _scrape(collector)  # the hung probe is not asked again meanwhile
        assert took < BUDGET_S + 1.0 and broker.calls == 1
        assert m[("ptxn_segment_gate_lag_stale", "s")] == 1
    finally:
        broker.release.set()
    # the late answer arrives in the background; the next scrape asks afresh
    broker.mode = "answer"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        m, _ = _scrape(collector)
        if m[("ptxn_segment_gate_lag_stale", "s")] == 0:
            break
    assert m[("ptxn_segment_gate_lag_stale", "s")] == 0
    assert m[("ptxn_segment_gate_lag_entries", "s")] == 5  # entries 5..9 of ledger 1


def test_a_failed_or_late_probe_serves_the_last_known_lag_marked_stale_never_zero(store):
    _open_write(store, "s", 1, 5)
    broker = _Broker()
    collector = StoreCollector(store, broker, probe_budget_s=BUDGET_S)
    m, _ = _scrape(collector)
    assert m[("ptxn_segment_gate_lag_entries", "s")] == 5
    assert m[("ptxn_segment_gate_lag_stale", "s")] == 0
    assert m[("ptxn_segment_gate_lag_age_seconds", "s")] < BUDGET_S + 1.0

    broker.mode, broker.last = "fail", {"s": (1, 5)}
    time.sleep(0.05)
    m, took = _scrape(collector)
    assert took < BUDGET_S + 1.0
    assert m[("ptxn_segment_gate_lag_entries", "s")] == 5  # the last known, not 0
    assert m[("ptxn_segment_gate_lag_stale", "s")] == 1
    assert m[("ptxn_segment_gate_lag_age_seconds", "s")] >= 0.05

    broker.mode = "hang"
    try:
        m, took = _scrape(collector)
        assert took < BUDGET_S + 1.0
        assert m[("ptxn_segment_gate_lag_entries", "s")] == 5
        assert m[("ptxn_segment_gate_lag_stale", "s")] == 1
    finally:
        broker.release.set()


def test_segments_without_open_writes_drop_their_lag(store):
    broker = _Broker()
    collector = StoreCollector(store, broker, probe_budget_s=BUDGET_S)
    m, _ = _scrape(collector)
    assert not [k for k in m if k[1] is not None]
    assert broker.calls == 0  # nothing to ask the broker


def test_without_a_broker_the_lag_is_absent_not_zero(store):
    _open_write(store, "s", 1, 5)
    m, _ = _scrape(StoreCollector(store))
    assert m[("ptxn_segment_open_writes", "s")] == 1
    assert ("ptxn_segment_gate_lag_entries", "s") not in m
    assert ("ptxn_segment_gate_lag_stale", "s") not in m
