"""Source ranges whose start is a gate, not an entry (driver planning + executor read,
without a Spark JVM: the same functions Spark calls)."""

from __future__ import annotations

from pulsar_txn.state import TxnState


def _stream_reader(broker, redis_server, namespace, topic, **options):
    """The source's driver side (what Spark calls), reading ``topic`` from the earliest."""
    from pulsar_txn.spark.source_reader import PulsarTxnStreamReader

    return PulsarTxnStreamReader({"service.url": broker.service_url,
                                  "metastore.url": redis_server.url,
                                  "metastore.namespace": namespace, "topic": topic,
                                  "startingOffsets": "earliest", **options})


def test_range_starting_just_below_a_ledgers_first_entry_reads_that_ledger(
        make_client, broker, redis_server, namespace, topic_name):
    """An OPEN txn's first entry at entry 0 of a ledger puts the gate at "the end of the
    previous ledger" (L-1, 2^63-1), a position no entry has. The next range starts
    there and must read ledger L from its first entry (pulsar-lite delivered nothing
    from such a start: the query stalled, then failed with DataLoss)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pulsar_txn.spark.partition_reader import read_partition

    writer = make_client(sweeper=False)
    for _ in range(2):  # ledger ids are global: the topic's first ledger is not 0
        writer.create_producer(topic_name("pre")).send(b"x")
    topic = topic_name("gate")
    p = writer.create_producer(topic)
    held = writer.new_transaction()
    p.send(b"held", txn=held)  # entry 0 of the topic's ledger
    p.send(b"plain")
    src = _stream_reader(broker, redis_server, namespace, topic)
    try:
        start = src.initialOffset()
        first = src.latestOffset(start, ReadAllAvailable())
        writer.coordinator.commit(held.id)
        assert writer.store.get_header(held.id).state is TxnState.COMMITTED
        second = src.latestOffset(first, ReadAllAvailable())
        rows = [v for a, b in ((start, first), (first, second))
                for part in src.partitions(a, b)
                for batch in read_partition(src.opts, part)
                for v in batch.column("value").to_pylist()]
        assert rows == [b"held", b"plain"]
    finally:
        src.stop()


def _range_over_an_open_txn(make_client, broker, redis_server, namespace, topic_name,
                            timeout_ms=60_000):
    """A planned range that holds an OPEN txn's entry: reachable when the plan could
    not see the txn's write (a store rollback; a registration the index read did not
    return), so it is built by hand here."""
    import pulsar

    from pulsar_txn.records import BEFORE_EARLIEST
    from pulsar_txn.spark.offsets import SegmentPartition, encode

    writer = make_client(sweeper=False)
    topic = topic_name("held")
    p = writer.create_producer(topic)
    p.send(b"plain-0")
    held = writer.new_transaction(timeout_ms=timeout_ms)
    p.send(b"held", txn=held)
    p.send(b"plain-1")
    raw = writer.pulsar.create_reader(p.segment, pulsar.MessageId.earliest)
    last = [raw.read_next(5000).message_id() for _ in range(3)][-1]
    raw.close()
    src = _stream_reader(broker, redis_server, namespace, topic)
    part = SegmentPartition(p.segment, encode((BEFORE_EARLIEST.ledger, BEFORE_EARLIEST.entry,
                                               -1)),
                            encode((last.ledger_id(), last.entry_id(), -1)), topic)
    return writer, held, src, part


def _read_in_thread(src, part):
    import threading

    from pulsar_txn.spark.partition_reader import read_partition

    out: dict = {}

    def run():
        try:
            out["rows"] = [v for b in read_partition(src.opts, part)
                           for v in b.column("value").to_pylist()]
        except Exception as e:  # noqa: BLE001 - handed to the test
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _waiting(monkeypatch):
    """An Event set once an executor starts waiting for a txn's outcome."""
    import threading

    from pulsar_txn.buffer import TransactionBuffer

    started = threading.Event()
    original = TransactionBuffer.wait_for_outcome

    def spy(self, txn, timeout):
        started.set()
        return original(self, txn, timeout)
    monkeypatch.setattr(TransactionBuffer, "wait_for_outcome", spy)
    return started


def test_executor_waits_for_an_open_txn_in_its_range_and_follows_its_outcome(
        make_client, broker, redis_server, namespace, topic_name, monkeypatch):
    """An OPEN txn's entry inside a planned range is neither delivered nor skipped on a
    guess: the executor waits, is woken by the store's events, and delivers it iff
    the txn committed."""
    writer, held, src, part = _range_over_an_open_txn(
        make_client, broker, redis_server, namespace, topic_name)
    started = _waiting(monkeypatch)
    try:
        t, out = _read_in_thread(src, part)
        assert started.wait(30), "the executor never waited for the OPEN txn"
        assert t.is_alive() and "rows" not in out  # nothing delivered around it
        writer.coordinator.commit(held.id)
        t.join(30)
        assert out.get("rows") == [b"plain-0", b"held", b"plain-1"], out
    finally:
        src.stop()


def test_executor_gives_up_on_an_open_txn_past_its_deadline_naming_it(
        make_client, broker, redis_server, namespace, topic_name, monkeypatch):
    """Bounded by the txn's own deadline plus a sweep's grace (no fixed timeout, no
    local clock): an abandoned txn nobody aborts fails the task with its id, and
    nothing of it is delivered."""
    import pulsar_txn.spark.partition_reader as source

    monkeypatch.setattr(source, "_OUTCOME_GRACE_S", 0.5)
    writer, held, src, part = _range_over_an_open_txn(
        make_client, broker, redis_server, namespace, topic_name, timeout_ms=1000)
    try:
        t, out = _read_in_thread(src, part)
        t.join(30)
        assert not t.is_alive()
        assert str(held.id) in str(out.get("error")) and "sweeper" in str(out["error"])
        assert "rows" not in out
    finally:
        src.stop()


def test_a_broker_outage_mid_read_is_never_skipped_as_lost_data(
        make_client, broker, redis_server, namespace, topic_name):
    """failOnDataLoss=false skips ranges whose data is gone; a broker that is down
    past dataTimeoutMs is not that: the task fails (retriable, naming the range) and
    the same range reads whole once the broker is back."""
    import pulsar
    import pytest

    from pulsar_txn.errors import BrokerUnavailable
    from pulsar_txn.records import BEFORE_EARLIEST
    from pulsar_txn.spark.offsets import SegmentPartition, encode
    from pulsar_txn.spark.partition_reader import read_partition
    from pulsar_txn.spark.source_reader import PulsarTxnStreamReader

    writer = make_client(sweeper=False)
    topic = topic_name("outage")
    p = writer.create_producer(topic)
    for i in range(50):
        p.send(b"m%d" % i)
    raw = writer.pulsar.create_reader(p.segment, pulsar.MessageId.earliest)
    ids = [raw.read_next(5000).message_id() for _ in range(50)]
    raw.close()
    src = PulsarTxnStreamReader({"service.url": broker.service_url,
                                 "metastore.url": redis_server.url,
                                 "metastore.namespace": namespace, "topic": topic,
                                 "failOnDataLoss": "false", "dataTimeoutMs": "1500",
                                 "pulsar.reader.receiver_queue_size": "1",
                                 "pulsar.client.operation_timeout_seconds": "3"})
    part = SegmentPartition(p.segment,
                            encode((BEFORE_EARLIEST.ledger, BEFORE_EARLIEST.entry, -1)),
                            encode((ids[-1].ledger_id(), ids[-1].entry_id(), -1)), topic)
    try:
        rows = read_partition(src.opts, part, chunk=1)
        assert next(rows).column("value").to_pylist() == [b"m0"]
        broker.stop()
        try:
            with pytest.raises(BrokerUnavailable):  # not a silent end of the range
                for _ in rows:
                    pass
        finally:
            broker.start()
        again = [v for b in read_partition(src.opts, part) for v in b.column("value").to_pylist()]
        assert again == [b"m%d" % i for i in range(50)]
    finally:
        src.stop()


def test_a_range_ending_at_a_batched_last_entry_ends_without_waiting_for_more(
        plain_pulsar, topic_name):
    """A range whose end is the topic's last entry, a batch, is done at that batch's last
    message: the scan knows the batch's size and does not wait to learn that no more of
    it comes (a fixed 200 ms on every micro-batch before). The wait is set to 20 s here,
    so a scan that still waits cannot pass."""
    import time

    from pulsar_txn.broker_io import batch_size, scan
    from pulsar_txn.records import WHOLE_ENTRY

    t = topic_name("batch-end")
    producer = plain_pulsar.create_producer(t, batching_enabled=True, batching_max_messages=3,
                                            batching_max_publish_delay_ms=10_000)
    for i in range(3):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    first = next(iter(scan(plain_pulsar, t, (-1, -1, -1), (2**62, 0, WHOLE_ENTRY),
                           timeout_ms=10_000, batch_end_wait_ms=0)))
    (ledger, entry, index), message = first
    assert index == 0 and batch_size(message.message_id()) == 3
    started = time.monotonic()
    got = [(pos, m.data()) for pos, m in scan(plain_pulsar, t, (-1, -1, -1),
                                             (ledger, entry, WHOLE_ENTRY),
                                             batch_end_wait_ms=20_000)]
    assert got == [((ledger, entry, i), f"m{i}".encode()) for i in range(3)]
    assert time.monotonic() - started < 10, "the scan waited for more of its end entry"


def test_source_rows_carry_every_field_and_only_committed_rows(
        make_client, broker, redis_server, namespace, topic_name):
    """Each delivered row carries its message's key, value, user properties (never the
    transaction's own), event and publish time, id and txn; an aborted txn's rows, and
    entries stamped by another deployment or with a malformed txn id, are dropped
    between committed and plain ones, whatever the Arrow batch size."""
    import datetime

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pulsar_txn.spark.partition_reader import read_partition

    # entries of another deployment are passed over only when told to (issue 26, hole 13)
    writer = make_client(sweeper=False, skip_foreign_deployments=True)
    topic = topic_name("fields")
    p = writer.create_producer(topic)
    a, b, c = (writer.new_transaction() for _ in range(3))
    p.send(b"a1", key="k1", properties={"color": "red"}, txn=a, event_time_ms=1_234)
    p.send(b"b1", key="k2", txn=b)
    p.send(b"a2", txn=a)
    p.send(b"p1", properties={"x": "y"})
    p.send(b"p2")
    # never delivered: a committed txn's id stamped by another deployment, and garbage
    p.native.send(b"f1", properties={"__ptxn.txn": str(a.id), "__ptxn.dep": "elsewhere"})
    p.native.send(b"g1", properties={"__ptxn.txn": "garbage"})
    dep = writer.store.deployment
    p.native.send(b"f2", properties={"__ptxn.txn": f"{a.id};x;elsewhere"})
    p.native.send(b"g2", properties={"__ptxn.txn": f"{a.id};x"})
    p.send(b"c1", key="k3", txn=c)
    # the one-property form (what every writer here appends), and the three-property
    # form of earlier builds: the committed run's entries delivered with their user
    # properties, the aborted run's not
    (run,), _ = writer.store.list_writes(c.id)
    (lost,), _ = writer.store.list_writes(b.id)
    p.native.send(b"c2", properties={"__ptxn.txn": f"{c.id};{run.writer};{dep}", "u": "2"})
    p.native.send(b"c3", properties={"__ptxn.txn": str(c.id), "__ptxn.writer": run.writer,
                                     "__ptxn.dep": dep, "u": "3"})
    p.native.send(b"b2", properties={"__ptxn.txn": f"{b.id};{lost.writer};{dep}"})
    p.native.send(b"b3", properties={"__ptxn.txn": str(b.id), "__ptxn.writer": lost.writer,
                                     "__ptxn.dep": dep})
    a.commit()
    b.abort()
    c.commit()
    want = [b"a1", b"a2", b"p1", b"p2", b"c1", b"c2", b"c3"]
    reader = writer.create_reader(topic)
    try:  # the client's reader (readers.py) and the Spark source (partition_reader.py)
        assert [reader.read_next(10_000).value for _ in want] == want
        assert reader.read_batch(10, timeout_millis=300) == []
    finally:
        reader.close()
    src = _stream_reader(broker, redis_server, namespace, topic,
                         **{"read.foreignDeployments": "skip"})
    try:
        start = src.initialOffset()
        end = src.latestOffset(start, ReadAllAvailable())
        for chunk in (4096, 2, 1):
            rows = [r for part in src.partitions(start, end)
                    for batch in read_partition(src.opts, part, chunk=chunk)
                    for r in batch.to_pylist()]
            assert [r["value"] for r in rows] == want, chunk
            assert [r["key"] for r in rows] == ["k1", None, None, None, "k3", None, None]
            assert [r["properties"] for r in rows] == [[("color", "red")], [], [("x", "y")],
                                                       [], [], [("u", "2")], [("u", "3")]]
            assert [r["txnId"] for r in rows] == [str(a.id), str(a.id), None, None,
                                                  str(c.id), str(c.id), str(c.id)]
            assert rows[0]["eventTime"] == datetime.datetime(
                1970, 1, 1, 0, 0, 1, 234_000, tzinfo=datetime.timezone.utc)
            assert [r["eventTime"] for r in rows[1:]] == [None] * 6
            now = datetime.datetime.now(datetime.timezone.utc)
            assert all(abs((now - r["publishTime"]).total_seconds()) < 600 for r in rows)
            ids = [tuple(int(x) for x in r["messageId"].split(":")) for r in rows]
            assert ids == sorted(ids) and len(set(ids)) == 7
            assert {(r["topic"], r["segment"]) for r in rows} == {(topic, topic)}
    finally:
        src.stop()


def _counting_worker(opened: list[str]):
    """A Python worker's resources whose client is the real one, noting in ``opened``
    the segment of every reader it opens."""
    import pulsar

    from pulsar_txn.spark.options import client_kwargs
    from pulsar_txn.spark.resources import WorkerResources

    class Counting:
        def __init__(self, real):
            self.real = real

        def create_reader(self, *a, **kw):
            opened.append(a[0])
            return self.real.create_reader(*a, **kw)

        def __getattr__(self, name):
            return getattr(self.real, name)

    return WorkerResources(make_client=lambda o: Counting(
        pulsar.Client(o.service_url, **client_kwargs(o))))


def test_consecutive_ranges_of_a_segment_reuse_one_reader_and_replays_read_the_same(
        make_client, broker, redis_server, namespace, topic_name, monkeypatch):
    """A Python worker keeps the reader a task left at its range's end: the next
    micro-batch's range of that segment goes on from it instead of opening a reader
    (pulsar-lite keeps state for every reader ever opened: a fresh one per trigger
    slowed the broker over hours), also when the range starts a little further on. A
    range that starts before it (a replay, a retry) opens its own and reads exactly
    the same rows."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    import pulsar_txn.spark.partition_reader as partition_reader

    opened: list[str] = []
    worker = _counting_worker(opened)
    monkeypatch.setattr(partition_reader, "RESOURCES", worker)
    writer = make_client(sweeper=False)
    topic = topic_name("kept")
    p = writer.create_producer(topic)
    src = _stream_reader(broker, redis_server, namespace, topic, minPartitions="1")

    def read(a, b):
        return [v for part in src.partitions(a, b)
                for batch in partition_reader.read_partition(src.opts, part)
                for v in batch.column("value").to_pylist()]
    try:
        offsets = [src.initialOffset()]
        expected = []
        for round_ in range(5):
            txn = writer.new_transaction()
            for i in range(3):
                p.send(b"r%d-%d" % (round_, i), txn=txn)
            p.send(b"plain%d" % round_)
            txn.commit()
            offsets.append(src.latestOffset(offsets[-1], ReadAllAvailable()))
            got = read(offsets[-2], offsets[-1])
            expected.append(got)
            assert got == [b"r%d-%d" % (round_, i) for i in range(3)] + [b"plain%d" % round_]
        assert len(opened) == 1, opened  # one reader for five consecutive ranges
        assert read(offsets[1], offsets[2]) == expected[1]  # a replay: its own reader
        assert len(opened) == 2
        assert read(offsets[2], offsets[4]) == expected[2] + expected[3]
        assert len(opened) == 2
        # a reader a little behind a range's start reads on to it (the other half of a
        # split range was read by another worker): kept, and not one row of the skipped
        # entries shows up
        assert read(offsets[0], offsets[1]) == expected[0]
        assert len(opened) == 3
        assert read(offsets[3], offsets[5]) == expected[3] + expected[4]
        assert len(opened) == 3
    finally:
        src.stop()
        worker.close()


def test_two_python_workers_taking_turns_on_a_segment_each_keep_one_reader(
        make_client, broker, redis_server, namespace, topic_name, monkeypatch):
    """Spark hands a segment's micro-batches to whichever Python worker is free, so
    two workers often take turns: each one's kept reader is then a whole micro-batch
    behind the next start. It reads on through the other worker's range (hundreds of
    entries at a few hundred events/s) rather than closing and opening a reader per
    micro-batch, which pulsar-lite never forgets (bench_soak: two readers a second),
    and yields exactly each range's rows."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    import pulsar_txn.spark.partition_reader as partition_reader

    opened: list[str] = []
    workers = [_counting_worker(opened) for _ in range(2)]
    writer = make_client(sweeper=False)
    topic = topic_name("turns")
    p = writer.create_producer(topic, batching_enabled=False)  # one entry per message
    src = _stream_reader(broker, redis_server, namespace, topic, minPartitions="1")
    try:
        offsets = [src.initialOffset()]
        for round_ in range(4):
            for i in range(300):
                p.send(b"r%d-%d" % (round_, i))
            offsets.append(src.latestOffset(offsets[-1], ReadAllAvailable()))
            monkeypatch.setattr(partition_reader, "RESOURCES", workers[round_ % 2])
            got = [v for part in src.partitions(offsets[-2], offsets[-1])
                   for batch in partition_reader.read_partition(src.opts, part)
                   for v in batch.column("value").to_pylist()]
            assert got == [b"r%d-%d" % (round_, i) for i in range(300)], round_
        assert len(opened) == 2, opened  # one per worker, for four ranges
    finally:
        src.stop()
        for w in workers:
            w.close()


def test_a_kept_reader_on_a_range_with_nothing_left_in_its_end_entry_returns_at_once(
        make_client, broker, redis_server, namespace, topic_name, monkeypatch):
    """A micro-batch cut at a message (maxRecordsPerTrigger) that is the topic's last
    one is followed by a range from that message to the end of its entry: nothing to
    read. A reader kept at that message must know it is at the end entry already (a
    fresh one learns it by reading the entry again), or it waits dataTimeoutMs for
    nothing and then calls the data lost."""
    import time

    import pulsar

    import pulsar_txn.spark.partition_reader as partition_reader
    from pulsar_txn.broker_io import scan
    from pulsar_txn.records import BEFORE
    from pulsar_txn.spark.offsets import SegmentPartition, encode
    from pulsar_txn.spark.options import SourceOptions, client_kwargs
    from pulsar_txn.spark.resources import WorkerResources

    worker = WorkerResources(make_client=lambda o: pulsar.Client(o.service_url,
                                                                 **client_kwargs(o)))
    monkeypatch.setattr(partition_reader, "RESOURCES", worker)
    writer = make_client(sweeper=False)
    topic = topic_name("cut")
    p = writer.create_producer(topic)
    for i in range(3):
        p.send(b"m%d" % i)
    probe = pulsar.Client(broker.service_url)
    try:
        *_, (last, _) = scan(probe, topic, BEFORE, (2**62, 0, 0), timeout_ms=5_000,
                             fail_on_data_loss=False)
    finally:
        probe.close()
    opts = SourceOptions.from_options({"service.url": broker.service_url,
                                       "metastore.url": redis_server.url,
                                       "metastore.namespace": namespace, "topic": topic,
                                       "dataTimeoutMs": "5000"})

    def read(a, b):
        part = SegmentPartition(topic, encode(a), encode(b), topic)
        return [v for batch in partition_reader.read_partition(opts, part)
                for v in batch.column("value").to_pylist()]
    try:
        assert read(BEFORE, last) == [b"m0", b"m1", b"m2"]  # leaves its reader at `last`
        t0 = time.monotonic()
        assert read(last, (last[0], last[1], 2**31 - 1)) == []
        assert time.monotonic() - t0 < 3
    finally:
        worker.close()
