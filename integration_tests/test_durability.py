"""DESIGN §7: with AOF + appendfsync always, a Redis crash loses no committed decision."""

from __future__ import annotations

from helpers import values

from pulsar_txn.harness.redis_server import RedisServer
from pulsar_txn.state import TxnState


def test_redis_crash_between_commit_and_read_keeps_the_decision(broker, tmp_path, topic_name):
    from pulsar_txn.client import PulsarTxnClient

    server = RedisServer(tmp_path / "redis", appendfsync="always").start()
    client = PulsarTxnClient(broker.service_url, server.url, namespace="dur")
    try:
        t = topic_name()
        p = client.create_producer(t)
        txn = client.new_transaction()
        for i in range(3):
            p.send(b"d%d" % i, txn=txn)
        txn.commit()
        open_txn = client.new_transaction()
        p.send(b"never", txn=open_txn)
        server.kill()      # SIGKILL: no shutdown save; only what was fsynced survives
        server.start()     # same dir and port: replays the AOF
        assert client.coordinator.get(txn.id).state is TxnState.COMMITTED
        assert client.coordinator.get(open_txn.id).state is TxnState.OPEN
        client.coordinator.abort(open_txn.id)
        # the index cleanup of both ends may fall to the sweeper (1 s) after the restart
        assert values(client.create_reader(t), idle_ms=3000) == [b"d0", b"d1", b"d2"]
    finally:
        client.close()
        server.stop()


def test_watch_resyncs_after_a_redis_restart_and_wakes_a_waiting_reader(
        broker, tmp_path, topic_name):
    """Events published while a watcher was disconnected are not replayed to it; its
    reconnect emits a resync, so a reader blocked at its gate re-checks at once instead
    of waiting for its safety timeout (5 s)."""
    import threading
    import time

    from pulsar_txn.client import PulsarTxnClient

    server = RedisServer(tmp_path / "redis", appendfsync="always").start()
    reader_client = writer_client = None
    try:
        reader_client = PulsarTxnClient(broker.service_url, server.url, namespace="rs",
                                        sweeper=False)
        t = topic_name()
        p = reader_client.create_producer(t)
        txn = reader_client.new_transaction()
        p.send(b"held", txn=txn)
        reader = reader_client.create_reader(t)
        got, woke = [], []

        def wait():
            got.append(reader.read_next(30_000).value)
            woke.append(time.monotonic())

        th = threading.Thread(target=wait)
        th.start()
        time.sleep(0.5)  # blocked at the gate, its watch connected
        server.kill()
        time.sleep(1.0)  # the watch is disconnected, retrying with backoff
        server.start()
        writer_client = PulsarTxnClient(broker.service_url, server.url, namespace="rs",
                                        sweeper=False)
        committed = time.monotonic()
        writer_client.coordinator.commit(txn.id, txn.writers)  # event lost
        th.join(15)
        assert got == [b"held"]
        waited = woke[0] - committed
        print(f"\nreader woke {waited * 1000:.0f} ms after a commit made while its watch "
              "was disconnected")
        assert waited < 2.0, f"no resync: the reader waited {waited:.1f} s"
    finally:
        for c in (reader_client, writer_client):
            if c is not None:
                c.close()
        server.stop()


def _restore_earlier_copy(server: RedisServer, copy) -> None:
    """Model a host crash under a weak fsync mode, a failover to a lagging replica or a
    restore from a backup: the store comes back with an earlier state."""
    import shutil

    server.kill()
    shutil.rmtree(server.workdir)
    shutil.copytree(copy, server.workdir)
    server.start()


def _copy_now(server: RedisServer, dest):
    import shutil

    import redis

    redis.Redis.from_url(server.url).execute_command("BGREWRITEAOF")
    import time

    time.sleep(0.5)  # the rewrite is quick on a handful of keys; the copy follows it
    shutil.copytree(server.workdir, dest)
    return dest


def test_entries_of_a_txn_whose_header_was_lost_are_never_delivered(broker, tmp_path,
                                                                     topic_name):
    """Invariant 1, fail closed (DESIGN §3): a header lost with a rollback of the store is
    not 'committed and collected'; the OPEN txn's entries must never be shown."""
    from pulsar_txn.client import PulsarTxnClient

    server = RedisServer(tmp_path / "redis", appendfsync="always").start()
    clients = []
    try:
        client = PulsarTxnClient(broker.service_url, server.url, namespace="lost",
                                 sweeper=False)
        clients.append(client)
        t = topic_name()
        p = client.create_producer(t)
        p.send(b"plain-before")
        client.new_transaction().abort()  # the namespace exists in the copy (created lazily)
        backup = _copy_now(server, tmp_path / "backup")
        txn = client.new_transaction()
        p.send(b"never-committed", txn=txn)  # its header exists only after the backup
        p.send(b"plain-after")
        client.close()
        clients.clear()
        _restore_earlier_copy(server, backup)
        reader_client = PulsarTxnClient(broker.service_url, server.url, namespace="lost")
        clients.append(reader_client)
        assert reader_client.store.get_header(txn.id) is None
        assert values(reader_client.create_reader(t), idle_ms=2000) == [b"plain-before",
                                                                       b"plain-after"]
    finally:
        for c in clients:
            c.close()
        server.stop()


def test_txn_ids_are_never_reused_after_a_store_rollback(broker, tmp_path):
    from pulsar_txn.client import PulsarTxnClient

    server = RedisServer(tmp_path / "redis", appendfsync="always").start()
    clients = []
    try:
        def client():
            c = PulsarTxnClient(broker.service_url, server.url, namespace="reuse",
                                sweeper=False)
            clients.append(c)
            return c

        first = client().coordinator.new_transaction(owner="grp|1")
        backup = _copy_now(server, tmp_path / "backup")
        lost = client().coordinator.new_transaction(owner="grp|2")
        _restore_earlier_copy(server, backup)
        after = client().coordinator.new_transaction(owner="grp|3")
        assert first.txn_id.partition == lost.txn_id.partition == after.txn_id.partition
        assert after.txn_id != lost.txn_id, "a lost id was handed out again"
        assert after.txn_id.seq > first.txn_id.seq
    finally:
        for c in clients:
            c.close()
        server.stop()


def test_unsafe_persistence_is_refused_at_connect_unless_opted_into(broker, tmp_path):
    """DESIGN §7: a server that would lose acknowledged commits is refused by name; the
    weaker documented modes are explicit (and secrets never appear in the message)."""
    import pytest

    from pulsar_txn.client import PulsarTxnClient
    from pulsar_txn.errors import ConfigError
    from pulsar_txn.state import TxnState

    server = RedisServer(tmp_path / "redis", appendfsync="everysec", password="s3cr3t-pw").start()
    try:
        with pytest.raises(ConfigError) as err:
            PulsarTxnClient(broker.service_url, server.url, namespace="weak", sweeper=False)
        assert "appendfsync" in str(err.value) and "durability" in str(err.value)
        assert "s3cr3t-pw" not in str(err.value)
        for mode in ("waitaof", "relaxed"):
            c = PulsarTxnClient(broker.service_url, f"{server.url}?durability={mode}",
                                namespace="weak", sweeper=False)
            try:
                txn = c.new_transaction()
                assert c.coordinator.commit(txn.id).state is TxnState.COMMITTED
            finally:
                c.close()
    finally:
        server.stop()


def test_txn_live_across_a_rollback_keeps_its_header_and_its_lost_writes_stay_hidden(
        broker, tmp_path, topic_name):
    """A header that survived a rollback while its write record was lost: the txn ends
    ABORTED (timeout) with no losing writer listed. Collecting it would make its entry
    look committed; its header must stay the truth, also after GC."""
    from pulsar_txn.client import PulsarTxnClient

    server = RedisServer(tmp_path / "redis", appendfsync="always").start()
    clients = []
    try:
        client = PulsarTxnClient(broker.service_url, server.url, namespace="kept",
                                 sweeper=False)
        clients.append(client)
        t = topic_name()
        p = client.create_producer(t)
        txn = client.new_transaction(timeout_ms=1000)
        backup = _copy_now(server, tmp_path / "backup")  # the header is in the copy...
        p.send(b"lost-write", txn=txn)                   # ...its write record is not
        p.send(b"plain")
        client.close()
        clients.clear()
        _restore_earlier_copy(server, backup)
        c = PulsarTxnClient(broker.service_url, server.url, namespace="kept", sweeper=False)
        clients.append(c)
        import time

        time.sleep(1.1)
        c.coordinator.sweep_timeouts()
        assert c.coordinator.sweep_gc(retention_ms=0) == 0  # kept, not collected
        assert c.store.get_header(txn.id) is not None
        assert c.store.finalized_txns() == []
        fresh = PulsarTxnClient(broker.service_url, server.url, namespace="kept",
                                sweeper=False)
        clients.append(fresh)
        assert values(fresh.create_reader(t), idle_ms=1500) == [b"plain"]
    finally:
        for c in clients:
            c.close()
        server.stop()


def test_waitaof_mode_waits_for_the_fsync_of_every_decision(broker, tmp_path):
    """durability=waitaof on an `appendfsync everysec` server: each end waits for
    WAITAOF on its own connection; a decision whose fsync is not confirmed raises a
    retriable error, and ending again tells the outcome."""
    import pytest
    import redis

    from pulsar_txn.client import PulsarTxnClient
    from pulsar_txn.errors import PulsarTxnError

    server = RedisServer(tmp_path / "redis", appendfsync="everysec").start()
    r = redis.Redis.from_url(server.url)

    def waits() -> int:
        return int(r.info("commandstats").get("cmdstat_waitaof", {}).get("calls", 0))
    c = PulsarTxnClient(broker.service_url, f"{server.url}?durability=waitaof",
                        namespace="aof", sweeper=False)
    try:
        txn = c.new_transaction()
        before = waits()
        assert c.coordinator.commit(txn.id).state is TxnState.COMMITTED
        assert waits() == before + 1
        unconfirmed = c.new_transaction()
        r.config_set("appendonly", "no")  # no fsync can be confirmed now
        with pytest.raises(PulsarTxnError):
            c.coordinator.commit(unconfirmed.id)
        r.config_set("appendonly", "yes")
        incrs = int(r.info("commandstats").get("cmdstat_incrby", {}).get("calls", 0))
        assert c.coordinator.commit(unconfirmed.id).state is TxnState.COMMITTED
        assert waits() >= before + 3
        # the repeated end wrote nothing itself: its WAITAOF follows a write of its own,
        # which the AOF orders after the earlier decision
        assert int(r.info("commandstats")["cmdstat_incrby"]["calls"]) == incrs + 1
    finally:
        c.close()
        server.stop()


def _lost_id_reused_scenario(broker, tmp_path, topic_name, namespace: str,
                             before_first_use: bool) -> None:
    """A saved state is started twice. The first start hands out an id to a transaction
    that appends an entry and is then lost with that start (never committed). The second
    start must not hand out that id again: if it did, the new transaction's commit and
    collection would make the lost one's entry look committed to every fresh reader."""
    from pulsar_txn.client import PulsarTxnClient
    from pulsar_txn.metastore import RedisMetadataStore

    server = RedisServer(tmp_path / "redis", appendfsync="always").start()
    clients = []

    def client():
        c = PulsarTxnClient(broker.service_url, server.url, namespace=namespace,
                            partitions=1, sweeper=False)  # one partition: every id collides
        clients.append(c)
        return c

    def close_all():
        for c in clients:
            c.close()
        clients.clear()

    try:
        t = topic_name()
        if before_first_use:  # the namespace exists, its partition never handed out an id
            RedisMetadataStore(server.url, namespace=namespace, partitions=1).close()
        else:
            client().new_transaction().commit()
        backup = _copy_now(server, tmp_path / "backup")
        close_all()
        _restore_earlier_copy(server, backup)          # first start of the saved state
        c1 = client()
        lost = c1.new_transaction()
        c1.create_producer(t).send(b"never-committed", txn=lost)
        close_all()
        _restore_earlier_copy(server, backup)          # the same saved state, again
        c2 = client()
        txn = c2.new_transaction()
        c2.create_producer(t).send(b"committed", txn=txn)
        txn.commit()
        c2.coordinator.sweep_materialize()
        c2.coordinator.sweep_gc(retention_ms=0)        # the new txn is collected
        reused = txn.id == lost.id
        assert values(client().create_reader(t), idle_ms=2000) == [b"committed"]
        assert not reused, f"{lost.id} was handed out twice"
    finally:
        close_all()
        server.stop()


def test_txn_id_never_reused_when_the_same_backup_is_restored_twice(broker, tmp_path,
                                                                     topic_name):
    """DESIGN §3: an id is never handed out twice, whatever restores happen; here a
    backup restored twice (or a crash loop after a restore)."""
    _lost_id_reused_scenario(broker, tmp_path, topic_name, "twice", before_first_use=False)


def test_txn_id_never_reused_when_the_lost_state_held_a_partitions_first_ids(
        broker, tmp_path, topic_name):
    """The same, with a backup taken before the partition handed out its first id: the
    lost state held the partition's first ids, and nothing of them survived."""
    _lost_id_reused_scenario(broker, tmp_path, topic_name, "firsts", before_first_use=True)


def test_waitaof_reader_never_delivers_a_decision_a_host_crash_can_lose(broker, tmp_path,
                                                                         topic_name):
    """durability=waitaof: the commit CAS is visible to every reader at once, and its
    fsync follows (at most a second later under `appendfsync everysec`). A reader of
    this mode delivers a transaction's entries only once its decision is fsynced, so a
    crash of the primary's host can never take back what it showed: a replay after the
    crash starts with everything delivered before it (invariant 3). The window is made
    deterministic: the AOF is switched off before the commit, so the decision is never
    fsynced, and the host crash (a kill, then a start on the same directory) loses it.
    A reader in `relaxed` mode shows what the weaker mode allows: it delivers the entry."""
    import time

    import pytest
    import redis

    from pulsar_txn.client import PulsarTxnClient
    from pulsar_txn.errors import PulsarTxnError

    server = RedisServer(tmp_path / "redis", appendfsync="everysec").start()
    clients = []

    def client(mode: str):
        c = PulsarTxnClient(broker.service_url, f"{server.url}?durability={mode}",
                            namespace="fsync", sweeper=False)
        clients.append(c)
        return c

    try:
        writer = client("waitaof")
        t = topic_name()
        p = writer.create_producer(t)
        txn = writer.new_transaction(timeout_ms=3000)
        p.send(b"decided-never-fsynced", txn=txn)
        p.send(b"plain")
        readers = {mode: client(mode).create_reader(t) for mode in ("waitaof", "relaxed")}
        redis.Redis.from_url(server.url).config_set("appendonly", "no")
        with pytest.raises(PulsarTxnError):  # the committer is told: not confirmed
            writer.coordinator.commit(txn.id)
        assert writer.store.get_header(txn.id).state is TxnState.COMMITTED  # visible
        delivered = {mode: values(r, idle_ms=1500) for mode, r in readers.items()}
        server.kill()   # the host crash: what was never fsynced is gone
        server.start()  # the AOF is on again (the server's own configuration)
        after = client("waitaof")
        assert after.store.get_header(txn.id).state is TxnState.OPEN  # the decision is lost
        time.sleep(3.1)
        assert after.coordinator.sweep_timeouts() == [txn.id]  # and it ends ABORTED
        replay = values(after.create_reader(t), idle_ms=1500)
        assert replay == [b"plain"]
        assert delivered["relaxed"] == [b"decided-never-fsynced", b"plain"]  # weaker mode
        assert replay[:len(delivered["waitaof"])] == delivered["waitaof"], (
            f"a waitaof reader delivered {delivered['waitaof']}, a crash then lost the "
            f"decision; a replay reads {replay}")
        # and a decision whose fsync is confirmed is delivered
        again = after.new_transaction()
        after.create_producer(t).send(b"fsynced", txn=again)
        again.commit()
        assert values(client("waitaof").create_reader(t), idle_ms=1500) == [b"plain",
                                                                            b"fsynced"]
    finally:
        for c in clients:
            c.close()
        server.stop()


def test_waitaof_consumer_never_applies_an_ack_a_host_crash_can_lose(broker, tmp_path,
                                                                     topic_name):
    """durability=waitaof, the ack side of the reader's rule: a committed transactional
    ack is applied to the subscription only once its decision is fsynced. Applied
    earlier, a host crash that loses the decision (it comes back OPEN and times out
    ABORTED) would leave the message acked on the broker while its transaction's
    output never shows: consumed, and lost. Same deterministic window as the reader's
    test (the AOF off before the commit)."""
    import time

    import pytest
    import redis

    from pulsar_txn.client import PulsarTxnClient, read_all
    from pulsar_txn.errors import PulsarTxnError

    server = RedisServer(tmp_path / "redis", appendfsync="everysec").start()
    clients = []

    def client():
        c = PulsarTxnClient(broker.service_url, f"{server.url}?durability=waitaof",
                            namespace="fsync-acks", sweeper=False, create_namespace=True)
        clients.append(c)
        return c

    try:
        t = topic_name()
        consumer_side = client()
        consumer_side.create_producer(t).send(b"m0")
        c = consumer_side.subscribe(t, "sub")
        m = c.receive(5000)
        txn = consumer_side.new_transaction(timeout_ms=3000)
        c.acknowledge(m, txn=txn)
        redis.Redis.from_url(server.url).config_set("appendonly", "no")
        with pytest.raises(PulsarTxnError):  # decided elsewhere, never confirmed
            client().coordinator.commit(txn.id)
        # the consumer's process hears the end (its event, and a resync's recovery)
        c.acks.on_end(txn.id, TxnState.COMMITTED)
        c.acks.recover()
        c.close()  # flushes whatever acks it handed to pulsar-client
        server.kill()   # the host crash: the decision is gone
        server.start()
        after = client()
        assert after.store.get_header(txn.id).state is TxnState.OPEN
        time.sleep(3.1)
        assert after.coordinator.sweep_timeouts() == [txn.id]  # ABORTED now
        again = after.subscribe(t, "sub")
        got = list(read_all(again, 2000))
        assert [x.value for x in got] == [b"m0"], (
            "the message was acked under a decision the crash lost")
        with after.transaction() as ok:  # a confirmed commit is applied as usual
            again.acknowledge(got[0], txn=ok)
        again.close()
        assert list(read_all(client().subscribe(t, "sub"), 2000)) == []
    finally:
        for x in clients:
            x.close()
        server.stop()


def test_a_server_clock_behind_the_handed_out_ids_is_named_not_waited_out(make_client):
    """Ids follow the server's clock (none is reused after a restore); a clock that went
    back (an NTP step, a restore onto a lagging host) stops begins with an error naming
    metastore.url, instead of every begin waiting silently for the clock."""
    import time

    import pytest

    from pulsar_txn.errors import MetastoreError

    client = make_client(sweeper=False)
    client.new_transaction().abort()
    store, r = client.store, client.store.r
    now_s, now_us = r.time()
    for p in range(store.partitions):
        r.set(store.keys.seq(p), now_s * 1_000_000 + now_us + 30_000_000)
    store._seq_blocks.clear()
    t0 = time.monotonic()
    with pytest.raises(MetastoreError, match="metastore.url") as err:
        client.new_transaction()
    assert "clock" in str(err.value) and time.monotonic() - t0 < 5
