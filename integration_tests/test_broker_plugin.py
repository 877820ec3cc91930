"""READ_COMMITTED for plain consumers, enforced by the broker (issue 28): a real Apache
Pulsar standalone started with pulsar-txn's broker plugin (built by Maven from
``broker-plugin/``), a real Redis, pulsar-txn's writers, and plain pulsar-client
consumers and readers that know nothing of pulsar-txn.

Each test fails with the plugin removed (``PULSAR_TXN_BROKER_PLUGIN=off`` starts the same
broker without it): a plain consumer then sees every append at once."""

from __future__ import annotations

import os
import queue
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pulsar
import pytest
from java_peer import java_cmd

from pulsar_txn.admin import admin_request
from pulsar_txn.client import PulsarTxnClient, quiet_logger
from pulsar_txn.harness import broker_plugin
from pulsar_txn.harness.redis_server import RedisServer
from pulsar_txn.harness.services import start_broker
from pulsar_txn.metastore import RedisMetadataStore
from pulsar_txn.records import txn_properties

REPO = Path(__file__).resolve().parents[1]
PLUGIN_OFF = os.environ.get("PULSAR_TXN_BROKER_PLUGIN", "on") == "off"
METASTORE_NS = f"plugin{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def plugin_redis(tmp_path_factory):
    """The plugin's metastore, its own: the fault tests below stop and kill it."""
    server = RedisServer(Path(tmp_path_factory.mktemp("plugin-redis"))).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def plugin_broker(plugin_redis, tmp_path_factory):
    kinds = os.environ.get("PULSAR_TXN_BROKERS", "standalone,lite")
    if "standalone" not in kinds:
        pytest.skip("the plugin runs in an Apache Pulsar broker (pulsar-lite cannot host it)")
    if os.environ.get("PULSAR_TXN_METASTORE", "server") == "cluster":
        pytest.skip("this module's faults need its own single Redis server; the plugin on a "
                    "Redis Cluster is test_broker_plugin_cluster.py (default stage)")
    workdir = Path(tmp_path_factory.mktemp("plugin-broker"))
    # an operator's first step: the namespace exists before the broker governs its
    # topics (until it does, the plugin holds them: it cannot tell a typo from "not yet")
    RedisMetadataStore(f"{plugin_redis.url}?namespace={METASTORE_NS}").close()
    plugin = None if PLUGIN_OFF else broker_plugin.Governing(
        plugin_redis.url, METASTORE_NS, REPO / "broker-plugin")
    b = start_broker("standalone", workdir, plugin=plugin)
    yield b
    b.stop()


@pytest.fixture
def writer(plugin_broker, plugin_redis):
    c = PulsarTxnClient(plugin_broker.service_url, plugin_redis.url, namespace=METASTORE_NS,
                        create_namespace=True, sweeper=True, sweep_interval_s=0.2)
    yield c
    c.close()


@pytest.fixture
def plain(plugin_broker):
    c = pulsar.Client(plugin_broker.service_url, logger=quiet_logger())
    yield c
    c.close()


@pytest.fixture
def topic():
    return f"persistent://public/default/plugin-{uuid.uuid4().hex[:10]}"


def _drain(receive, want: int | None = None, quiet_s: float = 1.0, limit_s: float = 30.0):
    """What a plain consumer receives: until ``want`` messages, or ``quiet_s`` of nothing."""
    got, deadline = [], time.monotonic() + limit_s
    while time.monotonic() < deadline and (want is None or len(got) < want):
        try:
            got.append(receive(int(quiet_s * 1000)))
        except pulsar.Timeout:
            if want is None:
                break
    return got


SUBSCRIPTIONS = {
    "exclusive": pulsar.ConsumerType.Exclusive,
    "failover": pulsar.ConsumerType.Failover,
    "shared": pulsar.ConsumerType.Shared,
    "key_shared": pulsar.ConsumerType.KeyShared,
    "reader": None,
}


def _open(plain, topic: str, kind: str):
    if kind == "reader":
        r = plain.create_reader(topic, pulsar.MessageId.earliest)
        return r, r.read_next
    c = plain.subscribe(topic, f"plain-{kind}", consumer_type=SUBSCRIPTIONS[kind],
                        initial_position=pulsar.InitialPosition.Earliest)

    def receive(timeout_ms: int):
        m = c.receive(timeout_ms)
        c.acknowledge(m)
        return m
    return c, receive


def _gate_past(plain, topic: str, n: int) -> list:
    """The ids of the topic's first ``n`` entries, once the gate has passed them (an
    exempt reader reads them: gated, never filtered, so nothing is classified or cached)."""
    r = plain.create_reader(topic, pulsar.MessageId.earliest, subscription_role_prefix="__ptxn")
    try:
        return [r.read_next(10_000).message_id() for _ in range(n)]
    finally:
        r.close()


def _plain_committed(plain, topic: str, want: int = 0) -> list[bytes]:
    """What a plain Exclusive consumer gets: ``want`` messages, then a quiet second."""
    consumer, receive = _open(plain, topic, "exclusive")
    try:
        return [m.data() for m in _drain(receive, want=want or None) + _drain(receive)]
    finally:
        consumer.close()


@pytest.mark.parametrize("kind", list(SUBSCRIPTIONS))
def test_plain_consumer_is_held_at_an_open_txn_and_sees_each_committed_entry_once_in_order(
        writer, plain, topic, kind):
    p = writer.create_producer(topic)
    p.send(b"plain-0", key="k")
    held = writer.new_transaction(timeout_ms=120_000)
    p.send(b"held-0", key="k", txn=held)
    p.send(b"held-1", key="k", txn=held)
    p.send(b"plain-1", key="k")  # after the open transaction's first entry: held too
    aborted = writer.new_transaction()
    p.send(b"aborted-0", key="k", txn=aborted)
    aborted.abort()
    with writer.transaction() as t:
        p.send(b"committed-0", key="k", txn=t)
    consumer, receive = _open(plain, topic, kind)
    try:
        before = [m.data() for m in _drain(receive, want=1) + _drain(receive)]
        assert before == [b"plain-0"], "an OPEN transaction's entries, or what follows them, leaked"
        held.commit()
        after = [m.data() for m in _drain(receive, want=4)]
        after += [m.data() for m in _drain(receive, quiet_s=1.0)]  # nothing more may come
    finally:
        consumer.close()
    assert after == [b"held-0", b"held-1", b"plain-1", b"committed-0"], after


def test_a_plain_producers_forged_protocol_properties_are_never_delivered(writer, plain, topic):
    p = writer.create_producer(topic)
    with writer.transaction() as t:
        p.send(b"real", txn=t)
    dep = writer.store.deployment
    forger = plain.create_producer(topic)
    for props in ({"__ptxn.txn": f"{t.id};ghost-writer;{dep}"},  # not a winner of it
                  {"__ptxn.txn": f"v5:0:987654321;w1;{dep}"},     # no such transaction
                  {"__ptxn.txn": f"{t.id};w1"},                   # malformed
                  {"__ptxn.txn": f"{t.id};w1;another-deployment"},
                  {"__ptxn.txn": "garbage"}):
        forger.send(b"forged", properties=props)
    forger.send(b"plain-after")
    forger.close()
    got = _plain_committed(plain, topic, want=2)
    assert got == [b"real", b"plain-after"], got


def test_a_forged_copy_of_a_winners_property_read_first_never_hides_the_winner(
        writer, plain, topic):
    """The filter's verdicts are shared by every subscription of the broker: a forged
    entry that carries the winner's exact property text next to a second protocol
    property (malformed, never delivered) must not decide the real entry's verdict."""
    p = writer.create_producer(topic)
    t = writer.new_transaction()
    real = txn_properties(t.id, p.writer_id, writer.store.deployment)
    forger = plain.create_producer(topic)
    forger.send(b"forged", properties={**real, "__ptxn.writer": ""})
    forger.send(b"forged", properties={**real, "__ptxn.dep": "\u0001"})
    forger.close()
    p.send(b"real", txn=t)
    t.commit()
    consumer, receive = _open(plain, topic, "exclusive")
    try:
        got = _drain(receive, want=1) + _drain(receive)
    finally:
        consumer.close()
    assert [m.data() for m in got] == [b"real"]
    assert got[0].properties() == real  # the forgery copied the real text exactly


def test_a_forged_entry_of_an_id_not_yet_handed_out_never_hides_it_later(
        writer, plain, topic):
    """A plain producer writes entries naming the next ids before they exist: "unknown"
    then, and never delivered; the real transactions that get those ids later are."""
    p = writer.create_producer(topic)
    probe = writer.new_transaction()
    probe.abort()
    ahead = {type(probe.id)(probe.id.partition, probe.id.seq + i) for i in range(1, 40)}
    forger = plain.create_producer(topic)
    for t in sorted(ahead, key=lambda t: t.seq):
        forger.send(b"forged", properties=txn_properties(t, p.writer_id, writer.store.deployment))
    forger.close()
    consumer, receive = _open(plain, topic, "exclusive")
    try:
        assert _drain(receive, quiet_s=1.0) == []  # unknown ids: never delivered
        # ids go to a random partition each: commit until one lands on a forged id (40
        # in a row missed the probe's partition in about one run in thirteen)
        sent = []
        for i in range(400):
            with writer.transaction() as t:
                p.send(f"real-{i}".encode(), txn=t)
            sent.append(f"real-{i}".encode())
            if t.id in ahead:
                break
        else:
            pytest.fail("no real transaction got a forged id: the test proved nothing")
        got = [m.data() for m in _drain(receive, want=len(sent), limit_s=60)]
        got += [m.data() for m in _drain(receive, quiet_s=1.0)]
    finally:
        consumer.close()
    assert got == sent, got


def test_a_plain_readers_has_message_available_follows_each_commit(writer, plain, topic):
    """getLastMessageId answers from the gate: it moves with each commit (a frozen answer
    would leave has_message_available false for good; an answer above the gate would
    make a reader wait for an entry it may not have)."""
    p = writer.create_producer(topic)
    with writer.transaction() as t:
        p.send(b"c0", txn=t)
    reader = plain.create_reader(topic, pulsar.MessageId.earliest)
    try:
        assert reader.read_next(10_000).data() == b"c0"
        held = writer.new_transaction(timeout_ms=120_000)
        p.send(b"c1", txn=held)
        time.sleep(1.0)
        assert not reader.has_message_available()  # c1 is above the gate
        held.commit()
        deadline = time.monotonic() + 10
        while not reader.has_message_available():
            assert time.monotonic() < deadline, "getLastMessageId did not follow the commit"
            time.sleep(0.05)
        assert reader.read_next(10_000).data() == b"c1"
    finally:
        reader.close()


def test_the_last_message_id_follows_a_commit_released_up_to_a_new_ledger(
        writer, plain, plugin_broker, topic):
    """An OPEN transaction whose first entry opens a new ledger holds the gate just below
    that ledger, (L, -1): every entry of the ledgers before it is delivered, so
    getLastMessageId (hasMessageAvailable, once a reader's queue is empty) must name the
    last of them. The update was skipped for such a gate: the answer stayed at c0 while
    the committed s0 was delivered (review of issue 28)."""
    p = writer.create_producer(topic)
    p.send(b"c0")
    s = writer.new_transaction(timeout_ms=120_000)
    p.send(b"s0", txn=s)
    admin_request(plugin_broker.admin_url, "PUT",
                  f"/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/unload")
    t = writer.new_transaction(timeout_ms=120_000)
    p.send(b"t0", txn=t)  # the reloaded topic's first entry: a new ledger
    consumer = plain.subscribe(topic, "plain-last",
                               initial_position=pulsar.InitialPosition.Earliest)
    try:
        c0 = consumer.receive(10_000)
        assert c0.data() == b"c0"
        at_c0 = (c0.message_id().ledger_id(), c0.message_id().entry_id())
        s.commit()
        s0 = consumer.receive(10_000)
        assert s0.data() == b"s0"
        deadline = time.monotonic() + 10
        while True:
            last = consumer.get_last_message_id()
            if (last.ledger_id(), last.entry_id()) > at_c0:
                break
            assert time.monotonic() < deadline, "the last message id stayed at c0"
            time.sleep(0.05)
        assert (last.ledger_id(), last.entry_id()) == (
            s0.message_id().ledger_id(), s0.message_id().entry_id())  # not t0: above the gate
        t.commit()
        assert consumer.receive(10_000).data() == b"t0"
    finally:
        consumer.close()


def test_a_timed_out_transaction_is_never_delivered_and_releases_what_follows(
        writer, plain, topic):
    p = writer.create_producer(topic)
    doomed = writer.new_transaction(timeout_ms=1500)
    p.send(b"doomed", txn=doomed)
    p.send(b"after")
    consumer, receive = _open(plain, topic, "exclusive")
    try:
        assert _drain(receive, quiet_s=0.5) == []  # held while it may still commit
        got = [m.data() for m in _drain(receive, want=1, limit_s=20)]
        got += [m.data() for m in _drain(receive, quiet_s=1.0)]
    finally:
        consumer.close()
    assert got == [b"after"], got


def test_pulsar_txn_readers_and_consumers_read_committed_on_a_plugin_broker(writer, topic):
    """The library's own readers are gated and filtered like any other: they still get
    exactly the committed set (the broker drops what they would have skipped)."""
    p = writer.create_producer(topic)
    aborted = writer.new_transaction()
    p.send(b"aborted", txn=aborted)
    aborted.abort()
    for i in range(3):
        with writer.transaction() as t:
            p.send(f"c{i}".encode(), txn=t)
    reader = writer.create_reader(topic)
    got = [reader.read_next(10_000).value for _ in range(3)]
    consumer = writer.subscribe(topic, "ptxn-sub",
                                initial_position=pulsar.InitialPosition.Earliest)
    seen = []
    for _ in range(3):
        m = consumer.receive(10_000)
        seen.append(m.value)
        consumer.acknowledge(m)
    assert got == seen == [b"c0", b"c1", b"c2"]


def test_after_gc_a_replay_from_earliest_gives_the_committed_set(writer, plain, topic):
    """Headers collected before the first read: the filter classifies from the collected
    watermark and the aborted-writer sets alone (cold, nothing cached)."""
    p = writer.create_producer(topic)
    for i in range(3):
        t = writer.new_transaction()
        p.send(f"t{i}".encode(), txn=t)
        t.commit() if i != 1 else t.abort()
    assert writer.coordinator.sweep_gc(retention_ms=0) >= 2
    got = _plain_committed(plain, topic, want=2)
    assert got == [b"t0", b"t2"], got


def _held_then_commit(writer, plain, topic, disturb) -> list[bytes]:
    """An OPEN transaction's entry and a plain one after it; ``disturb`` while a plain
    consumer waits; nothing may leak before the commit, both come after it."""
    p = writer.create_producer(topic)
    held = writer.new_transaction(timeout_ms=120_000)
    p.send(b"held", txn=held)
    p.send(b"after")
    consumer, receive = _open(plain, topic, "exclusive")
    try:
        assert _drain(receive, quiet_s=1.0) == []
        disturb()
        assert _drain(receive, quiet_s=2.0) == [], "leaked while disturbed"
        held.commit()
        got = [m.data() for m in _drain(receive, want=2, limit_s=60)]
        got += [m.data() for m in _drain(receive, quiet_s=1.0)]
    finally:
        consumer.close()
    return got


def test_a_metastore_that_stops_fsyncing_every_write_holds_the_governed_topics(
        writer, plain, plugin_redis, plugin_broker, topic):
    """The plugin checks the server's persistence as the library does when it opens the
    store (strict: AOF with appendfsync always), and keeps checking: a server switched
    to everysec can lose a decision the plugin would have acted on, so a commit made
    meanwhile is not delivered until the setting is put back (the plugin trusted the URL
    and delivered it at once)."""
    import redis

    r = redis.Redis.from_url(plugin_redis.url)
    log = Path(plugin_broker.log_path)
    seen = log.read_text(errors="replace").count("appendfsync is 'everysec'")
    p = writer.create_producer(topic)
    consumer, receive = _open(plain, topic, "exclusive")
    try:
        r.config_set("appendfsync", "everysec")
        try:
            deadline = time.monotonic() + 10  # the plugin's warning: it has noticed
            while log.read_text(errors="replace").count("appendfsync is 'everysec'") == seen:
                assert time.monotonic() < deadline, "the plugin never noticed everysec"
                time.sleep(0.1)
            with writer.transaction() as t:
                p.send(b"committed-meanwhile", txn=t)
            held = [m.data() for m in _drain(receive, quiet_s=2.0)]
        finally:
            r.config_set("appendfsync", "always")
        got = [m.data() for m in _drain(receive, want=1, limit_s=20)]
    finally:
        consumer.close()
        r.close()
    assert held == [], "delivered while the metastore could lose the decision"
    assert got == [b"committed-meanwhile"], got


def test_a_topic_unload_with_an_open_txn_keeps_it_held_and_releases_it_on_commit(
        writer, plain, plugin_broker, topic):
    def unload():
        admin_request(plugin_broker.admin_url, "PUT",
                      f"/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/unload")
    assert _held_then_commit(writer, plain, topic, unload) == [b"held", b"after"]


def test_redis_down_while_a_plain_consumer_waits_leaks_nothing_and_delivery_resumes(
        writer, plain, plugin_redis, topic):
    def outage():
        plugin_redis.kill()
        time.sleep(2.0)  # the gate's computations fail meanwhile; it holds
        plugin_redis.start()
    assert _held_then_commit(writer, plain, topic, outage) == [b"held", b"after"]


def test_a_broker_restart_with_an_open_txn_keeps_it_held_and_releases_it_on_commit(
        writer, plain, plugin_broker, topic):
    assert _held_then_commit(writer, plain, topic, plugin_broker.restart) == [b"held", b"after"]


@pytest.mark.parametrize("kind", ["reader", "failover", "key_shared"])
def test_an_entry_whose_verdict_cannot_be_read_holds_everything_after_it(
        writer, plain, plugin_redis, topic, kind):
    """Redis down and a committed entry's verdict not cached (nobody has read it): the
    filter cannot classify it and reschedules it. Nothing after it may reach the
    subscription meanwhile: a reader or a cumulative ack past it would lose it for good,
    and a later entry of its key first breaks order. Once Redis is back it comes first,
    once (review of issue 28, finding 3: the plain entry came alone, the committed one
    never)."""
    p = writer.create_producer(topic)
    t = writer.new_transaction()
    p.send(b"committed", key="k", txn=t)
    p.send(b"after", key="k")
    t.commit()  # the gate passes both at once: only the plain tail is read back (cold)
    _gate_past(plain, topic, 2)
    if kind == "reader":
        consumer = plain.create_reader(topic, pulsar.MessageId.earliest)
        receive = consumer.read_next
    else:
        consumer = plain.subscribe(
            topic, f"plain-{kind}", initial_position=pulsar.InitialPosition.Earliest,
            consumer_type=pulsar.ConsumerType.Failover if kind == "failover"
            else pulsar.ConsumerType.KeyShared)

        def receive(timeout_ms: int):
            m = consumer.receive(timeout_ms)
            (consumer.acknowledge_cumulative if kind == "failover" else consumer.acknowledge)(m)
            return m
    try:
        plugin_redis.kill()
        try:
            during = [m.data() for m in _drain(receive, quiet_s=3.0)]
        finally:
            plugin_redis.start()
        later = [m.data() for m in _drain(receive, want=2 - len(during), limit_s=30)]
        later += [m.data() for m in _drain(receive, quiet_s=1.0)]
    finally:
        consumer.close()
    assert during == [], f"delivered while the entry before it could not be classified: {during}"
    assert later == [b"committed", b"after"], later


def test_a_subscription_that_seeks_past_an_unclassified_entry_is_not_held_by_it(
        writer, plain, plugin_redis, topic):
    """The hold behind an entry that could not be classified ends when the subscription
    moves past that entry another way (a seek): it would never be read again, so the
    hold would never end, even with Redis back."""
    p = writer.create_producer(topic)
    t = writer.new_transaction()
    p.send(b"committed", txn=t)
    p.send(b"after")
    p.send(b"after-2")
    t.commit()
    ids = _gate_past(plain, topic, 3)
    consumer = plain.subscribe(topic, "plain-seek",
                               initial_position=pulsar.InitialPosition.Earliest)
    try:
        plugin_redis.kill()
        try:
            assert _drain(consumer.receive, quiet_s=2.0) == []  # held behind "committed"
            consumer.seek(ids[1])  # the broker's cursor to "after" (the client skips it)
            got = [m.data() for m in _drain(consumer.receive, want=1, limit_s=20)]
        finally:
            plugin_redis.start()
    finally:
        consumer.close()
    assert got == [b"after-2"], got


# Failover shares Exclusive's dispatcher (single active consumer): the Python test above
# covers it; these three are the three dispatchers
@pytest.mark.parametrize("sub_type", ["Exclusive", "Shared", "Key_Shared"])
def test_a_plain_java_consumer_is_held_at_an_open_txn_and_sees_each_committed_entry_once(
        writer, plugin_broker, topic, sub_type):
    """Pulsar's own Java client (4.0.7, benchmarks/peer's PlainPeer), as a company's Java
    services read the topic: the same guarantees as the Python consumers above."""
    p = writer.create_producer(topic)
    p.send(b"plain-0", key="k")
    held = writer.new_transaction(timeout_ms=120_000)
    p.send(b"held-0", key="k", txn=held)
    p.send(b"plain-1", key="k")
    aborted = writer.new_transaction()
    p.send(b"aborted-0", key="k", txn=aborted)
    aborted.abort()
    proc = subprocess.Popen(java_cmd("PlainPeer", "consume", plugin_broker.service_url, topic,
                                     sub_type, "3", "60000"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    pump = threading.Thread(target=lambda: [lines.put(x.strip()) for x in proc.stdout],
                            daemon=True)
    pump.start()
    try:
        assert lines.get(timeout=60) == "ready", proc.stderr.read()[-2000:]
        before = []
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            try:
                before.append(lines.get(timeout=0.2))
            except queue.Empty:
                pass
        assert before == ["msg plain-0"], before
        held.commit()
        assert proc.wait(60) == 0, proc.stderr.read()[-2000:]
        pump.join(10)
    finally:
        proc.kill()
    after = []
    while not lines.empty():
        after.append(lines.get())
    assert after == ["msg held-0", "msg plain-1"], after




def _raw_count(plain, topic: str) -> int:
    """Entries as the library's own readers see them: exempt from the filter (the gate
    still applies), so every append below it."""
    r = plain.create_reader(topic, pulsar.MessageId.earliest, subscription_role_prefix="__ptxn")
    n = 0
    try:
        while True:
            r.read_next(1500)
            n += 1
    except pulsar.Timeout:
        return n
    finally:
        r.close()


@pytest.mark.spark
@pytest.mark.slow  # a Spark job (~25 s): the default stage's budget is spent
def test_the_spark_sinks_failed_task_attempt_never_reaches_a_plain_consumer(
        plugin_broker, plugin_redis, writer, plain, topic, tmp_path):
    from spark_helpers import run_job, write_inputs

    expected = write_inputs(tmp_path / "in", 3, 40)
    done = run_job(plugin_broker, plugin_redis, METASTORE_NS, topic, tmp_path / "in",
                   tmp_path / "ck", fault="fail-first-attempt:1", master="local[2,2]")
    assert done.returncode == 0, done.stderr[-3000:]
    assert _raw_count(plain, topic) > sum(expected.values()), "no losing attempt was written"
    got = _plain_committed(plain, topic, want=sum(expected.values()))
    assert Counter(got) == expected  # each row once, the losing attempt's copies never


@pytest.mark.spark
@pytest.mark.slow  # a Spark standalone cluster and a 12 s straggler, as in test_spark_sink
def test_the_spark_sinks_speculative_attempt_never_reaches_a_plain_consumer(
        plugin_broker, plugin_redis, writer, plain, topic, tmp_path):
    from spark_helpers import SparkCluster, run_job, write_inputs

    expected = write_inputs(tmp_path / "in", 2, 40)
    cluster = SparkCluster(tmp_path / "cluster").start()
    try:
        done = run_job(plugin_broker, plugin_redis, METASTORE_NS, topic, tmp_path / "in",
                       tmp_path / "ck", fault="slow-partition0:0:12000", speculation=True,
                       master=cluster.url)
    finally:
        cluster.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    assert _raw_count(plain, topic) > sum(expected.values()), "no speculative attempt ran"
    assert Counter(_plain_committed(plain, topic, want=sum(expected.values()))) == expected


@pytest.mark.spark
def test_the_spark_source_reads_the_committed_set_on_a_plugin_broker(
        spark, plugin_broker, plugin_redis, writer, topic):
    """Its range scans read through subscriptions the filter exempts, so a scan whose
    end entry the filter would hide still ends (an aborted transaction writes last)."""
    from spark_helpers import source_df

    p = writer.create_producer(topic)
    for i in range(3):
        with writer.transaction() as t:
            p.send(f"c{i}".encode(), txn=t)
    aborted = writer.new_transaction()
    p.send(b"aborted", txn=aborted)
    aborted.abort()
    df = source_df(spark, plugin_broker, plugin_redis, METASTORE_NS, stream=False, topic=topic)
    assert sorted(bytes(r.value) for r in df.select("value").collect()) == [b"c0", b"c1", b"c2"]


def test_after_a_namespace_reset_the_new_deployments_commits_reach_plain_consumers(
        plugin_broker, plugin_redis, plain, topic):
    """The operator wipes the namespace and initialises it again (docs/operations.md, a
    reset: a new deployment id) while the broker runs. The plugin reads the config again
    before it rejects anything for naming another deployment: the new deployment's
    committed entries are delivered, its aborted ones are not (review of issue 28,
    finding 5). Last in this module: it resets the namespace the others share."""
    import redis

    with PulsarTxnClient(plugin_broker.service_url, plugin_redis.url, namespace=METASTORE_NS,
                         create_namespace=True) as before:
        with before.transaction() as t:
            before.create_producer(topic).send(b"old-deployment", txn=t)
    assert _plain_committed(plain, topic, want=1) == [b"old-deployment"]
    r = redis.Redis.from_url(plugin_redis.url)
    for key in list(r.scan_iter(match=f"*{METASTORE_NS}*", count=1000)):
        r.delete(key)
    r.close()
    with PulsarTxnClient(plugin_broker.service_url, plugin_redis.url, namespace=METASTORE_NS,
                         create_namespace=True) as after:
        fresh = f"{topic}-after-reset"
        p = after.create_producer(fresh)
        aborted = after.new_transaction()
        p.send(b"aborted", txn=aborted)
        aborted.abort()
        with after.transaction() as t:
            p.send(b"new-deployment", txn=t)
        assert _plain_committed(plain, fresh, want=1) == [b"new-deployment"]
