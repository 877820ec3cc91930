"""Driver side of the sink: the Spark writers, whose commit decides a batch.

Each (sink id, batchId) is exactly one transaction. Only the driver knows which
task attempts Spark counted (their commit messages reached it), so only the driver
ends the transaction: one CAS names those attempts as winners and advances the
sink's progress in the same step, so a replay after a crash is recognised however
late it comes (invariant 5). ``write`` runs on executors (``sink_task``).
"""

from __future__ import annotations

import logging
import uuid

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter

from pulsar_txn.connection import check_reachable
from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.errors import InvalidTxnTransition, SinkBatchMismatch, SinkFenced
from pulsar_txn.metastore import open_store
from pulsar_txn.records import SinkBatch, TxnId, sink_owner
from pulsar_txn.topics import normalize_any

from . import faults
from .options import SinkOptions
from .resources import RESOURCES
from .sink_schema import with_sink_schema
from .sink_task import (
    PulsarTxnCommitMessage,
    check_sink_schema,
    write_job_part,
    write_micro_batch,
)

log = logging.getLogger("pulsar_txn.spark.sink")  # the name users configure: kept


def _check_broker(opts: SinkOptions) -> None:
    """Driver-side, as the query starts: a wrong service.url fails here, naming
    the option and the address, not in every task after its timeout."""
    topic = normalize_any(opts.topic) if opts.topic else None
    if topic is None or not topic.startswith("persistent://"):
        return
    # Spark makes the writer again for every micro-batch: one check per worker
    # process is enough, on the worker's kept client
    checked = ("reachable", RESOURCES.client_key(opts), topic)  # with credentials
    if RESOURCES.checked(checked):
        return
    check_reachable(RESOURCES.client(opts), opts.service_url, topic)
    RESOURCES.mark_checked(checked)


def _abort_reported(opts: SinkOptions, messages) -> None:
    """Abort the transactions the tasks reported; Spark may call this after a
    successful commit, which it must not undo."""
    txns = {m.txn_id for m in messages if m is not None and m.txn_id
            and not m.already_committed}
    if not txns:
        return  # tasks that wrote but reported nothing are left to the timeout
    store = RESOURCES.store(opts.metastore_url, opts.namespace)  # kept
    coord = TransactionCoordinator(store, materialize_inline=True)
    for t in txns:
        try:
            coord.abort(TxnId.parse(t))
        except InvalidTxnTransition:
            pass  # Spark may call abort after a successful commit: that changes nothing


class PulsarTxnStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("pulsar-txn")``: one transaction per micro-batch.

    Spark makes this writer again for every micro-batch, on the driver; it travels to
    the executors for ``write``."""

    def __init__(self, options, schema) -> None:
        self.opts = SinkOptions.from_options(options)
        self.roles = check_sink_schema(schema, self.opts)
        _check_broker(self.opts)
        self.opts = with_sink_schema(self.opts, schema, self.roles)

    def write(self, iterator) -> PulsarTxnCommitMessage:
        return write_micro_batch(self.opts, self.roles, iterator)

    def commit(self, messages, batch_id: int) -> None:
        msgs = [m for m in messages if m is not None]
        if not msgs or not self.opts.transactional:
            return
        sink_id, query_id = msgs[0].sink_id, msgs[0].query_id
        sink = SinkBatch(sink_id, query_id, batch_id)
        txns = {m.txn_id for m in msgs if m.txn_id and not m.already_committed}
        store = RESOURCES.store(self.opts.metastore_url, self.opts.namespace)  # kept
        coord = TransactionCoordinator(store, materialize_inline=True)
        if not txns:  # every task saw the batch as committed: a replay
            for t in {m.txn_id for m in msgs if m.txn_id}:  # repeat the end: idempotent
                coord.commit(TxnId.parse(t), sink=sink)
            log.debug("pulsar-txn sink %s batch %d: already committed, nothing new",
                     sink_id, batch_id)
            return
        if len(txns) != 1 or any(m.already_committed for m in msgs):
            raise SinkBatchMismatch(f"sink {sink_id} batch {batch_id}: tasks reported "
                                 f"different transactions {sorted(txns)}; failing the batch")
        txn_id = TxnId.parse(txns.pop())
        faults.at_commit(self.opts, "before", batch_id)
        winners = sorted({m.writer for m in msgs})
        segments = sorted({s for m in msgs for s in m.segments})
        # one CAS: the decision and the sink's progress (a replay is recognised
        # whatever happens after it, however late the restart: invariant 5)
        try:
            coord.commit(txn_id, winners, segments, sink=sink)
        except SinkFenced:  # the sink id moved to another query: end this batch now
            coord.abort(txn_id, segments)
            raise
        faults.at_commit(self.opts, "after", batch_id)
        # after the decision, never before it (a GC pass must not push this batch's
        # txn past its deadline): the deployment's background work, which a
        # Spark-only deployment has no other process for
        coord.sweep_if_due(self.opts.retention_ms)
        log.debug("pulsar-txn sink %s batch %d: committed %s, %d rows from %d writers on %d "
                 "segments", sink_id, batch_id, txn_id, sum(m.rows for m in msgs),
                 len(winners), len(segments))

    def abort(self, messages, batch_id: int) -> None:
        _abort_reported(self.opts, messages)


class PulsarTxnBatchWriter(DataSourceArrowWriter):
    """``df.write.format("pulsar-txn")``: one transaction for the whole job, opened
    here as the driver plans the write, so every task attempt joins the same one."""

    def __init__(self, options, schema) -> None:
        self.opts = SinkOptions.from_options(options)
        self.roles = check_sink_schema(schema, self.opts)
        _check_broker(self.opts)
        self.opts = with_sink_schema(self.opts, schema, self.roles)
        store = open_store(self.opts.metastore_url, namespace=self.opts.namespace)
        try:
            owner = sink_owner(self.opts.sink_id or "batch", f"job-{uuid.uuid4().hex}", 0)
            self.txn_id = str(TransactionCoordinator(store, materialize_inline=True)
                              .new_transaction(self.opts.timeout_ms, owner=owner).txn_id)
            self.sink_id = owner
        finally:
            store.close()

    def write(self, iterator) -> PulsarTxnCommitMessage:
        return write_job_part(self.opts, self.roles, iterator, self.sink_id, self.txn_id)

    def commit(self, messages) -> None:
        msgs = [m for m in messages if m is not None]
        store = open_store(self.opts.metastore_url, namespace=self.opts.namespace)
        try:
            TransactionCoordinator(store, materialize_inline=True).commit(
                TxnId.parse(self.txn_id), sorted({m.writer for m in msgs}),
                sorted({s for m in msgs for s in m.segments}))
        finally:
            store.close()

    def abort(self, messages) -> None:
        _abort_reported(self.opts, [PulsarTxnCommitMessage(self.sink_id, self.txn_id, "",
                                                           (), 0)])
