"""The sink's driver-side decisions on real Redis + Pulsar (no Spark JVM needed)."""

from __future__ import annotations

import pytest
from helpers import values

from pulsar_txn.errors import TxnNotOpen
from pulsar_txn.records import TxnId, sink_owner
from pulsar_txn.spark.sink_task import PulsarTxnCommitMessage
from pulsar_txn.state import TxnState
from pulsar_txn.topics import normalize_topic
from pulsar_txn.writer import WriterRun


def _sink(broker, redis_server, namespace, topic, sink_id):
    from pyspark.sql.types import BinaryType, StructField, StructType

    from pulsar_txn.spark.sink_commit import PulsarTxnStreamWriter

    return PulsarTxnStreamWriter({"service.url": broker.service_url,
                                  "metastore.url": redis_server.url,
                                  "metastore.namespace": namespace, "topic": topic,
                                  "sink.id": sink_id},
                                 StructType([StructField("value", BinaryType())]))


def _run(client, txn_id, topic, writer) -> WriterRun:
    seg = normalize_topic(topic)
    return WriterRun(client.store, txn_id, seg, writer, client.pulsar.create_producer(seg))


QUERY = "0f0e0d0c-0000-4000-8000-000000000001"


def _task_write(client, topic, sink_id, batch_id, writer, payload, query_id=QUERY):
    """What a task attempt does: join the batch's txn by owner, append as its writer."""
    client.store.bind_sink(sink_id, query_id)
    header = client.coordinator.new_transaction(
        60_000, owner=sink_owner(sink_id, query_id, batch_id))
    run = _run(client, header.txn_id, topic, writer)
    run.send(payload)
    run.flush()
    return PulsarTxnCommitMessage(sink_id, str(header.txn_id), writer, (run.segment,), 1,
                                  query_id=query_id)


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
    header = client.coordinator.new_transaction(60_000, owner=sink_owner("s-replay", QUERY, 3))
    assert header.state is TxnState.COMMITTED and str(header.txn_id) == first.txn_id
    zombie = _run(client, header.txn_id, topic, "t0.a0.again")
    with pytest.raises(TxnNotOpen):  # the registration fences a write to a decided txn
        zombie.send(b"twice")
    core.commit([PulsarTxnCommitMessage("s-replay", first.txn_id, "t0.a0.again", (), 0,
                                        already_committed=True, query_id=QUERY)], 3)
    assert values(client.create_reader(topic)) == [b"once"]
    assert client.store.sink_last_batch("s-replay") == 3


def test_explicit_sink_id_of_another_query_is_refused_by_option_name(client):
    """Hole 1: reusing an explicit sink.id from a new query (a new checkpoint) would
    inherit its progress and skip that query's first batches: refused unless rebound."""
    from pulsar_txn.errors import ConfigError

    old, new = QUERY, "0f0e0d0c-0000-4000-8000-000000000002"
    client.store.bind_sink("s-explicit", old)
    assert client.store.bind_sink("s-explicit", old) == -1  # the same query: fine
    with pytest.raises(ConfigError) as err:
        client.store.bind_sink("s-explicit", new)
    assert "'sink.id'" in str(err.value) and "'sink.id.rebind'" in str(err.value)


def test_rebound_sink_id_starts_over_and_fences_the_old_query(client, broker, redis_server,
                                                             namespace, topic_name):
    from pulsar_txn.errors import SinkFenced

    topic = topic_name("rebind")
    core = _sink(broker, redis_server, namespace, topic, "s-rebind")
    core.commit([_task_write(client, topic, "s-rebind", 0, "t0.a0.old", b"old-0")], 0)
    zombie = _task_write(client, topic, "s-rebind", 1, "t0.a0.old1", b"old-1")
    new = "0f0e0d0c-0000-4000-8000-000000000003"
    assert client.store.bind_sink("s-rebind", new, rebind=True) == -1  # progress starts over
    core.commit([_task_write(client, topic, "s-rebind", 0, "t0.a0.new", b"new-0", new)], 0)
    with pytest.raises(SinkFenced):  # the old query's late commit does not land
        core.commit([zombie], 1)
    assert values(client.create_reader(topic)) == [b"old-0", b"new-0"]
    assert client.store.sink_progress("s-rebind") == (0, new)
