"""Executor-side reading of one planned range: its committed rows, nothing else.

The range was planned below the gate, so every transactional entry in it has an
outcome the store can tell (H1); rows of aborted transactions and of losing writers
are dropped here, where the data is, rather than on the driver, which never reads
data. A rare entry whose outcome is not known yet (a plan that could not see its
write) is waited for, never guessed.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from pulsar_txn.broker_io import scan
from pulsar_txn.buffer import TransactionBuffer, Verdict
from pulsar_txn.connection import naming
from pulsar_txn.errors import InvalidTxnId, SweeperAbsent
from pulsar_txn.records import PROP_TXN, PROP_WRITER, TxnId, own_txn
from pulsar_txn.spark import configure_logging

from .offsets import SegmentPartition, decode, encode
from .options import SourceOptions
from .resources import RESOURCES

log = logging.getLogger("pulsar_txn.spark.source")  # the name users configure: kept

# What the source returns, in Spark's DDL and as the Arrow batches the executors
# build: the two must agree, so they are written side by side.
SCHEMA = ("key string, value binary, topic string, segment string, messageId string, "
          "publishTime timestamp, eventTime timestamp, properties map<string,string>, "
          "txnId string")
ARROW_SCHEMA = pa.schema([
    ("key", pa.string()), ("value", pa.binary()), ("topic", pa.string()),
    ("segment", pa.string()), ("messageId", pa.string()),
    ("publishTime", pa.timestamp("us", tz="UTC")),
    ("eventTime", pa.timestamp("us", tz="UTC")),
    ("properties", pa.map_(pa.string(), pa.string())), ("txnId", pa.string())])

_OUTCOME_GRACE_S = 30.0  # past a txn's deadline: time for some sweeper to abort it


def read_partition(opts: SourceOptions, part: SegmentPartition, chunk: int = 2000):
    """Executor-side: yield Arrow batches of the committed rows of one segment range."""
    if not isinstance(part, SegmentPartition):
        return  # Spark's stand-in partition for an empty plan: nothing to read
    configure_logging()  # an executor's Python worker never ran the driver's setup
    schema = ARROW_SCHEMA
    # kept for the worker's later tasks (resources.RESOURCES): no connect, persistence
    # check or client start-up per micro-batch
    RESOURCES.begin_task()
    store = RESOURCES.store(opts.metastore_url, opts.namespace)
    client = RESOURCES.client(opts)
    tb = TransactionBuffer(store)
    watch = None
    try:
        pending: list = []

        def txn_of(t: str, pos) -> TxnId | None:
            try:
                return TxnId.parse(t)
            except InvalidTxnId:  # not ours, or corrupt: never delivered (fail closed)
                log.warning("%s: message %s: its %s property %r is malformed or of another "
                            "deployment; it is never delivered", part.segment, encode(pos),
                            PROP_TXN, t)
                return None

        def wait_for(txn: TxnId) -> None:
            """H1 fallback: an OPEN txn's entry below the gate waits for its end, woken by
            the store's events (a watch opened on first need), at most until its deadline
            plus a sweep's grace: never guessed, never a fixed timeout."""
            nonlocal watch
            if watch is None:
                watch = store.watch(tb.on_event)
            header = store.get_header(txn)
            left = 0.0 if header is None else (header.deadline_ms - store.server_time_ms()) / 1000
            if not tb.wait_for_outcome(txn, max(left, 0.0) + _OUTCOME_GRACE_S):
                raise SweeperAbsent(f"{part.segment}: {txn} is still OPEN below the gate "
                                     f"{_OUTCOME_GRACE_S:.0f} s after its deadline; is any "
                                     "sweeper running?")

        def flush():
            ids = {t: txn_of(t, pos) for pos, _, _, t, _ in pending if t}
            pairs = [(ids[t], w) for _, _, _, t, w in pending if t and ids[t] is not None]
            verdicts = iter(tb.classify(part.segment, pairs)) if pairs else iter(())
            cols: dict[str, list] = {f.name: [] for f in schema}
            for pos, raw, props, t, w in pending:
                if t:
                    txn = ids[t]
                    if txn is None:
                        continue
                    verdict = next(verdicts)
                    if verdict is Verdict.WAIT:
                        wait_for(txn)
                        verdict = tb.classify(part.segment, [(txn, w)])[0]
                    if verdict is not Verdict.DELIVER:
                        continue
                cols["key"].append(raw.partition_key() or None)
                cols["value"].append(raw.data())
                cols["topic"].append(part.topic or part.segment)
                cols["segment"].append(part.segment)
                cols["messageId"].append(encode(pos))
                cols["publishTime"].append(raw.publish_timestamp() * 1000)
                et = raw.event_timestamp()
                cols["eventTime"].append(et * 1000 if et else None)
                cols["properties"].append(
                    [(k, v) for k, v in props.items() if not k.startswith("__ptxn.")]
                    if t or props else [])
                cols["txnId"].append(t)
            pending.clear()
            return pa.RecordBatch.from_pydict(cols, schema=schema)

        with naming(opts.service_url, what=f"reading {part.segment}"):
            for pos, raw in scan(client, part.segment, decode(part.start), decode(part.end),
                                 timeout_ms=opts.data_timeout_ms,
                                 fail_on_data_loss=opts.fail_on_data_loss, reader=opts.reader):
                props = raw.properties()
                t = own_txn(props, store.deployment)
                pending.append((pos, raw, props, t, props.get(PROP_WRITER, "") if t else ""))
                if len(pending) >= chunk:
                    yield flush()
        if pending:
            yield flush()
    finally:
        if watch is not None:
            watch.close()
