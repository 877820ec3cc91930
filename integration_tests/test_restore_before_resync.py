"""A restore of the metastore's data directory (a backup, a host crash under a weaker
fsync mode) loses the decisions taken after the copy. A client that cached one of
them must not show it again once the store came back, even before its watch's
RESYNC event arrives (DESIGN §3 "fail closed", §7): the store counts the new server
start on the reader's own connection, and no cached outcome is trusted across it.
Found by the history machine (tests/test_history_stateful.py,
test_found_a_reader_before_the_restore_is_announced_delivers_a_commit_it_lost)."""

from __future__ import annotations

import uuid

from helpers import committed, copy_data_dir, restore_data_dir, values

from pulsar_txn.client import PulsarTxnClient
from pulsar_txn.harness.redis_server import RedisServer


def test_a_reader_after_an_unannounced_restore_never_shows_a_commit_it_lost(
        broker, tmp_path, topic_name):
    redis = RedisServer(tmp_path / "redis").start()  # our own: this test restores it
    client = PulsarTxnClient(broker.service_url, redis.url,
                             namespace=f"rs{uuid.uuid4().hex[:8]}", sweeper=False)
    try:
        t = topic_name()
        committed(client, t, b"kept")
        backup = copy_data_dir(redis, tmp_path / "backup")
        committed(client, t, b"lost")  # decided after the copy
        assert values(client.create_reader(t)) == [b"kept", b"lost"]  # outcome cached
        client._watch.close()  # the RESYNC event has not arrived (yet): deaf to it
        restore_data_dir(redis, backup)
        assert values(client.create_reader(t)) == [b"kept"]
        assert client.store.server_starts == 1  # met on the reader's own connection
    finally:
        client.close()
        redis.stop()
