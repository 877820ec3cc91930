"""H1 (append-then-record window) and H3 (late and zombie writers)."""

from __future__ import annotations

import pytest
from helpers import raw_entries, values

from pulsar_txn.client import Transaction
from pulsar_txn.errors import ReadTimeout, TxnNotOpen
from pulsar_txn.records import Position, txn_properties


def test_gate_between_append_and_record_does_not_pass_the_entry(client, plain_pulsar,
                                                                topic_name):
    """Fault injection: the writer registered and appended, but has not recorded yet."""
    t = topic_name()
    client.create_producer(t).send(b"before")
    txn = client.new_transaction()
    client.store.register_write(txn.id, t, "w1")            # step 1: registration
    raw = plain_pulsar.create_producer(t)                    # step 2: the append
    mid = raw.send(b"in-window",
                   properties=txn_properties(txn.id, "w1", client.store.deployment))
    pos = Position.of(mid).entry_position
    # step 3 (record) has not happened: a gate computed now must stay below the entry
    gate = client.buffer.gate(t, received_upto=pos)
    assert gate < pos
    reader = client.create_reader(t)
    assert reader.read_next(3000).value == b"before"
    with pytest.raises(ReadTimeout):
        reader.read_next(500)
    client.store.record_write(txn.id, t, "w1", pos, None)     # step 3
    assert client.buffer.gate(t, received_upto=pos) < pos     # now pinned by the record
    client.coordinator.commit(txn.id)
    assert reader.read_next(3000).value == b"in-window"


def test_zombie_writer_after_end_is_fenced(client, plain_pulsar, topic_name):
    t = topic_name()
    p = client.create_producer(t)
    txn = client.new_transaction()
    p.send(b"ok", txn=txn)
    txn.commit()
    # a zombie holding a stale OPEN view of the txn, with a new writer-run
    stale = Transaction(client.store, txn.header, client.coordinator)
    stale._state = stale.header.state.__class__("OPEN")
    zombie = client.create_producer(t)
    with pytest.raises(TxnNotOpen):
        zombie.send(b"zombie", txn=stale)
    assert [m.data() for m in raw_entries(plain_pulsar, t)] == [b"ok"]  # nothing appended
    assert values(client.create_reader(t)) == [b"ok"]


def test_writer_registered_before_end_but_not_winner_stays_invisible(client, plain_pulsar,
                                                                     topic_name):
    t = topic_name()
    p = client.create_producer(t)
    txn = client.new_transaction()
    p.send(b"winner", txn=txn)
    # a second attempt registered and appended, but the committer never heard of it
    client.store.register_write(txn.id, t, "late-attempt")
    raw = plain_pulsar.create_producer(t)
    raw.send(b"loser",
             properties=txn_properties(txn.id, "late-attempt", client.store.deployment))
    txn.commit()  # winners = the writers this client knows
    assert values(client.create_reader(t)) == [b"winner"]
    client.coordinator.sweep_gc(retention_ms=0)  # ... and after header GC (H2)
    assert values(client.create_reader(t)) == [b"winner"]


class _StoredThenTimedOut:
    """Fault injection around a real producer: the append is stored by the broker,
    then the client reports a timeout (the ambiguous outcome a network blip gives)."""

    def __init__(self, producer) -> None:
        self._p = producer

    def send(self, value, **kw):
        import pulsar

        self._p.send(value, **kw)
        raise pulsar.Timeout("fault injection: stored, but reported as a timeout")


def test_ambiguous_first_append_keeps_its_registration_so_abort_hides_it_after_gc(
        client, topic_name):
    """H1/H2 on the scalable-topic path: a writer-run may withdraw its registration only
    when the append was certainly not stored (sealed before it, or TopicTerminated).
    After an ambiguous failure the record must stay, so the abort lists the writer and
    the entry stays hidden once the header is collected."""
    import pulsar

    from pulsar_txn.writer import WriterRun

    t = topic_name()
    txn = client.new_transaction()
    run = WriterRun(client.store, txn.id, t, "w-amb",
                    _StoredThenTimedOut(client.pulsar.create_producer(t)), fence=lambda: None)
    with pytest.raises(pulsar.Timeout):
        run.send(b"stored-but-unconfirmed")
    assert [r.writer for r in client.store.list_writes(txn.id)[0]] == ["w-amb"]
    client.coordinator.abort(txn.id)
    client.create_producer(t).send(b"after")
    client.coordinator.sweep_gc(retention_ms=0)
    assert client.store.get_header(txn.id) is None  # collected ...
    assert values(client.create_reader(t)) == [b"after"]  # ... and still classified
