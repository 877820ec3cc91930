"""A metastore that changes under a running client, and a reader pointed at the wrong one.

Issue 26, hole 8: a long-running client whose metastore is wiped and initialised
again (a new deployment id at the same address) must stop reading, writing and
acking, naming ``metastore.url``: nothing is acked or written across the change.
Hole 13: a reader never creates a namespace; a missing one fails at once, naming
the option and the namespaces that exist; entries of another deployment are never
delivered and, unless the reader is told to skip them, never passed silently.
"""

from __future__ import annotations

import pytest
from helpers import committed

from pulsar_txn.client import PulsarTxnClient
from pulsar_txn.errors import DeploymentChanged, ForeignDeploymentEntries, NamespaceNotFound
from pulsar_txn.metastore.keys import Keys
from pulsar_txn.readers import read_all


def _wipe(store, namespace: str) -> None:
    """What an operator's reset does: every key of the namespace gone."""
    for key in list(store.r.scan_iter(match=f"*{namespace}*", count=1000)):
        store.r.delete(key)


def _values(stream, idle_ms: int = 2000) -> list[bytes]:
    return [m.value for m in read_all(stream, idle_ms)]


def test_a_long_running_consumer_stops_and_acks_nothing_when_its_metastore_is_reset(
        make_client, topic_name, namespace):
    topic = topic_name("reset")
    old = make_client()
    committed(old, topic, b"before")
    consumer = old.subscribe(topic, "s")
    first = consumer.receive(10_000)
    assert first.value == b"before"
    consumer.acknowledge(first)

    _wipe(old.store, namespace)
    new = make_client()  # initialises the namespace again: a new deployment id
    assert new.store.deployment != old.store.deployment
    committed(new, topic, b"after")

    with pytest.raises(DeploymentChanged, match="metastore.url"):
        consumer.receive(10_000)
    consumer.close()
    # nothing was acked across the change: the new deployment's consumer gets it
    assert _values(new.subscribe(topic, "s")) == [b"after"]


def test_a_long_running_reader_stops_when_its_metastore_is_reset(make_client, topic_name,
                                                                 namespace):
    topic = topic_name("reset-reader")
    old = make_client()
    committed(old, topic, b"before")
    reader = old.create_reader(topic)
    assert reader.read_next(10_000).value == b"before"
    _wipe(old.store, namespace)
    new = make_client()
    committed(new, topic, b"after")
    with pytest.raises(DeploymentChanged, match="metastore.url"):
        reader.read_next(10_000)


def test_a_long_running_client_neither_begins_writes_nor_commits_after_a_reset(
        make_client, plain_pulsar, topic_name, namespace):
    topic, acked = topic_name("reset-writer"), topic_name("reset-acks")
    plain = plain_pulsar.create_producer(acked)
    plain.send(b"to ack")
    old = make_client(sweeper=False)
    producer = old.create_producer(topic)
    consumer = old.subscribe(acked, "s")
    begun = old.new_transaction()
    _wipe(old.store, namespace)
    new = make_client(sweeper=False)

    with pytest.raises(DeploymentChanged, match="metastore.url"):
        old.new_transaction()
    with pytest.raises(DeploymentChanged, match="metastore.url"):
        producer.send(b"x", txn=begun)
    message = consumer.receive(10_000)  # a plain message: deployment-free
    try:
        consumer.acknowledge(message, txn=begun)
    except DeploymentChanged:
        pass  # refused at once, or at the commit below
    with pytest.raises(DeploymentChanged, match="metastore.url"):
        begun.commit()
    consumer.close()
    assert _values(new.subscribe(acked, "s")) == [b"to ack"]  # never acked
    with pytest.raises(DeploymentChanged, match="metastore.url"):
        old.coordinator.sweep_all()
    # nothing of the old deployment was written: no header, no entry
    assert new.store.open_txns() == []
    import pulsar
    r = plain_pulsar.create_reader(topic, pulsar.MessageId.earliest)
    with pytest.raises(pulsar.Timeout):
        r.read_next(1000)
    r.close()


# ---- hole 13: the wrong namespace, the wrong metastore ----

def test_a_reader_never_creates_a_namespace_and_names_those_that_exist(
        make_client, broker, redis_server, topic_name, namespace):
    topic = topic_name("typo")
    committed(make_client(), topic, b"m")
    typo = namespace + "x"
    client = PulsarTxnClient(broker.service_url, redis_server.url, namespace=typo,
                             sweeper=False)
    try:
        for open_stream in (lambda: client.create_reader(topic),
                            lambda: client.subscribe(topic, "s")):
            with pytest.raises(NamespaceNotFound) as e:
                open_stream()
            text = str(e.value)
            assert "metastore.namespace" in text and "metastore.url" in text
            assert repr(typo) in text and namespace in text
    finally:
        client.close()
    probe = make_client()
    assert not probe.store.r.exists(Keys(typo, 1).config())


def test_entries_of_another_deployment_fail_a_reader_by_default_and_are_never_acked(
        make_client, topic_name, namespace):
    topic = topic_name("foreign")
    writer = make_client()
    committed(writer, topic, b"theirs")
    other = make_client(namespace=namespace + "b")  # an existing, other deployment
    other.new_transaction().abort()
    reader = other.create_reader(topic)
    with pytest.raises(ForeignDeploymentEntries) as e:
        reader.read_next(10_000)
    assert writer.store.deployment in str(e.value)
    assert "metastore.namespace" in str(e.value) and "skip" in str(e.value)
    consumer = other.subscribe(topic, "s")
    with pytest.raises(ForeignDeploymentEntries):
        consumer.receive(10_000)
    consumer.close()
    assert _values(writer.subscribe(topic, "s")) == [b"theirs"]  # not acked away


def test_skip_foreign_deployments_passes_them_and_counts_them(make_client, plain_pulsar,
                                                             topic_name, namespace):
    topic = topic_name("foreign-skip")
    writer = make_client()
    committed(writer, topic, b"theirs", b"theirs too")
    p = plain_pulsar.create_producer(topic)
    p.send(b"plain")
    p.close()
    other = make_client(namespace=namespace + "b", skip_foreign_deployments=True)
    reader = other.create_reader(topic)
    assert _values(reader) == [b"plain"]
    assert reader.skipped_foreign == 2
    consumer = other.subscribe(topic, "s")
    assert _values(consumer) == [b"plain"]
    assert consumer.skipped_foreign == 2


def test_read_only_cli_commands_never_create_a_namespace(client, redis_server, namespace,
                                                         capsys):
    from pulsar_txn.cli import main

    typo = namespace + "x"
    base = ["--metastore", redis_server.url, "--namespace", typo]
    for cmd in (["list"], ["show", "v5:1:1"], ["find", "o"], ["sweep"], ["wire-format"],
                ["topic", "list"], ["metrics", "serve", "--port", "0"]):
        assert main(base + cmd) == 2, cmd
        err = capsys.readouterr().err
        assert "--namespace" in err and namespace in err, (cmd, err)
    assert not client.store.r.exists(Keys(typo, 1).config())


def test_a_running_writer_stops_appending_once_its_client_has_seen_the_reset(
        make_client, plain_pulsar, topic_name, namespace):
    """Hole 8, the writer's side: a run registered before the reset needs no store
    round trip per send, so it learns the change from its client's background check
    (the sweeper's, every interval): from then on every send raises, naming
    metastore.url, and nothing more is appended under the old deployment id."""
    import time

    topic = topic_name("reset-run")
    old = make_client(sweeper=True, sweep_interval_s=0.1)
    producer = old.create_producer(topic)
    txn = old.new_transaction()
    producer.send(b"before", txn=txn)  # the run is registered
    _wipe(old.store, namespace)
    make_client()  # a new deployment at the same address
    time.sleep(1.0)  # a few sweep intervals: the client has seen the change
    with pytest.raises(DeploymentChanged, match="metastore.url"):
        producer.send(b"across", txn=txn)
    with pytest.raises(DeploymentChanged, match="metastore.url"):
        producer.send_async(b"across-async", None, txn=txn)
    producer.flush()
    reader = plain_pulsar.create_reader(topic, pulsar_earliest())
    seen = []
    try:
        while True:
            seen.append(reader.read_next(1500).data())
    except Exception:  # noqa: BLE001 - pulsar.Timeout: the topic is read
        pass
    assert seen == [b"before"], "appended under the old deployment after the change"


def pulsar_earliest():
    import pulsar

    return pulsar.MessageId.earliest
