"""The sink's driver-side decisions on real Redis + Pulsar (no Spark JVM needed)."""

from __future__ import annotations

import pytest
from helpers import values

from pulsar_txn.errors import TxnNotOpen
from pulsar_txn.records import TxnId
from pulsar_txn.spark.sink import PulsarTxnCommitMessage
from pulsar_txn.state import TxnState
from pulsar_txn.topics import normalize_topic
from pulsar_txn.writer import WriterRun


def _sink(broker, redis_server, namespace, topic, sink_id):
    from pyspark.sql.types import BinaryType, StructField, StructType

    from pulsar_txn.spark.sink import StreamSinkWriter

    return StreamSinkWriter({"service.url": broker.service_url,
                             "metastore.url": redis_server.url,
                             "metastore.namespace": namespace, "topic": topic,
                             "sink.id": sink_id},
                            StructType([StructField("value", BinaryType())]))


def _run(client, txn_id, topic, writer) -> WriterRun:
    seg = normalize_topic(topic)
    return WriterRun(client.store, txn_id, seg, writer, client.pulsar.create_producer(seg))


def _task_write(client, topic, sink_id, batch_id, writer, payload):
    """What a task attempt does: join the batch's txn by owner, append as its writer."""
    header = client.coordinator.new_transaction(60_000, owner=f"{sink_id}:{batch_id}")
    run = _run(client, header.txn_id, topic, writer)
    run.send(payload)
    run.flush()
    return PulsarTxnCommitMessage(sink_id, str(header.txn_id), writer, (run.segment,), 1)


def test_sink_abort_after_a_successful_commit_changes_nothing(client, broker, redis_server,
                                                              namespace, topic_name):
    topic = topic_name("abort-after")
    core = _sink(broker, redis_server, namespace, topic, "s-abort")
    msg = _task_write(client, topic, "s-abort", 0, "t0.a0.w", b"batch-0")
    core.commit([msg], 0)
    core.abort([msg], 0)  # Spark may call abort after a successful commit
    assert client.coordinator.get(TxnId.parse(msg.txn_id)).state is TxnState.COMMITTED
    assert values(client.create_reader(topic)) == [b"batch-0"]
    assert client.store.sink_last_batch("s-abort") == 0


def test_sink_replayed_committed_batch_commits_nothing_new(client, broker, redis_server,
                                                           namespace, topic_name):
    """Spark replays the last batch after a crash: its second attempt stays invisible."""
    topic = topic_name("replay")
    core = _sink(broker, redis_server, namespace, topic, "s-replay")
    first = _task_write(client, topic, "s-replay", 3, "t0.a0.first", b"once")
    core.commit([first], 3)
    header = client.coordinator.new_transaction(60_000, owner="s-replay:3")
    assert header.state is TxnState.COMMITTED and str(header.txn_id) == first.txn_id
    zombie = _run(client, header.txn_id, topic, "t0.a0.again")
    with pytest.raises(TxnNotOpen):  # the registration fences a write to a decided txn
        zombie.send(b"twice")
    core.commit([PulsarTxnCommitMessage("s-replay", first.txn_id, "t0.a0.again", (), 0,
                                        already_committed=True)], 3)
    assert values(client.create_reader(topic)) == [b"once"]
    assert client.store.sink_last_batch("s-replay") == 3
