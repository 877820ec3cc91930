"""The source's Spark readers.

Spark asks them, on the driver, how far each micro-batch (or batch query) reads and
how to split it. They answer from the gate (``planning``), so every entry of a range
already has its outcome and replaying a range returns the same rows; the read limits
and ``Trigger.AvailableNow`` only ever move an end back. ``read`` runs on executors
(``partition_reader``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from pulsar_txn.broker_io import last_entry_strict
from pulsar_txn.errors import ConfigError

from .offsets import (
    BEFORE,
    Position,
    SegmentPartition,
    entries_between,
    from_offset,
    plan_partitions,
    to_offset,
)
from .options import SourceOptions
from .partition_reader import read_partition
from .planning import Planner, Unit
from .value_schema import with_planned

log = logging.getLogger("pulsar_txn.spark.source")  # the name users configure: kept

_SOURCE_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"


def _stop_on_terminate() -> None:
    """Let Spark's stop of a streaming query run the reader's ``stop()``.

    Spark stops a query by terminating (SIGTERM) the Python process that runs its
    stream reader, so the runner's ``finally: reader.stop()`` never ran and the
    planner's kept probe subscriptions outlived the query. In that process only, and
    only if nobody else handles SIGTERM there, SIGTERM becomes SystemExit: the runner's
    ``finally`` then stops the reader (the planner removes its probes).

    Spark sends SIGTERM twice (``PythonWorkerFactory.stopWorker``, then its ``stop()``
    destroys the same process again), so later ones are ignored while ``stop()`` runs;
    a stop that hangs is ended by a watchdog after ``_STOP_GRACE_S``.
    """
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if (getattr(spec, "name", None) != _SOURCE_RUNNER
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        return

    def stopping(signum, _frame):
        log.debug("pulsar-txn source: signal %d while stopping; stop() goes on", signum)

    def on_terminate(signum, _frame):
        signal.signal(signal.SIGTERM, stopping)
        threading.Thread(target=_end_after_grace, args=(128 + signum,), daemon=True,
                         name="pulsar-txn-stop-watchdog").start()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_terminate)


_STOP_GRACE_S = 30.0  # the planner's close waits up to 10 s for probe removals


def _end_after_grace(code: int) -> None:
    time.sleep(_STOP_GRACE_S)
    log.error("pulsar-txn source: the stream reader's stop() did not finish within %.0f s "
              "of SIGTERM; the process ends now (probe subscriptions not yet removed stay "
              "behind, see docs/operations.md)", _STOP_GRACE_S)
    os._exit(code)


class PulsarTxnStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """READ_COMMITTED micro-batches: an end offset is each segment's gate, capped by the
    read limits; Spark keeps the offsets in its checkpoint and may replay a range."""

    def __init__(self, options, schema=None) -> None:
        self.opts = with_planned(SourceOptions.from_options(options), schema)
        self._planner: Planner | None = None
        self._target: dict[str, Position] | None = None  # Trigger.AvailableNow cap
        self._waiting_since: float | None = None
        self._report: dict | None = None
        self._logged: tuple | None = None
        self._foreign_logged = 0

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.opts)
            _stop_on_terminate()
        return self._planner

    def _units(self) -> list[Unit]:
        return [u for name in self.planner.resolve() for u in self.planner.all_segments(name)]

    def initialOffset(self) -> dict:
        units = self._units()
        if self.opts.starting_timestamp_ms is not None:
            ts = self.opts.starting_timestamp_ms
            return to_offset({u.segment: self.planner.before_time(u.segment, ts) for u in units})
        s = self.opts.starting
        if s == "earliest":
            return to_offset({u.segment: BEFORE for u in units})
        if s == "latest":  # sealed segments count as read to their end
            # an unknown last entry raises: 'latest' never silently becomes 'earliest'
            return to_offset({u.segment: u.cap if u.cap else self.planner.gate(
                u.segment, BEFORE, last_entry_strict(self.planner.pulsar, u.segment))
                for u in units})
        return to_offset({u.segment: s.get(u.segment, BEFORE) for u in units})

    def latestOffset(self, start: dict, limit) -> dict:
        # a metastore reset under the query stops it here, naming metastore.url, before
        # any offset is planned from the new deployment's indexes (one HMGET a trigger)
        self.planner.store.check_deployment()
        # once per trigger, also when idle: the deployment's background work (a query
        # must not stall behind an abandoned txn when no other process sweeps)
        self.planner.coordinator.sweep_if_due(self.opts.retention_ms)
        cur = from_offset(start)
        units = self.planner.units(cur)
        ends: dict[str, Position] = dict(cur)
        latest: dict[str, str] = {}
        behind = holding = 0
        for u in units:
            s = cur.get(u.segment, BEFORE)
            if u.hold:
                ends[u.segment] = s
                continue
            g, lac, held = self.planner.gate_and_lac(u.segment, s, u.lac)
            if u.cap is not None:
                g = min(g, u.cap)
            if self._target is not None:
                g = min(g, self._target.get(u.segment, s))
            ends[u.segment] = max(g, s)
            holding += held
            if lac is not None:
                latest[u.segment] = str(lac)
                behind += entries_between(ends[u.segment], lac)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.opts.max_records
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.opts.max_bytes
        full = False  # a read limit cut the batch: it is full, whatever its row count
        if max_rows is not None or max_bytes is not None:
            full = self._cap(units, cur, ends, max_rows, max_bytes)
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self.opts.min_records
        if (min_rows is not None and self._target is None and not full
                and self._too_few(units, cur, ends, min_rows)):
            ends = dict(cur)
        elif full:
            self._waiting_since = None
        if self.opts.subscription:
            for u in units:
                self.planner.subscription_consumer(u.segment)
            # Spark's loop is construct -> run -> commit log -> construct: the start of
            # a new plan is the end of a committed batch (after a crash the last batch
            # is re-run first, without latestOffset). Acking here also covers the last
            # batch of Trigger.AvailableNow, for which commit() never comes.
            self.planner.advance_subscription(cur)
        self._metrics(latest, behind, holding, len(units))
        return to_offset(ends)

    def _cap(self, units: list[Unit], cur: dict[str, Position], ends: dict[str, Position],
             max_rows: int | None, max_bytes: int | None) -> bool:
        """Move ends back so the batch holds at most ``max_rows`` messages and about
        ``max_bytes`` payload bytes (at least one message: progress). True: an end
        moved back (more is waiting than the batch may hold)."""
        rows, size, cut = max_rows or 2**62, max_bytes, False
        for u in units:
            s = cur.get(u.segment, BEFORE)
            if ends[u.segment] <= s:
                continue
            if rows <= 0 or (size is not None and size <= 0):
                ends[u.segment], cut = s, True
                continue
            planned = ends[u.segment]
            ends[u.segment], n, nbytes = self.planner.count_until(
                u.segment, s, planned, rows, size)
            cut = cut or ends[u.segment] != planned
            rows -= n
            if size is not None:
                size -= nbytes
        return cut

    def _too_few(self, units: list[Unit], cur: dict[str, Position], ends: dict[str, Position],
                 min_rows: int) -> bool:
        """``minRecordsPerTrigger``: fewer than ``min_rows`` messages planned, and the
        first such trigger was less than ``maxTriggerDelay`` ago (Kafka's min + max:
        the max has already capped ``ends``; ``Trigger.AvailableNow`` never waits)."""
        available = sum(self.planner.count_until(u.segment, cur.get(u.segment, BEFORE),
                                                 ends[u.segment], min_rows)[1]
                        for u in units if ends[u.segment] > cur.get(u.segment, BEFORE))
        now = time.monotonic()
        if available >= min_rows:
            self._waiting_since = None
            return False
        self._waiting_since = self._waiting_since or now
        if available == 0 or now - self._waiting_since < self.opts.max_trigger_delay_ms / 1000:
            return available > 0  # nothing planned: no batch either way, the clock runs on
        self._waiting_since = None
        return False

    def _metrics(self, latest: dict, behind: int, holding: int, segments: int) -> None:
        """Progress: shown as the source's latestOffset in each query progress.
        ``foreignEntriesSkipped``: entries of other deployments the namespace's readers
        passed with ``read.foreignDeployments=skip`` (a Python source has no custom
        metrics; the executors count them in the metastore, as the Prometheus metric)."""
        foreign = self.planner.store.foreign_skipped()
        self._report = {"latest": latest, "entriesBehindLatest": behind,
                        "openTxnsHoldingGate": holding, "segmentsRead": segments,
                        "foreignEntriesSkipped": foreign}
        state = (behind, holding, segments)
        if state != self._logged:
            self._logged = state
            log.debug("pulsar-txn source: %d entries behind latest on %d segments; %d open "
                     "transactions hold the gate", behind, segments, holding)
        if foreign != self._foreign_logged:
            self._foreign_logged = foreign
            log.warning("pulsar-txn source: %d entries of other deployments skipped so far in "
                        "namespace %r (read.foreignDeployments=skip)", foreign,
                        self.opts.namespace)

    def reportLatestOffset(self) -> dict | None:
        return self._report

    def partitions(self, start: dict, end: dict) -> list[SegmentPartition]:
        return plan_partitions(start, end, self.opts.min_partitions, self.planner.first_entry,
                               self.planner.topic_of, streaming=True)

    def read(self, partition):
        return read_partition(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Spark committed the batch ending at ``end``: advance the optional subscription."""
        if self.opts.subscription:
            self.planner.advance_subscription(from_offset(end))

    def getDefaultReadLimit(self):
        if self.opts.max_records is not None:
            return ReadMaxRows(self.opts.max_records)
        if self.opts.max_bytes is not None:
            return ReadMaxBytes(self.opts.max_bytes)
        if self.opts.min_records is not None:
            return ReadMinRows(self.opts.min_records)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {u.segment: (u.cap if u.cap else self.planner.gate(u.segment, BEFORE,
                                                                             u.lac))
                        for u in self._units()}

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


class PulsarTxnBatchReader(DataSourceReader):
    """A batch query's rows are fixed when Spark plans it: each segment ends at its gate
    then (or at ``endingOffsets``), so writes committed while the job runs never leak
    into part of its result."""

    def __init__(self, options, schema=None) -> None:
        self.opts = with_planned(SourceOptions.from_options(options, batch=True), schema)

    def partitions(self) -> list[SegmentPartition]:
        planner = Planner(self.opts)
        try:
            s = self.opts.starting
            if s == "latest":
                raise ConfigError("option 'startingOffsets' cannot be 'latest' in a batch query")
            ts = self.opts.starting_timestamp_ms
            e = self.opts.ending

            def first(seg: str) -> Position:
                return (s.get(seg, BEFORE) if isinstance(s, dict) else
                        planner.before_time(seg, ts) if ts is not None else BEFORE)

            start: dict[str, Position] = {}
            end: dict[str, Position] = {}
            # A scalable topic's child joins once its parents are planned to their end:
            # iterate to the fixpoint, so the snapshot never holds a key's later rows
            # (in a child) without its earlier ones (in a parent).
            while True:
                units = [u for u in planner.units({**start, **end}) if u.segment not in end]
                if not units:
                    break
                for u in units:
                    start[u.segment] = first(u.segment)
                    if u.hold:
                        end[u.segment] = start[u.segment]
                        continue
                    if isinstance(e, dict) and u.segment in e:
                        # as given (Kafka's semantics: a missing range is data loss);
                        # READ_COMMITTED still holds: executors wait for OPEN outcomes
                        end[u.segment] = e[u.segment]
                        continue
                    g = planner.gate(u.segment, start[u.segment], u.lac)
                    end[u.segment] = min(g, u.cap) if u.cap else g
            return plan_partitions(to_offset(start), to_offset(end), self.opts.min_partitions,
                                   planner.first_entry, planner.topic_of)
        finally:
            planner.close()

    def read(self, partition):
        return read_partition(self.opts, partition)
