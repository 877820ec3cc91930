"""durability=waitaof: a decision is reported durable only if WAITAOF confirmed the
fsync on the connection that wrote it (DESIGN §7).

WAITAOF counts the writes of its own connection. If the link drops while it waits
and the client sends it again on a new connection (one with no writes), the server
confirms at once what was never fsynced. A TCP proxy in front of a real server cuts
the connection at the first WAITAOF it sees; the end must then fail retriably (the
caller ends again, which waits for the earlier decision's fsync), never succeed.
"""

from __future__ import annotations

import pytest

from pulsar_txn.errors import MetastoreUnavailable, PulsarTxnError
from pulsar_txn.harness.proxy import TcpProxy
from pulsar_txn.harness.redis_server import RedisServer
from pulsar_txn.metastore import RedisMetadataStore
from pulsar_txn.state import TxnState


@pytest.fixture
def server(tmp_path):
    s = RedisServer(tmp_path / "redis", appendfsync="everysec").start()
    yield s
    s.stop()


def test_a_waitaof_cut_mid_wait_is_not_reported_as_fsynced(server):
    armed = [False]  # the store's open sends a WAITAOF of its own (its check)

    def first_waitaof(data: bytes) -> bool:
        return armed[0] and b"WAITAOF" in data.upper() and not proxy.dropped

    proxy = TcpProxy(server.port, drop_when=first_waitaof)
    proxy.start()
    store = RedisMetadataStore(f"redis://127.0.0.1:{proxy.port}/0?durability=waitaof",
                               namespace="wa")
    try:
        t = store.next_txn_id()
        store.create_txn(t, 60_000)
        armed[0] = True
        with pytest.raises(MetastoreUnavailable):
            store.end_txn(t, TxnState.COMMITTED, [])
        assert proxy.dropped == 1
        header, changed, _ = store.end_txn(t, TxnState.COMMITTED, [])  # ends again: waits
        assert header.state is TxnState.COMMITTED and not changed
    finally:
        store.close()
        proxy.close()


def test_a_waitaof_reader_acts_on_a_decision_only_once_it_is_fsynced(server):
    """The store's side of what readers rely on (DESIGN §7): a decision that cannot be
    confirmed fsynced is given to readers as not taken, and never collected (a
    collected id is delivered unless listed aborted); once confirmed it is marked, so
    later reads cost no wait; a committer whose WAITAOF confirmed marks it itself."""
    import redis

    from pulsar_txn.metastore.base import Collected, Materialized

    r = redis.Redis.from_url(server.url)

    def waits() -> int:
        return int(r.info("commandstats").get("cmdstat_waitaof", {}).get("calls", 0))

    store = RedisMetadataStore(f"{server.url}?durability=waitaof", namespace="rd")
    try:
        t = store.next_txn_id()
        store.create_txn(t, 60_000)
        r.config_set("appendonly", "no")  # no fsync can be confirmed now
        with pytest.raises(PulsarTxnError):  # the committer is told: not confirmed
            store.end_txn(t, TxnState.COMMITTED, [])
        assert store.materialize_txn(t) is Materialized.DONE
        assert store.get_headers([t])[t].state is TxnState.COMMITTED  # visible at once
        assert store.final_headers([t])[t].state is TxnState.OPEN     # not to readers
        assert store.gc_txn(t, 10**15) is Collected.UNFSYNCED
        r.config_set("appendonly", "yes")
        assert store.final_headers([t])[t].state is TxnState.COMMITTED
        before = waits()
        assert store.final_headers([t])[t].state is TxnState.COMMITTED  # marked: no wait
        u = store.next_txn_id()
        store.create_txn(u, 60_000)
        store.end_txn(u, TxnState.ABORTED, None)  # the committer's WAITAOF, then its mark
        assert store.final_headers([u])[u].state is TxnState.ABORTED
        assert waits() == before + 1
        assert store.gc_txn(t, 10**15) is Collected.DONE
    finally:
        store.close()


def test_a_wire_format_switch_under_waitaof_answers_only_once_fsynced(server):
    """A host crash must not undo a switch the operator was told happened (found by the
    waitaof history machine: a downgrade lost with the host, then appends in the form
    the operator switched away from)."""
    import redis

    from pulsar_txn.records import WIRE_ONE, WIRE_THREE

    r = redis.Redis.from_url(server.url)
    store = RedisMetadataStore(f"{server.url}?durability=waitaof", namespace="ws")
    try:
        r.config_set("appendonly", "no")  # no fsync can be confirmed now
        with pytest.raises(MetastoreUnavailable, match="not fsynced"):
            store.set_wire_format(WIRE_THREE)
        r.config_set("appendonly", "yes")
        store.set_wire_format(WIRE_THREE)
        store.set_wire_format(WIRE_ONE)
    finally:
        store.close()
