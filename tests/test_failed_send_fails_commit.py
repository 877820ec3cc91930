"""A transaction in which any send raised cannot commit (issue 26, hole 12), as
Kafka's ``commitTransaction`` refuses after a failed send: the caller was told a send
failed, so a COMMITTED answer would contradict it. Commit raises and the transaction
aborts, whether or not the caller caught the send's error and sent on.

The store's outage is played by the in-memory store refusing the write registration
the way the Redis store does when Redis is down (``MetastoreUnavailable``, after
redis-py's retries); integration_tests/test_failed_send_commit.py cuts real Redis.
"""

from __future__ import annotations

from functools import partial

import pulsar
import pytest

from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.errors import AppendFailed, ConfigError, MetastoreUnavailable
from pulsar_txn.metastore import MemoryMetadataStore
from pulsar_txn.producer import Producer
from pulsar_txn.state import TxnState
from pulsar_txn.transaction import Transaction


class _Id:
    def __init__(self, entry: int) -> None:
        self._entry = entry

    def ledger_id(self) -> int:
        return 1

    def entry_id(self) -> int:
        return self._entry

    def batch_index(self) -> int:
        return -1


class _Producer:
    """A pulsar-client producer's stand-in that stores every send."""

    def __init__(self) -> None:
        self.stored: list[bytes] = []

    def send(self, value, properties=None, **kw):
        self.stored.append(value)
        return _Id(len(self.stored))

    def send_async(self, value, callback, properties=None, **kw) -> None:
        callback(pulsar.Result.Ok, self.send(value))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class _DownStore(MemoryMetadataStore):
    """The memory store, with a window in which write registrations fail as the Redis
    store's do while its server is unreachable."""

    down = False

    def register_write(self, txn_id, segment, writer) -> None:
        if self.down:
            raise MetastoreUnavailable("metadata store 'redis://127.0.0.1:1/0' (option "
                                       "'metastore.url') did not answer: Connection refused")
        super().register_write(txn_id, segment, writer)


class _Client:
    """What ``Producer`` asks of a pulsar-client ``Client``."""

    def __init__(self) -> None:
        self.native = _Producer()

    def create_producer(self, topic, **kw):
        return self.native


@pytest.fixture
def store():
    return _DownStore(partitions=4)


@pytest.fixture
def coord(store):
    return TransactionCoordinator(store, materialize_inline=True)


def _refused_and_aborted(txn: Transaction, store) -> None:
    with pytest.raises(AppendFailed, match="send"):
        txn.commit()
    assert txn.state is TxnState.ABORTED
    assert store.get_header(txn.id).state is TxnState.ABORTED


@pytest.mark.parametrize("send_on", [True, False], ids=["sent-on", "gave-up"])
@pytest.mark.parametrize("how", ["send", "send_async"])
def test_a_send_whose_registration_failed_fails_the_commit(store, coord, how, send_on):
    txn = Transaction(store, coord.new_transaction(), coord)
    producer = Producer(_Client(), "persistent://public/default/t")
    # with a callback: registered at the send (without one it waits in a chunk: below)
    send = producer.send if how == "send" else partial(producer.send_async,
                                                       callback=lambda r, m: None)
    store.down = True
    with pytest.raises(MetastoreUnavailable):
        send(b"m0", txn=txn)  # the caller catches it ...
    store.down = False
    if send_on:
        send(b"m1", txn=txn)  # ... and sends on once the store is back
    _refused_and_aborted(txn, store)


def test_a_per_entry_send_whose_registration_fails_at_the_hand_over_fails_the_commit(
        store, coord):
    """A send without a callback is registered when its chunk is handed over (at the
    latest, the commit's flush): a registration refused then fails the commit."""
    txn = Transaction(store, coord.new_transaction(), coord)
    producer = Producer(_Client(), "persistent://public/default/t")
    producer.send_async(b"m0", txn=txn)  # taken into the chunk: nothing registered yet
    store.down = True
    with pytest.raises(MetastoreUnavailable):
        txn.commit()
    assert txn.state is TxnState.ABORTED
    assert store.get_header(txn.id).state is TxnState.ABORTED


def test_a_send_refused_before_it_reached_the_run_fails_the_commit(store, coord):
    """Any send that raised, even one refused up front (a reserved property)."""
    txn = Transaction(store, coord.new_transaction(), coord)
    producer = Producer(_Client(), "persistent://public/default/t")
    producer.send(b"m0", txn=txn)
    with pytest.raises(ConfigError):
        producer.send(b"m1", properties={"__ptxn.txn": "x"}, txn=txn)
    _refused_and_aborted(txn, store)


def test_a_transaction_whose_sends_all_succeeded_commits(store, coord):
    txn = Transaction(store, coord.new_transaction(), coord)
    producer = Producer(_Client(), "persistent://public/default/t")
    producer.send(b"m0", txn=txn)
    producer.send_async(b"m1", txn=txn)
    assert txn.commit().state is TxnState.COMMITTED


def test_a_writer_run_whose_registration_failed_fails_the_commit(store, coord):
    """The same through the writer-run alone (the path the scalable producer takes)."""
    txn = Transaction(store, coord.new_transaction(), coord)
    run = txn.run_for("persistent://public/default/t", "w1", _Producer())
    store.down = True
    with pytest.raises(MetastoreUnavailable):
        run.send(b"m0")
    store.down = False
    run.send(b"m1")
    _refused_and_aborted(txn, store)


class _Clients:
    """What the scalable producer asks of a pulsar-client ``Client``."""

    def create_producer(self, topic, **kw):
        return _Producer()


@pytest.mark.parametrize("how", ["send", "send_async"])
def test_a_scalable_producers_send_that_raised_fails_the_commit(store, coord, how):
    from pulsar_txn.scalable.admin import ScalableTopics
    from pulsar_txn.scalable.producer import ScalableProducer

    client = _Clients()
    topics = ScalableTopics(store, client)
    topics.create("t", 2)
    producer = ScalableProducer(client, topics, "t")
    txn = Transaction(store, coord.new_transaction(), coord)
    send = producer.send if how == "send" else producer.send_async
    send(b"m0", key="a", txn=txn)
    store.down = True  # the next key's segment needs a new registration
    with pytest.raises(MetastoreUnavailable):
        for key in "bcdefgh":  # some key routes to the other segment
            send(b"m1", key=key, txn=txn)
    store.down = False
    with pytest.raises(ConfigError):
        send(b"m2", key="a", properties={"__ptxn.txn": "x"}, txn=txn)
    _refused_and_aborted(txn, store)


def test_a_scalable_producers_refused_send_alone_fails_the_commit(store, coord):
    """A send refused before it reached a writer-run (a reserved property)."""
    from pulsar_txn.scalable.admin import ScalableTopics
    from pulsar_txn.scalable.producer import ScalableProducer

    client = _Clients()
    topics = ScalableTopics(store, client)
    topics.create("t", 1)
    producer = ScalableProducer(client, topics, "t")
    txn = Transaction(store, coord.new_transaction(), coord)
    producer.send(b"m0", key="a", txn=txn)
    with pytest.raises(ConfigError):
        producer.send_async(b"m1", key="a", properties={"__ptxn.txn": "x"}, txn=txn)
    _refused_and_aborted(txn, store)
