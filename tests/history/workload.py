"""The workload: client-API operations on a PulsarTxnClient, each recorded in the
history with its invocation and its completion.

Why one module for the memory test and the real services: the same operations,
with the same recording rules, run against a fake broker on the in-memory store
(tests/test_history_stateful.py) and against a real broker and Valkey
(integration_tests/test_history_chaos.py); only the client and the faults differ.

Recording rules: a send's value is unique (``v<n>``); a send or commit that raised
an error the API documents as "not done" (fenced, timed out, a failed append) is
``fail``; one whose process died before it answered is ``unknown`` (``History.crash``).
Transactions are labelled by their id, unique as long as the store never hands an
id out twice.
"""

from __future__ import annotations

import itertools

import pulsar

from pulsar_txn.errors import (
    AckConflict,
    AckNotAllowed,
    AppendFailed,
    BrokerUnavailable,
    DeploymentChanged,
    ForeignDeploymentEntries,
    InvalidTxnTransition,
    NamespaceNotFound,
    ReadTimeout,
    SinkBoundToOtherQuery,
    TxnNotFound,
    TxnNotOpen,
)
from pulsar_txn.records import SinkBatch, TxnId
from pulsar_txn.state import TxnState
from pulsar_txn.topics import normalize_topic
from pulsar_txn.transaction import Transaction

from .model import History

# documented refusals: the send is not stored / the end is not this one
# (DeploymentChanged: the metastore was reset under the client, issue 26 hole 8)
REFUSED = (TxnNotOpen, AppendFailed, InvalidTxnTransition, TxnNotFound, DeploymentChanged)
# a reader of the wrong namespace or metastore (issue 26 hole 13), or of a metastore
# reset under it (hole 8): refused by name
NOT_READABLE = (NamespaceNotFound, ForeignDeploymentEntries, DeploymentChanged)
_values = itertools.count()


def fresh_value(process: str = "") -> str:
    """Unique across the processes of a run: each names its values."""
    return f"{process}:v{next(_values)}" if process else f"v{next(_values)}"


class _Never(Exception):
    """Nothing raises it: no exception is uncertain unless the caller says so."""


class Process:
    """One client process of the workload: its client, producers, open transactions,
    reader sessions and consumer."""

    def __init__(self, name: str, client, history: History, uncertain: tuple = ()) -> None:
        """``uncertain``: exceptions after which an operation's outcome is unknown (a
        metastore or broker restart under a real run); any other one fails the test."""
        self.name, self.client, self.h = name, client, history
        self.uncertain = uncertain or (_Never,)
        self.producers: dict[str, object] = {}
        self.txns: dict[str, object] = {}  # label -> Transaction, while this process holds it
        self.readers: dict[str, tuple[str, object]] = {}  # session -> (topic, reader)
        self.consumer = None
        self.read_timeout_ms = 1000
        self.held: list = []  # messages received, not acked yet
        self.txn_acked: list = []  # messages acked under a transaction
        self._sessions = itertools.count()
        # where the broker's copy can be looked at (the fake broker): the wire form of
        # a transactional append, by topic and position ("one" or "three" properties)
        self.wire_of = None

    # ---- transactions ----
    def begin(self, timeout_ms: int) -> str | None:
        op = self.h.invoke(self.name, "begin")
        try:
            txn = self.client.new_transaction(timeout_ms)
        except REFUSED as e:
            self.h.fail(op, f"{type(e).__name__}: {e}")
            return None
        label = str(txn.id)
        self.h.ok(op, txn=label)
        self.txns[label] = txn
        return label

    def producer(self, topic: str):
        p = self.producers.get(topic)
        if p is None:
            p = self.producers[topic] = self.client.create_producer(topic)
        return p

    def send(self, topic: str, txn: str | None = None, key: str | None = None,
             row: str | None = None) -> str:
        value = fresh_value(self.name)
        producer = self.producer(topic)
        op = self.h.invoke(self.name, "send", topic=topic, value=value, key=key, txn=txn,
                           writer=producer.writer_id, row=row)
        try:
            mid = producer.send(value.encode(), key=key,
                                txn=self.txns[txn] if txn else None)
        except REFUSED as e:
            self.h.fail(op, f"{type(e).__name__}: {e}")
            return value
        except (pulsar.Timeout, BrokerUnavailable, *self.uncertain) as e:  # stored or not
            self.h.unknown(op, f"{type(e).__name__}: {e}")
            return value
        self._sent(op, topic, mid)
        return value

    def _sent(self, op, topic: str, mid) -> None:
        pos = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
        if self.wire_of is not None and op.args.get("txn"):
            self.h.ok(op, position=pos, form=self.wire_of(topic, pos))
        else:
            self.h.ok(op, position=pos)

    def send_batch(self, topic: str, n: int) -> None:
        """``n`` plain sends through a batching producer: one broker entry then holds
        several messages (batch indexes), as the Spark sink writes them."""
        producer = self.producers.get((topic, "batched"))
        if producer is None:
            producer = self.producers[(topic, "batched")] = self.client.create_producer(
                topic, batching_enabled=True, batching_max_publish_delay_ms=20)
        answers: dict[int, tuple] = {}
        ops = []
        for _ in range(n):
            value = fresh_value(self.name)
            op = self.h.invoke(self.name, "send", topic=producer.segment, value=value,
                               key=None, txn=None, writer=producer.writer_id, row=None)
            ops.append(op)
            try:
                producer.send_async(value.encode(), callback=lambda res, mid, i=op.index:
                                    answers.__setitem__(i, (res, mid)))
            except self.uncertain as e:
                self.h.unknown(op, f"{type(e).__name__}: {e}")
        try:
            producer.flush()
        except self.uncertain:
            pass
        for op in ops:  # completed once flushed: no later than the broker's answer
            if op.outcome != "pending":
                continue
            res, mid = answers.get(op.index, (None, None))
            if res == pulsar.Result.Ok:
                self.h.ok(op, position=(mid.ledger_id(), mid.entry_id(), mid.batch_index()))
            else:
                self.h.unknown(op, f"no answer, or {res}")

    def commit(self, label: str) -> None:
        txn = self.txns.pop(label)
        op = self.h.invoke(self.name, "commit", txn=label, winners=None)
        try:
            txn.commit()
        except (*REFUSED, AckConflict) as e:  # a deferred ack's conflict: aborted
            self.h.fail(op, f"{type(e).__name__}: {e}")
            return
        except self.uncertain as e:
            self.h.unknown(op, f"{type(e).__name__}: {e}")
            return
        self.h.ok(op)

    def commit_unanswered(self, label: str, landed: bool) -> None:
        """The process dies while committing: the decision is made (``landed``) or not,
        and the client never learns which."""
        txn = self.txns.pop(label)
        op = self.h.invoke(self.name, "commit", txn=label, winners=None)
        if landed:  # the CAS, without the client's own follow-up (acks applied here)
            try:
                txn.flush()
                self.client.coordinator.end_transaction(TxnId.parse(label), TxnState.COMMITTED,
                                                        sorted(txn.writers), txn.segments)
            except (*REFUSED, AckConflict, *self.uncertain):  # it dies anyway
                pass
        self.h.unknown(op, "the committer died before the answer")

    def abort(self, label: str) -> None:
        txn = self.txns.pop(label)
        op = self.h.invoke(self.name, "abort", txn=label)
        try:
            txn.abort()
        except REFUSED as e:
            self.h.fail(op, f"{type(e).__name__}: {e}")
            return
        except self.uncertain as e:
            self.h.unknown(op, f"{type(e).__name__}: {e}")
            return
        self.h.ok(op)

    # ---- readers ----
    def read(self, topic: str, session: str | None = None, start="earliest",
             complete: bool = False) -> str:
        """Read what is readable now in ``session`` (a new one if None). A reader that
        cannot tell committed from not (NOT_READABLE: a namespace that does not exist,
        entries of another deployment) ends its session with what it returned before."""
        if session is None or session not in self.readers:
            session = session or f"{self.name}.r{next(self._sessions)}"
            first = start if isinstance(start, str) else (start.ledger, start.entry, start.batch)
            try:
                self.readers[session] = (topic, self.client.create_reader(topic, start), first)
            except NOT_READABLE as e:
                op = self.h.invoke(self.name, "read", topic=topic, session=session, start=first)
                self.h.fail(op, f"{type(e).__name__}: {e}")
                return session
        topic, reader, first = self.readers[session]
        op = self.h.invoke(self.name, "read", topic=topic, session=session, start=first)
        values = []
        try:
            while True:
                m = reader.read_next(self.read_timeout_ms)
                p = m.position
                values.append(((p.ledger, p.entry, p.batch), m.value.decode()))
        except ReadTimeout:
            pass
        except (*NOT_READABLE, *self.uncertain):  # what it returned before is real
            del self.readers[session]
        self.h.ok(op, values=values, complete=complete)
        return session

    # ---- a consumer ----
    def subscribe(self, topic: str, sub: str, **kwargs) -> bool:
        """Whether it subscribed (NOT_READABLE: refused, recorded as a failed receive)."""
        self.session = f"{self.name}.c{next(self._sessions)}"
        try:
            self.consumer = self.client.subscribe(topic, sub, **kwargs)
        except NOT_READABLE as e:
            op = self.h.invoke(self.name, "receive", topic=topic, sub=sub, session=self.session)
            self.h.fail(op, f"{type(e).__name__}: {e}")
            return False
        return True

    def receive(self) -> bool:
        c = self.consumer
        op = self.h.invoke(self.name, "receive", topic=c.segment, sub=c.subscription,
                           session=self.session)
        try:
            m = c.receive(self.read_timeout_ms)
        except ReadTimeout:
            self.h.ok(op, values=[])
            return False
        except NOT_READABLE as e:
            self.h.fail(op, f"{type(e).__name__}: {e}")
            return False
        except self.uncertain as e:
            self.h.unknown(op, f"{type(e).__name__}: {e}")
            return False
        p = m.position
        self.h.ok(op, values=[((p.ledger, p.entry, p.batch), m.value.decode())])
        self.held.append(m)
        return True

    def ack(self, txn: str | None, i: int = 0, again: bool = False,
            deferred: bool = False) -> bool:
        """Ack a held message (``again``: one already acked under a transaction;
        ``deferred``: with ``acknowledge_async``, claimed at the commit); whether the
        ack was accepted."""
        pool = self.txn_acked if again else self.held
        m = pool.pop(i % len(pool))
        return self._acked(m, txn, False, deferred)

    def ack_cumulative(self, txn: str | None, i: int = 0) -> bool:
        """A cumulative ack up to a held message; whether it was accepted."""
        m = self.held[i % len(self.held)]
        if not self._acked(m, txn, True):
            return False
        self.held.remove(m)
        return True

    def _acked(self, m, txn: str | None, cumulative: bool, deferred: bool = False) -> bool:
        """One ack of ``m``, recorded: accepted, refused (a conflict, a cumulative ack
        on Shared, a txn that is not open) or unknown."""
        c = self.consumer
        extra = {"cumulative": True} if cumulative else {}
        if deferred and txn and not cumulative:
            extra["deferred"] = True
        op = self.h.invoke(self.name, "ack", topic=c.segment, sub=c.subscription,
                           value=m.value.decode(), txn=txn, session=self.session, **extra)
        ack = (c.acknowledge_cumulative if cumulative
               else c.acknowledge_async if extra.get("deferred") else c.acknowledge)
        try:
            ack(m, txn=self.txns[txn] if txn else None)
        except (AckNotAllowed, AckConflict, *REFUSED) as e:
            self.h.fail(op, f"{type(e).__name__}: {e}")
            return False
        except self.uncertain as e:
            self.h.unknown(op, f"{type(e).__name__}: {e}")
            return False
        self.h.ok(op)
        if txn:
            self.txn_acked.append(m)
        return True

    def transform(self, topic: str, txn: str, i: int = 0, deferred: bool = False) -> None:
        """Consume-transform-produce, as a correct application does it: send the held
        message's transform and ack it under ``txn``; if the ack is refused (another
        transaction holds the message), abort: the output must not commit alone (a
        deferred ack's conflict fails the commit instead)."""
        value = self.held[i % len(self.held)].value.decode()
        self.send(topic, txn, row=f"ctp/{value}")
        if not self.ack(txn, i, deferred=deferred) and txn in self.txns:
            self.abort(txn)

    # ---- a Spark micro-batch: one owned transaction, a writer per task attempt ----
    def batch(self, sink: str, batch_id: int, topic: str, attempts: int, rows: int,
              timeout_ms: int, query: str | None = None, rebind: bool = False) -> None:
        """The streaming sink's protocol, with the sink's own replay guard: each task
        attempt joins the batch's transaction (``join_batch``: a batch the sink's
        progress or its owner shows committed writes nothing) and writes every row as
        its own writer; the driver commits naming the last attempt that finished, and
        advances the sink's progress in the same CAS. ``query``: which streaming query
        runs it (two may name one ``sink.id``); ``rebind``: its options say
        ``sink.id.rebind`` (issue 26 hole 7: left in the options, it must never let a
        query commit a batch twice)."""
        from pulsar_txn.spark.sink_task import join_batch  # pyspark: only when used

        store, query = self.client.store, query or f"{sink}-query"
        winners: list[str] = []
        txn_id = None
        for _ in range(attempts):
            try:
                txn_id, done = join_batch(store, sink, query, batch_id, rebind, timeout_ms)
            except SinkBoundToOtherQuery as e:  # the sink id is another query's
                self.h.fail(self.h.invoke(self.name, "batch", sink=sink, query=query,
                                          batch_id=batch_id, txn=None), f"{type(e).__name__}: {e}")
                return
            label = str(txn_id) if txn_id is not None else None
            self.h.ok(self.h.invoke(self.name, "batch", sink=sink, query=query,
                                    batch_id=batch_id, txn=label), replay=done)
            if done:
                return
            producer = self.client.create_producer(topic)
            joined = Transaction.join(store, txn_id)
            for r in range(rows):
                value = fresh_value(self.name)
                op = self.h.invoke(self.name, "send", topic=producer.segment, value=value,
                                   key=None, txn=label, writer=producer.writer_id,
                                   row=f"{query}#{batch_id}/{r}")
                try:
                    mid = producer.send(value.encode(), txn=joined)
                except REFUSED as e:
                    self.h.fail(op, f"{type(e).__name__}: {e}")
                    break
                self._sent(op, topic, mid)
            else:
                winners = [producer.writer_id]  # its commit message reached the driver
        if not winners:
            return
        op = self.h.invoke(self.name, "commit", txn=str(txn_id), winners=winners)
        try:
            self.client.coordinator.commit(txn_id, winners=winners,
                                           segments=[normalize_topic(topic)],
                                           sink=SinkBatch(sink, query, batch_id))
        except REFUSED as e:
            self.h.fail(op, f"{type(e).__name__}: {e}")
            return
        except self.uncertain as e:  # Spark fails the batch; its replay tells
            self.h.unknown(op, f"{type(e).__name__}: {e}")
            return
        self.h.ok(op)


HOSTILE = ["partition", "unknown", "garbage", "three"]


def hostile_properties(form: str, deployment: str) -> dict[str, str]:
    """The protocol's property as any plain producer can write it (issue 26 hole 9):
    an id of a partition the namespace does not have, an id never handed out, a value
    that is no id, the three-property form naming an id never handed out. No
    transaction: never delivered, never a reader's error."""
    from pulsar_txn.records import PROP_DEPLOYMENT, PROP_TXN, PROP_WRITER, TxnId, txn_properties

    if form == "garbage":
        return {PROP_TXN: "v5:x;w;" + deployment}
    if form == "three":
        return {PROP_TXN: "v5:2:7", PROP_WRITER: "w", PROP_DEPLOYMENT: deployment}
    txn = {"partition": TxnId(99, 1), "unknown": TxnId(1, 123_456_789)}[form]
    return txn_properties(txn, "w", deployment)
