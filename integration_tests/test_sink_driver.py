"""The sink's driver-side decisions on real Redis + Pulsar (no Spark JVM needed)."""

from __future__ import annotations

import pytest
from helpers import values

from pulsar_txn.errors import TxnNotOpen
from pulsar_txn.records import TxnId
from pulsar_txn.spark.sink_task import PulsarTxnCommitMessage, join_batch
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


def _task_write(client, topic, sink_id, batch_id, writer, payload, query_id=QUERY,
                rebind=False) -> PulsarTxnCommitMessage:
    """What a streaming task attempt does: the task's own replay guard
    (sink_task.join_batch), then, unless the batch is committed, an append as its writer."""
    txn_id, committed = join_batch(client.store, sink_id, query_id, batch_id, rebind, 60_000)
    if committed:
        return PulsarTxnCommitMessage(sink_id, txn_id and str(txn_id), writer, (), 0, True,
                                      query_id)
    run = _run(client, txn_id, topic, writer)
    run.send(payload)
    run.flush()
    return PulsarTxnCommitMessage(sink_id, str(txn_id), writer, (run.segment,), 1,
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
    """Spark replays the last batch after a crash: the task's replay guard finds it
    committed while its header is kept and after header GC (the progress record alone),
    so the replay writes nothing and its commit adds nothing."""
    topic = topic_name("replay")
    core = _sink(broker, redis_server, namespace, topic, "s-replay")
    first = _task_write(client, topic, "s-replay", 3, "t0.a0.first", b"once")
    core.commit([first], 3)
    replay = _task_write(client, topic, "s-replay", 3, "t0.a0.again", b"twice")
    assert replay.already_committed and replay.segments == ()
    core.commit([replay], 3)
    zombie = _run(client, TxnId.parse(first.txn_id), topic, "t0.a0.zombie")
    with pytest.raises(TxnNotOpen):  # the registration fences a write to a decided txn
        zombie.send(b"zombie")
    assert client.coordinator.sweep_gc(retention_ms=0) >= 1  # the batch's header is gone
    late = _task_write(client, topic, "s-replay", 3, "t0.a0.late", b"after gc")
    core.commit([late], 3)
    assert values(client.create_reader(topic)) == [b"once"]
    assert client.store.sink_last_batch("s-replay") == 3


def test_sink_commit_names_only_the_attempts_whose_messages_arrived(client, broker,
                                                                    redis_server, namespace,
                                                                    topic_name):
    """Two attempts of one task append under batch 0's transaction (a retry after a
    lost executor: both have recorded positions); Spark counted only the second. Only
    its rows show, the other attempt's never do, after GC too (H2, H3)."""
    topic = topic_name("winners")
    core = _sink(broker, redis_server, namespace, topic, "s-winners")
    lost = _task_write(client, topic, "s-winners", 0, "t0.a0.lost", b"lost attempt")
    counted = _task_write(client, topic, "s-winners", 0, "t0.a1.counted", b"counted attempt")
    assert lost.txn_id == counted.txn_id and lost.segments == counted.segments
    core.commit([counted], 0)
    assert values(client.create_reader(topic)) == [b"counted attempt"]
    client.coordinator.sweep_gc(retention_ms=0)
    assert values(client.create_reader(topic)) == [b"counted attempt"]


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
    """Hole 7: query B takes query A's sink id (sink.id.rebind=true) and starts over;
    A's late commit is fenced. A, restarted after the retention window with the same
    options, replays its last batch and would take the id back: refused by the option's
    name, its progress kept, and none of its batches is committed twice."""
    from pulsar_txn.errors import ConfigError, SinkFenced

    topic = topic_name("rebind")
    old, new = QUERY, "0f0e0d0c-0000-4000-8000-000000000003"
    core = _sink(broker, redis_server, namespace, topic, "s-rebind")
    for batch in (0, 1):
        core.commit([_task_write(client, topic, "s-rebind", batch, f"t0.a0.old{batch}",
                                 b"old-%d" % batch, old, rebind=True)], batch)
    zombie = _task_write(client, topic, "s-rebind", 2, "t0.a0.old2", b"old-2", old,
                         rebind=True)
    first_of_new = _task_write(client, topic, "s-rebind", 0, "t0.a0.new", b"new-0", new,
                               rebind=True)
    assert not first_of_new.already_committed  # the new query's progress starts over
    core.commit([first_of_new], 0)
    with pytest.raises(SinkFenced):  # the old query's late commit does not land
        core.commit([zombie], 2)
    client.coordinator.sweep_gc(retention_ms=0)  # past the retention window
    refused = None
    try:  # query A is back, same options: Spark replays its uncommitted-looking batch 1
        replay = _task_write(client, topic, "s-rebind", 1, "t0.a0.back", b"old-1", old,
                             rebind=True)
    except ConfigError as e:
        refused = e
    else:
        core.commit([replay], 1)
    assert values(client.create_reader(topic)) == [b"old-0", b"old-1", b"new-0"]
    assert refused is not None and "'sink.id.rebind'" in str(refused)
    assert "'sink.id'" in str(refused) and refused.last_batch == 1  # A's progress kept
    assert client.store.sink_progress("s-rebind") == (0, new)
    assert client.store.bind_sink("s-rebind", new, rebind=True) == 0  # B goes on
