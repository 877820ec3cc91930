"""Source ranges whose start is a gate, not an entry (driver planning + executor read,
without a Spark JVM: the same functions Spark calls)."""

from __future__ import annotations

from pulsar_txn.state import TxnState


def test_range_starting_just_below_a_ledgers_first_entry_reads_that_ledger(
        make_client, broker, redis_server, namespace, topic_name):
    """An OPEN txn's first entry at entry 0 of a ledger puts the gate at "the end of the
    previous ledger" (L-1, 2^63-1), a position no entry has. The next range starts
    there and must read ledger L from its first entry (pulsar-lite delivered nothing
    from such a start: the query stalled, then failed with DataLoss)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pulsar_txn.spark.source import StreamSource, read_partition

    writer = make_client(sweeper=False)
    for _ in range(2):  # ledger ids are global: the topic's first ledger is not 0
        writer.create_producer(topic_name("pre")).send(b"x")
    topic = topic_name("gate")
    p = writer.create_producer(topic)
    held = writer.new_transaction()
    p.send(b"held", txn=held)  # entry 0 of the topic's ledger
    p.send(b"plain")
    src = StreamSource({"service.url": broker.service_url, "metastore.url": redis_server.url,
                        "metastore.namespace": namespace, "topic": topic,
                        "startingOffsets": "earliest"})
    try:
        start = src.initial_offset()
        first = src.latest_offset(start, ReadAllAvailable())
        writer.coordinator.commit(held.id)
        assert writer.store.get_header(held.id).state is TxnState.COMMITTED
        second = src.latest_offset(first, ReadAllAvailable())
        rows = [v for a, b in ((start, first), (first, second))
                for part in src.partitions(a, b)
                for batch in read_partition(src.opts, part)
                for v in batch.column("value").to_pylist()]
        assert rows == [b"held", b"plain"]
    finally:
        src.stop()
