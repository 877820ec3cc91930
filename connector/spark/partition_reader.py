"""Executor-side reading of one planned range: its committed rows, nothing else.

The range was planned below the gate, so every transactional entry in it has an
outcome the store can tell (H1); rows of aborted transactions and of losing writers
are dropped here, where the data is, rather than on the driver, which never reads
data. A rare entry whose outcome is not known yet (a plan that could not see its
write) is waited for, never guessed.
"""

from __future__ import annotations

import logging
from itertools import compress

import numpy as np
import pyarrow as pa

from pulsar_txn.broker_io import scan
from pulsar_txn.buffer import TransactionBuffer, Verdict
from pulsar_txn.connection import admin_auth, naming
from pulsar_txn.deployments import SKIP_OPTION, foreign_deployment, foreign_entries_error
from pulsar_txn.errors import InvalidTxnId, SweeperAbsent
from pulsar_txn.records import FOREIGN, PROP_TXN, PROTOCOL_PREFIX, TxnId, entry_txn
from pulsar_txn.schema_codec import decode_nullable
from pulsar_txn.schema_key_value import decode_key_values
from pulsar_txn.schemas import AdminGet, TopicSchema, admin_get, lookup
from pulsar_txn.spark.logs import configure_logging

from .offsets import SegmentPartition, decode
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


CHUNK = 4096  # rows per Arrow batch: big enough that Spark's per-batch cost is small


class _Columns:
    """The rows read so far, one Python list per column, filled as messages arrive.

    Each message's fields are taken once, in the scan loop, and the native message is
    dropped at once; the Arrow arrays are then built from whole lists (constant
    columns and the usual empty property maps without any per-row work).
    """

    __slots__ = ("keys", "values", "ids", "publish", "event", "props", "txns", "writers",
                 "plain_props", "versions")

    def __init__(self) -> None:
        self.keys: list = []
        self.values: list = []
        self.ids: list = []
        self.publish: list = []
        self.event: list = []
        self.props: list = []
        self.txns: list = []
        self.writers: list = []
        self.plain_props = False  # some row has user properties
        self.versions: list = []  # schema versions, when the value is typed

    def __len__(self) -> int:
        return len(self.values)

    def arrow(self, topic: str, segment: str, keep: list[bool] | None,
              typed: TypedValues | None = None) -> pa.RecordBatch:
        cols = [self.keys, self.values, self.ids, self.publish, self.event, self.props,
                self.txns, self.versions]
        if keep is not None:
            cols = [list(compress(c, keep)) if c else c for c in cols]
        keys, values, ids, publish, event, props, txns, versions = cols
        n = len(values)
        if self.plain_props:
            props_arr = pa.array(props, type=_PROPS)
        else:  # every map empty: offsets only
            props_arr = pa.MapArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)),
                                                _NO_STRINGS, _NO_STRINGS)
        # only committed rows are decoded: an aborted write may be anything
        if typed is None:
            key, value = pa.array(keys, pa.string()), pa.array(values, pa.binary())
        else:
            key, value = typed.columns(keys, values, versions, ids)
        return pa.RecordBatch.from_arrays([
            key, value,
            pa.array([topic] * n, pa.string()), pa.array([segment] * n, pa.string()),
            pa.array(ids, pa.string()),
            pa.array(np.asarray(publish, np.int64) * 1000, _TS),
            pa.array([e * 1000 if e else None for e in event], _TS),
            props_arr, pa.array(txns, pa.string())],
            schema=ARROW_SCHEMA if typed is None else typed.arrow_schema)


class TypedValues:
    """The ``value`` column of a typed query: payloads decoded with the schema version
    each was written with (looked up once per worker), resolved into the planned one."""

    def __init__(self, planned: TopicSchema, topic: str, client, timeout_s: float,
                 service_url: str, admin: AdminGet | None = None) -> None:
        self.planned = planned
        self._admin = admin
        self.topic = topic
        self._client = client
        self._timeout_s = timeout_s
        self._service_url = service_url
        # per range read, not per worker: a topic deleted and made again numbers its
        # versions from 0 again, and a kept worker must not decode with the old ones
        self._versions: dict[int, TopicSchema] = {}
        self.arrow_schema = ARROW_SCHEMA.set(1, pa.field("value", planned.arrow_type(topic))
                                             ).set(0, pa.field("key",
                                                               planned.key_arrow_type(topic)))

    def version(self, v: int) -> TopicSchema:
        got = self._versions.get(v)
        if got is None:
            with naming(self._service_url, what=f"looking up schema version {v} of {self.topic}"):
                got = self._versions[v] = lookup(self._client._client, self.topic, v,
                                                 self._timeout_s, self._admin)
        return got

    def columns(self, keys: list, values: list, versions: list, ids: list
                ) -> tuple[pa.Array, pa.Array]:
        """The ``key`` and ``value`` columns (a KEY_VALUE schema types both)."""
        if self.planned.is_key_value:
            return decode_key_values(values, keys, versions, self.planned, self.version,
                                     self.topic, ids)
        return (pa.array(keys, pa.string()),
                decode_nullable(values, versions, self.planned, self.version, self.topic, ids))


def schema_admin(opts) -> AdminGet | None:
    """The REST lookups of KEY_VALUE schemas (option 'admin.url', with the binary
    protocol's credentials); None without the option."""
    if not getattr(opts, "admin_url", None):
        return None
    return admin_get(opts.admin_url, admin_auth(opts.auth_plugin, opts.auth_params,
                                                opts.client))


_TS = pa.timestamp("us", tz="UTC")
_PROPS = pa.map_(pa.string(), pa.string())
_NO_STRINGS = pa.array([], pa.string())


class _RangeRead:
    """What reading one planned range keeps besides its rows: the verdict of each
    distinct (txn, writer), parsed once; the entries of other deployments; an events
    watch, opened only when an OPEN transaction must be waited for (H1 fallback)."""

    def __init__(self, opts: SourceOptions, part: SegmentPartition, store) -> None:
        self.opts, self.part, self.store = opts, part, store
        self.tb = TransactionBuffer(store)
        self.deployment = store.deployment
        self.watch = None
        self.parsed: dict[str, TxnId | None] = {}  # txn id text -> id (None: never delivered)
        self.tags: dict[str, tuple[str | None, str]] = {}  # protocol property -> (txn, writer)
        self.foreign: dict[str, str] = {}  # txn text (FOREIGN first) -> the other deployment
        self.skipped_foreign = 0

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()

    def note_foreign(self, t: str | None, props: dict) -> None:
        """Remember which never-parsing txn texts are another deployment's entries
        (once per distinct property value: the scan's cost stays per tag)."""
        if t is not None and t[:1] == FOREIGN and t not in self.foreign:
            dep = foreign_deployment(props, self.deployment)
            if dep:
                self.foreign[t] = dep

    def pass_foreign(self, pairs: set, rows: _Columns) -> None:
        """Another deployment's entries are never delivered, and never passed silently:
        the task fails naming their deployment ids (the query stops before its offsets
        pass them), unless ``read.foreignDeployments=skip``."""
        self.store.check_deployment()  # a reset under this task: say that instead
        if not self.opts.skip_foreign:
            raise foreign_entries_error(self.part.segment, (self.foreign[t] for t, _ in pairs),
                                        self.deployment, self.store.namespace,
                                        f"{SKIP_OPTION}=skip")
        names = {t for t, _ in pairs}
        self.skipped_foreign += sum(1 for t in rows.txns if t in names)

    def txn_of(self, t: str, rows: _Columns) -> TxnId | None:
        if t not in self.parsed:
            try:
                self.parsed[t] = TxnId.parse(t)
            except InvalidTxnId:  # not ours, or corrupt: never delivered (fail closed)
                if t not in self.foreign:
                    log.warning("%s: message %s: its %s property %r is malformed; it is "
                                "never delivered", self.part.segment,
                                rows.ids[rows.txns.index(t)], PROP_TXN, t)
                self.parsed[t] = None
        return self.parsed[t]

    def patience_s(self, txn: TxnId) -> float:
        """How long an OPEN txn's entry below the gate waits for its end: until its
        deadline plus a sweep's grace, woken by the store's events; never guessed."""
        if self.watch is None:
            self.watch = self.store.watch(self.tb.on_event)
        header = self.store.get_header(txn)
        left = 0.0 if header is None else (header.deadline_ms - self.store.server_time_ms()) / 1000
        return max(left, 0.0) + _OUTCOME_GRACE_S

    def verdicts(self, rows: _Columns) -> list[bool] | None:
        """Which rows are delivered (None: all of them). Classified once per distinct
        (txn, writer) of the chunk, not per row, by the readers' one classify-then-wait
        rule (``TransactionBuffer.settle``)."""
        pairs = set(zip(rows.txns, rows.writers))
        pairs.discard((None, ""))
        if not pairs:
            return None
        ok = {p: self.txn_of(p[0], rows) for p in pairs}
        alien = {p for p in pairs if p[0] in self.foreign}
        if alien:
            self.pass_foreign(alien, rows)
        valid = [p for p in pairs if ok[p] is not None]
        given = dict(zip(valid, self.tb.settle(self.part.segment,
                                               [(ok[p], p[1]) for p in valid],
                                               self.patience_s))) if valid else {}
        stuck = sorted(str(ok[p]) for p, v in given.items() if v is Verdict.WAIT)
        if stuck:
            raise SweeperAbsent(f"{self.part.segment}: {stuck[0]} is still OPEN below the "
                                f"gate {_OUTCOME_GRACE_S:.0f} s after its deadline; is any "
                                "sweeper running?")
        deliver = {p: given.get(p) is Verdict.DELIVER for p in pairs}
        if all(deliver.values()):
            return None
        deliver[(None, "")] = True
        return [deliver[p] for p in zip(rows.txns, rows.writers)]


def read_partition(opts: SourceOptions, part: SegmentPartition, chunk: int = CHUNK):
    """Executor-side: yield Arrow batches of the committed rows of one segment range."""
    if not isinstance(part, SegmentPartition):
        return  # Spark's stand-in partition for an empty plan: nothing to read
    configure_logging()  # an executor's Python worker never ran the driver's setup
    # kept for the worker's later tasks (resources.RESOURCES): no connect, persistence
    # check or client start-up per micro-batch
    RESOURCES.begin_task()
    store = RESOURCES.store(opts.metastore_url, opts.namespace, create=False)
    client = RESOURCES.client(opts, reads=True)  # never the sink's producers' connections
    topic = part.topic or part.segment
    state = _RangeRead(opts, part, store)
    planned = opts.planned
    typed = (None if planned is None or planned.is_bytes else
             TypedValues(planned, topic, client, opts.schema_lookup_timeout_ms / 1000,
                         opts.service_url, schema_admin(opts)))
    tags, note_foreign, deployment = state.tags, state.note_foreign, state.deployment
    try:
        rows = _Columns()
        with naming(opts.service_url, what=f"reading {part.segment}"):
            for pos, raw in scan(client, part.segment, decode(part.start), decode(part.end),
                                 timeout_ms=opts.data_timeout_ms,
                                 fail_on_data_loss=opts.fail_on_data_loss, reader=opts.reader,
                                 kept=RESOURCES.readers):
                props = raw.properties()
                if not props:
                    t = None
                    rows.writers.append("")
                    rows.props.append(())
                elif len(props) == 1 and PROP_TXN in props:
                    # the usual transactional entry: its one property, parsed once per
                    # distinct (txn, writer) of the range; no user properties to show
                    tag = props[PROP_TXN]
                    tw = tags.get(tag)
                    if tw is None:
                        tw = tags[tag] = entry_txn(props, deployment)
                        note_foreign(tw[0], props)
                    t = tw[0]
                    rows.writers.append(tw[1])
                    rows.props.append(())
                else:
                    t, w = entry_txn(props, deployment)
                    note_foreign(t, props)
                    rows.writers.append(w)
                    rows.props.append([(k, v) for k, v in props.items()
                                       if not k.startswith(PROTOCOL_PREFIX)])
                    rows.plain_props = True
                rows.txns.append(t)
                rows.keys.append(raw.partition_key() or None)
                data = raw.data()
                if typed is not None:
                    rows.versions.append(raw.int_schema_version())
                    if not data and raw.has_null_value():
                        data = None  # Java's null value: a null, never an empty payload
                rows.values.append(data)
                rows.ids.append(f"{pos[0]}:{pos[1]}:{pos[2]}")
                rows.publish.append(raw.publish_timestamp())
                rows.event.append(raw.event_timestamp())
                if len(rows.values) >= chunk:
                    yield rows.arrow(topic, part.segment, state.verdicts(rows), typed)
                    rows = _Columns()
        if len(rows):
            yield rows.arrow(topic, part.segment, state.verdicts(rows), typed)
        if state.skipped_foreign:
            log.warning("%s: %d entries of other deployments (%s) skipped "
                        "(%s=skip)", part.segment, state.skipped_foreign,
                        ", ".join(sorted(set(state.foreign.values()))), SKIP_OPTION)
            store.add_foreign_skipped(state.skipped_foreign)
    finally:
        state.close()
