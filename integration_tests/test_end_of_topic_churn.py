"""pulsar-client 3.13 (C++ 3.x) does not know the broker's CommandReachedEndOfTopic: a
reader or consumer caught up on a terminated topic (an empty sealed segment, a probe)
makes it log "Received invalid message from server" and close the whole pooled
connection, again after every reconnect, until that reader closes. Every producer on
the same pulsar.Client reconnects each time, and with broker deduplication on (the
reference broker's setting) a send in flight is then answered as a duplicate,
``(-1,-1)``, without being stored (measured: one in 40 sync sends, every run).

Real broker (the reference one: only it can terminate a topic), real Redis.
"""

from __future__ import annotations

import contextlib
import time

import pulsar
import pytest

from pulsar_txn.admin import admin_terminate
from pulsar_txn.client import read_all
from pulsar_txn.errors import AppendFailed, ReadTimeout
from pulsar_txn.state import TxnState


@pytest.fixture
def terminating(broker):
    if not getattr(broker, "admin_url", ""):
        pytest.skip(f"the {broker.kind} broker cannot terminate topics")
    return broker


def _caught_up_reader(pulsar_client, topic: str):
    """A reader waiting at the end of an empty topic: terminating it starts the churn."""
    reader = pulsar_client.create_reader(topic, pulsar.MessageId.earliest)
    time.sleep(0.3)  # subscribed, with nothing to read
    return reader


def _stored(broker, topic: str) -> list[bytes]:
    c = pulsar.Client(broker.service_url)
    try:
        r = c.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        try:
            while True:
                out.append(r.read_next(1500).value())
        except pulsar.Timeout:
            return out
    finally:
        c.close()


@pytest.mark.parametrize("how", ["send", "send_async"])
def test_an_append_the_broker_answers_as_a_duplicate_never_commits(client, terminating,
                                                                    topic_name, how):
    """Fault injected on the producer's own pulsar client: whatever the broker does
    with a send in flight, a committed transaction shows every message it appended."""
    sealed = topic_name("sealed-empty")
    churn = _caught_up_reader(client.pulsar, sealed)
    topic = topic_name("out")
    producer = client.create_producer(topic)
    sent = [f"m{i}".encode() for i in range(40)]
    committed = True
    try:
        with client.transaction() as txn:
            for i, v in enumerate(sent):
                if i == 0:
                    admin_terminate(terminating.admin_url, sealed, None)
                if how == "send":
                    producer.send(v, txn=txn)
                else:
                    producer.send_async(v, txn=txn)
                time.sleep(0.05)
    except AppendFailed as refused:  # the transaction aborted
        assert "without a position" in str(refused), refused
        committed = False
    finally:
        churn.close()
    got = [m.value for m in read_all(client.create_reader(topic), idle_ms=1500)]
    if committed:
        assert got == sent, (f"a committed transaction lost "
                             f"{sorted(set(sent) - set(got))} (stored: "
                             f"{len(_stored(terminating, topic))} of {len(sent)})")
    else:
        assert got == []



def test_a_reader_caught_up_on_a_terminated_topic_costs_the_clients_producers_nothing(
        client, terminating, topic_name):
    """The client's READ_COMMITTED readers (and its probes) sit on sealed segments as a
    matter of course; their end-of-topic churn must not reach its producers."""
    sealed = topic_name("sealed-empty")
    reader = client.create_reader(sealed)
    with pytest.raises(ReadTimeout):
        reader.read_next(300)  # caught up on an empty segment
    topic = topic_name("out")
    producer = client.create_producer(topic)
    admin_terminate(terminating.admin_url, sealed, None)
    sent, mids = [f"m{i}".encode() for i in range(40)], []
    for v in sent:
        mids.append(producer.send(v))
        time.sleep(0.05)
    reader.close()
    unplaced = [v for v, m in zip(sent, mids) if m.entry_id() < 0]
    assert not unplaced, f"sends acknowledged without a position: {unplaced}"
    assert _stored(terminating, topic) == sent
    # the seal's own probes of terminated segments read on the readers' client, too
    assert client.scalable.pulsar is client.read_pulsar is not client.pulsar


def test_an_entry_the_broker_answers_as_a_duplicate_never_commits_when_heard_of_per_entry(
        client, terminating, topic_name):
    """The Spark sink's producers learn their appends' outcomes from one callback per
    entry (pulsar_txn.entry_acks). The same fault as above, on whole entries: a
    committed transaction still shows every message it appended."""
    from pulsar_txn.spark.sink_task import PER_ENTRY_PRODUCER

    topic = topic_name("out")
    kw = {"batching_enabled": True, "batching_max_messages": 1000,
          "block_if_queue_full": True, "max_pending_messages": 10_000, **PER_ENTRY_PRODUCER}
    outcomes = []
    for attempt in range(3):
        sealed = topic_name(f"sealed-empty-{attempt}")
        churn = _caught_up_reader(client.pulsar, sealed)
        producer = client.pulsar.create_producer(topic, **kw)
        sent = [f"a{attempt}-m{i}".encode() for i in range(5000)]
        txn = client.new_transaction()
        run = txn.run_for(topic, "w1", producer)
        acks = run.acknowledge_per_entry(kw["batching_max_messages"],
                                         kw["batching_max_allowed_size_in_bytes"])
        run.send_many(sent[:1])  # the first append: its position recorded
        admin_terminate(terminating.admin_url, sealed, None)
        for i in range(1, len(sent), 1000):
            run.send_many(sent[i:i + 1000])
        try:
            txn.commit()
            outcomes.append("committed")
            # the real client cut its batches where foreseen: a callback per entry
            assert acks.verify() == [] and len(acks.heard) <= 10, len(acks.heard)
        except (AppendFailed, pulsar.NotConnected) as refused:  # the flush met the reset
            outcomes.append(f"refused: {refused}"[:120])
            assert txn.state is not TxnState.COMMITTED
            txn.abort()
        finally:
            for thing in (churn, producer):  # their connection may be gone: nothing to do
                with contextlib.suppress(pulsar.NotConnected, pulsar.AlreadyClosed):
                    thing.close()
    got = [m.value for m in read_all(client.create_reader(topic), idle_ms=1500)]
    committed = [v for a, o in enumerate(outcomes) if o == "committed"
                 for v in [f"a{a}-m{i}".encode() for i in range(5000)]]
    assert "committed" in outcomes, outcomes  # the path works, not only refuses
    assert got == committed, (f"outcomes {outcomes}: a committed transaction lost "
                              f"{len(set(committed) - set(got))} messages")
