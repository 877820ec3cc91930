"""DESIGN §7: with AOF + appendfsync always, a Redis crash loses no committed decision."""

from __future__ import annotations

from helpers import values

from pulsar_txn.harness.redis_server import RedisServer
from pulsar_txn.state import TxnState


def test_redis_crash_between_commit_and_read_keeps_the_decision(broker, tmp_path, topic_name):
    from pulsar_txn.client import PulsarTxnClient

    server = RedisServer(tmp_path / "redis", appendfsync="always").start()
    try:
        client = PulsarTxnClient(broker.service_url, server.url, namespace="dur")
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
        assert values(client.create_reader(t)) == [b"d0", b"d1", b"d2"]
        client.close()
    finally:
        server.stop()
