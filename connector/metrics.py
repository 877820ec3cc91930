"""Prometheus metrics for operators, computed from the metadata store at each scrape.

``pulsar-txn metrics serve --port 9464`` (or :func:`serve`) exposes them. Counters
are kept exactly by the store's scripts (in the same step as each create and each
end), so every process that opens or ends transactions is counted, whoever scrapes.

Every family starts with ``ptxn_``: Apache Pulsar's transaction coordinator exports
``pulsar_txn_*`` families (``pulsar_txn_active_count``, ``pulsar_txn_committed_total``
…) that would land in the same Prometheus with another meaning (docs/metrics.md).

The gate lag needs the broker: its probes run on background workers (:class:`GateLagProbes`)
and a scrape waits for them at most ``probe_budget_s``, well under Prometheus's default
10 s ``scrape_timeout``; a probe that fails or is late leaves the last known value,
marked stale, never a made-up 0.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterator

from pulsar_txn.broker_io import last_entry_strict
from pulsar_txn.metastore import open_store
from pulsar_txn.metastore.base import MetadataStore
from pulsar_txn.records import Position
from pulsar_txn.state import TxnState

log = logging.getLogger(__name__)
ACKS_PENDING_SCAN = 200  # ended transactions a scrape looks at per partition, oldest first
PROBE_BUDGET_S = 2.0  # the longest a scrape waits for the broker, all probes together
PROBE_WORKERS = 4  # probes run at once; a hung one holds one worker, never the scrape
PREFIX = "ptxn_"


def _entries_between(low: Position, high: Position) -> int | None:
    """Entries in (low, high] when both are in one ledger; None when it spans ledgers
    (entry ids restart per ledger, so the count is unknown without reading)."""
    if low.ledger == high.ledger:
        return max(0, high.entry - low.entry + 1)
    return None


class GateLagProbes:
    """Each segment's gate lag, measured by ``last_entry(segment)`` on background workers.

    ``last_entry`` returns the last confirmed entry (``None``: the broker says the
    segment is empty) or raises when it cannot tell. :meth:`measure` asks once per
    segment (never twice at a time: a hung probe is not piled onto) and waits until
    every segment answered or failed, or ``budget_s`` passed. Values are kept with the
    time they were measured, so a failed or late probe serves the last known one.
    """

    def __init__(self, last_entry: Callable[[str], Position | None],
                 budget_s: float = PROBE_BUDGET_S, workers: int = PROBE_WORKERS) -> None:
        self._last_entry, self.budget_s, self._workers = last_entry, budget_s, workers
        self._cond = threading.Condition()
        self._queue: collections.deque = collections.deque()
        self._pending: set[str] = set()  # queued or being probed
        self._tried: dict[str, float] = {}  # segment -> when its last probe ended
        self._known: dict[str, tuple[int | None, float]] = {}  # -> (lag, measured at)
        self._started = 0

    def measure(self, lows: dict) -> dict[str, tuple[int | None, float, bool]]:
        """``lows``: segment -> first open write's position. Returns segment ->
        (lag or None, seconds since measured, stale) for segments with a known value,
        and (None, 0, True) for those never measured."""
        start = time.monotonic()
        with self._cond:
            for gone in set(self._known) - set(lows):
                del self._known[gone]
            for gone in set(self._tried) - set(lows) - self._pending:
                del self._tried[gone]
            for segment, low in lows.items():
                if segment not in self._pending:
                    self._pending.add(segment)
                    self._queue.append((segment, low))
            while self._started < min(self._workers, len(self._pending)):
                self._started += 1
                threading.Thread(target=self._work, daemon=True,
                                 name=f"ptxn-metrics-probe-{self._started}").start()
            self._cond.notify_all()
            self._cond.wait_for(lambda: all(self._tried.get(s, -1.0) >= start for s in lows),
                                timeout=self.budget_s)
            now, out = time.monotonic(), {}
            for segment in lows:
                lag, at = self._known.get(segment, (None, None))
                out[segment] = ((None, 0.0, True) if at is None
                                else (lag, max(0.0, now - at), at < start))
            return out

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue)
                segment, low = self._queue.popleft()
            try:
                last = self._last_entry(segment)
                lag = None if last is None else _entries_between(low, last)
                measured = True
            except Exception as e:  # noqa: BLE001 - a failed probe leaves the last value
                log.debug("last entry of %s unknown: %s", segment, e)
                measured = False
            with self._cond:
                now = time.monotonic()
                if measured:
                    self._known[segment] = (lag, now)
                self._tried[segment] = now
                self._pending.discard(segment)
                self._cond.notify_all()


class StoreCollector:
    """A prometheus_client collector; ``last_entry(segment)`` (optional) gives a
    segment's last confirmed entry for the gate lag (``None``: empty; raises when it
    cannot tell), waited for at most ``probe_budget_s`` per scrape."""

    def __init__(self, store: MetadataStore, last_entry=None,
                 probe_budget_s: float = PROBE_BUDGET_S, namespace: str | None = None) -> None:
        self.store = store
        self.namespace = namespace if namespace is not None else store.namespace
        self.probes = None if last_entry is None else GateLagProbes(last_entry, probe_budget_s)

    def _acks_pending(self) -> int:
        ids = [t for t, _ in self.store.finalized_txns(limit=ACKS_PENDING_SCAN)]
        return sum(1 for h in self.store.get_headers(ids).values()
                   if h is not None and h.state is TxnState.COMMITTED and h.open_ack_records)

    def describe(self) -> list:
        return []  # collected lazily: no scrape at registration

    def collect(self) -> Iterator:
        from prometheus_client.core import GaugeMetricFamily

        snap = self.store.metrics_snapshot()
        info = GaugeMetricFamily(
            "ptxn_info", "Always 1: the metastore namespace this endpoint serves (dashboards "
            "join it on job and instance)", labels=["metastore_namespace"])
        info.add_metric([self.namespace], 1)
        yield info
        yield from self._transactions(snap)
        yield from self._segments(snap["open_writes"])
        sinks = GaugeMetricFamily("ptxn_sink_last_committed_batch",
                                  "Last Spark micro-batch a sink committed", labels=["sink_id"])
        for sink_id, batch in sorted(snap["sinks"].items()):
            sinks.add_metric([sink_id], batch)
        yield sinks

    def _transactions(self, snap: dict) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        c = snap["counters"]
        for name, key, text in (
                ("created", "opened", "Transactions opened"),
                ("committed", "committed", "Transactions committed"),
                ("aborted", "aborted", "Transactions aborted (timeouts included)"),
                ("timed_out", "timed_out", "Transactions aborted past their deadline")):
            yield CounterMetricFamily(f"ptxn_transactions_{name}", text, value=c[key])
        yield GaugeMetricFamily("ptxn_transactions_open", "OPEN transactions",
                                value=snap["open"])
        oldest = snap["oldest_open_created_ms"]
        yield GaugeMetricFamily(
            "ptxn_oldest_open_transaction_age_seconds", "Age of the oldest OPEN transaction",
            value=0.0 if oldest is None else max(0, snap["now_ms"] - oldest) / 1000)
        yield GaugeMetricFamily(
            "ptxn_transactions_unmaterialized",
            "Ended transactions whose index cleanup has not run yet", value=snap["unmaterialized"])
        yield GaugeMetricFamily(
            "ptxn_transactions_gc_backlog",
            "Ended transactions not yet collected (kept for the retention window)",
            value=snap["gc_backlog"])
        yield GaugeMetricFamily(
            "ptxn_transactions_acks_pending",
            "Committed transactions whose acks are not settled (their consumer died before "
            f"writing the tombstones), among the {ACKS_PENDING_SCAN} oldest ended per "
            "partition; GC settles them past the retention, 'pulsar-txn settle-acks' at once",
            value=self._acks_pending())
        yield CounterMetricFamily(
            "ptxn_foreign_entries_skipped",
            "Entries of other deployments readers passed (read.foreignDeployments=skip)",
            value=self.store.foreign_skipped())

    def _segments(self, open_writes: dict) -> Iterator:
        from prometheus_client.core import GaugeMetricFamily

        writes = GaugeMetricFamily("ptxn_segment_open_writes",
                                   "Open writes registered on a segment", labels=["segment"])
        lag = GaugeMetricFamily(
            "ptxn_segment_gate_lag_entries",
            "Entries of a segment held back from readers by OPEN transactions (same-ledger "
            "count; needs the broker; the last known value when the probe failed or was late)",
            labels=["segment"])
        stale = GaugeMetricFamily(
            "ptxn_segment_gate_lag_stale",
            "1 when this scrape's broker probe of the segment failed or was late (the gate "
            "lag shown, if any, is an older one), 0 when measured during this scrape",
            labels=["segment"])
        age = GaugeMetricFamily("ptxn_segment_gate_lag_age_seconds",
                                "Seconds since the gate lag shown was measured",
                                labels=["segment"])
        for segment, (n, _) in sorted(open_writes.items()):
            writes.add_metric([segment], n)
        if self.probes is not None:
            lows = {s: low for s, (_, low) in open_writes.items() if low is not None}
            for segment, (held, since, late) in sorted(self.probes.measure(lows).items()):
                stale.add_metric([segment], 1 if late else 0)
                if held is not None:
                    lag.add_metric([segment], held)
                    age.add_metric([segment], round(since, 3))
        yield from (writes, lag, stale, age)


def serve(metastore_url: str, namespace: str, port: int, addr: str = "0.0.0.0",
          client=None, probe_budget_s: float = PROBE_BUDGET_S):
    """Start the HTTP endpoint in a background thread; returns (server, thread).
    ``client``: a pulsar.Client (with the broker's credentials), for the gate lag."""
    from prometheus_client import CollectorRegistry, start_http_server

    store = open_store(metastore_url, namespace=namespace, create=False)  # read-only
    last_entry = None
    if client is not None:
        def last_entry(segment: str):
            return last_entry_strict(client, segment)
    registry = CollectorRegistry()
    registry.register(StoreCollector(store, last_entry, probe_budget_s, namespace))
    return start_http_server(port, addr=addr, registry=registry)
