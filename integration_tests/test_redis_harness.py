"""The harness's Redis server survives the port race of a free-port pick: the port is
free when picked, then released, and another process's connection may take it before
the server binds (a CI run lost a Redis Cluster node to "Address already in use").

A real Redis server; the race is made certain by holding the picked port.
"""

from __future__ import annotations

import socket

import redis

from pulsar_txn.harness import redis_server
from pulsar_txn.harness.redis_server import RedisServer


def test_a_port_taken_before_the_server_binds_is_replaced_by_another(tmp_path, monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # as an outgoing connection holds its local port
    picks = [taken.getsockname()[1]]  # the first pick is the port another process holds
    monkeypatch.setattr(redis_server, "free_port",
                        lambda real=redis_server.free_port: picks.pop() if picks else real())
    server = RedisServer(tmp_path / "redis")
    try:
        server.start()
        assert server.port != taken.getsockname()[1]
        assert redis.Redis.from_url(server.url).ping()
    finally:
        server.stop()
        taken.close()


def test_a_cluster_whose_node_cannot_bind_its_bus_port_is_started_again_on_new_ports(
        tmp_path):
    """A CI run lost a whole stage to a Redis Cluster that never formed. Made certain
    here: another process holds a node's cluster-bus port, so that node cannot start."""
    from pulsar_txn.harness.redis_cluster import RedisClusterHarness

    cluster = RedisClusterHarness(tmp_path / "cluster", primaries=3)
    held = socket.socket()
    held.bind(("127.0.0.1", cluster.bus_ports[1]))
    held.listen()
    try:
        cluster.start()
        assert held.getsockname()[1] not in cluster.bus_ports
        client = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        for i in range(20):  # keys in every primary's slots
            client.set(f"k{i}", i)
        assert [int(client.get(f"k{i}")) for i in range(20)] == list(range(20))
        client.close()
    finally:
        cluster.stop()
        held.close()
