"""Prometheus metrics for operators, computed from the metadata store at each scrape.

``pulsar-txn metrics serve --port 9464`` (or :func:`serve`) exposes them. Counters
are kept exactly by the store's scripts (in the same step as each create and each
end), so every process that opens or ends transactions is counted, whoever scrapes.
Names follow Apache Pulsar's transaction coordinator metrics (``pulsar_txn_*``) and
its metadata store's (``pulsar_txn_metadata_store_*``) where one applies.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from pulsar_txn.broker_io import last_entry as probe
from pulsar_txn.metastore import open_store
from pulsar_txn.metastore.base import MetadataStore
from pulsar_txn.state import TxnState

log = logging.getLogger(__name__)
ACKS_PENDING_SCAN = 200  # ended transactions a scrape looks at per partition, oldest first


def _entries_between(low, high: tuple[int, int]) -> int | None:
    """Entries in (low, high] when both are in one ledger; None when it spans ledgers
    (entry ids restart per ledger, so the count is unknown without reading)."""
    if low.ledger == high[0]:
        return max(0, high[1] - low.entry + 1)
    return None


class StoreCollector:
    """A prometheus_client collector; ``last_entry(segment)`` (optional) gives a
    segment's last confirmed entry, for the gate lag."""

    def __init__(self, store: MetadataStore, last_entry=None) -> None:
        self.store = store
        self.last_entry = last_entry

    def _acks_pending(self) -> int:
        ids = [t for t, _ in self.store.finalized_txns(limit=ACKS_PENDING_SCAN)]
        return sum(1 for h in self.store.get_headers(ids).values()
                   if h is not None and h.state is TxnState.COMMITTED and h.open_ack_records)

    def describe(self) -> list:
        return []  # collected lazily: no scrape at registration

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        snap = self.store.metrics_snapshot()
        c = snap["counters"]
        for name, key, text in (
                ("pulsar_txn_created", "opened", "Transactions opened"),
                ("pulsar_txn_committed", "committed", "Transactions committed"),
                ("pulsar_txn_aborted", "aborted", "Transactions aborted (timeouts included)"),
                ("pulsar_txn_timeout", "timed_out", "Transactions aborted past their deadline")):
            yield CounterMetricFamily(name, text, value=c[key])
        yield GaugeMetricFamily("pulsar_txn_active_count", "OPEN transactions",
                                value=snap["open"])
        oldest = snap["oldest_open_created_ms"]
        yield GaugeMetricFamily(
            "pulsar_txn_oldest_open_age_seconds", "Age of the oldest OPEN transaction",
            value=0.0 if oldest is None else max(0, snap["now_ms"] - oldest) / 1000)
        yield GaugeMetricFamily(
            "pulsar_txn_metadata_store_unmaterialized",
            "Ended transactions whose index cleanup has not run yet", value=snap["unmaterialized"])
        yield GaugeMetricFamily(
            "pulsar_txn_metadata_store_gc_backlog",
            "Ended transactions not yet collected (kept for the retention window)",
            value=snap["gc_backlog"])
        yield GaugeMetricFamily(
            "pulsar_txn_acks_pending",
            "Committed transactions whose acks are not settled (their consumer died before "
            f"writing the tombstones), among the {ACKS_PENDING_SCAN} oldest ended per "
            "partition; GC settles them past the retention, 'pulsar-txn settle-acks' at once",
            value=self._acks_pending())
        writes = GaugeMetricFamily("pulsar_txn_segment_open_writes",
                                   "Open writes registered on a segment", labels=["segment"])
        lag = GaugeMetricFamily(
            "pulsar_txn_segment_gate_lag_entries",
            "Entries of a segment held back from readers by OPEN transactions "
            "(same-ledger count; needs the broker)", labels=["segment"])
        for segment, (n, low) in sorted(snap["open_writes"].items()):
            writes.add_metric([segment], n)
            if low is None or self.last_entry is None:
                continue
            try:
                last = self.last_entry(segment)
            except Exception as e:  # noqa: BLE001 - a scrape must not fail on one segment
                log.debug("last entry of %s unknown: %s", segment, e)
                continue
            held = None if last is None else _entries_between(low, last)
            if held is not None:
                lag.add_metric([segment], held)
        yield writes
        yield lag
        sinks = GaugeMetricFamily("pulsar_txn_sink_last_committed_batch",
                                  "Last Spark micro-batch a sink committed", labels=["sink_id"])
        for sink_id, batch in sorted(snap["sinks"].items()):
            sinks.add_metric([sink_id], batch)
        yield sinks
        yield CounterMetricFamily(
            "pulsar_txn_foreign_entries_skipped",
            "Entries of other deployments readers passed (read.foreignDeployments=skip)",
            value=self.store.foreign_skipped())


def serve(metastore_url: str, namespace: str, port: int, addr: str = "0.0.0.0",
          client=None):
    """Start the HTTP endpoint in a background thread; returns (server, thread).
    ``client``: a pulsar.Client (with the broker's credentials), for the gate lag."""
    from prometheus_client import CollectorRegistry, start_http_server

    store = open_store(metastore_url, namespace=namespace, create=False)  # read-only
    last_entry = None
    if client is not None:
        def last_entry(segment: str):
            return probe(client, segment)
    registry = CollectorRegistry()
    registry.register(StoreCollector(store, last_entry))
    return start_http_server(port, addr=addr, registry=registry)
