"""Small helpers shared by integration tests (no mocks: they drive real services)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import redis

from pulsar_txn.client import Reader, read_all


def raw_redis(url: str, decode_responses: bool = True):
    """A plain redis-py client on the metastore's server, or on its cluster."""
    if url.startswith(("redis+cluster://", "rediss+cluster://")):
        seeds = url.split("://", 1)[1].split("/", 1)[0].rpartition("@")[2]
        nodes = [redis.cluster.ClusterNode(h, int(p))
                 for h, _, p in (s.rpartition(":") for s in seeds.split(","))]
        return redis.cluster.RedisCluster(startup_nodes=nodes,
                                          decode_responses=decode_responses)
    return redis.Redis.from_url(url, decode_responses=decode_responses)


def values(reader: Reader, idle_ms: int = 400) -> list[bytes]:
    return [m.value for m in read_all(reader, idle_ms)]


def raw_entries(plain_client, topic: str, idle_ms: int = 500) -> list:
    """Every message in the topic as a plain pulsar-client reader sees it (deduplicated)."""
    import pulsar

    r = plain_client.create_reader(topic, pulsar.MessageId.earliest)
    out, last = [], None
    try:
        while True:
            try:
                m = r.read_next(idle_ms)
            except pulsar.Timeout:
                return out
            mid = m.message_id()
            key = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
            if last is not None and key <= last:
                continue  # pulsar-lite redelivers on unbatched topics
            last = key
            out.append(m)
    finally:
        r.close()


class CommandCounter:
    """Counts commands the Redis server executed (server-side truth, INFO commandstats)."""

    def __init__(self, url: str) -> None:
        self.r = raw_redis(url)
        self._write_cmds: dict[str, bool] = {}

    def snapshot(self) -> dict[str, int]:
        """Summed over a cluster's primaries (each command runs on one of them)."""
        nodes = ([{"target_nodes": n} for n in self.r.get_primaries()]
                 if isinstance(self.r, redis.cluster.RedisCluster) else [{}])
        out: dict[str, int] = {}
        for target in nodes:
            for k, v in self.r.info("commandstats", **target).items():
                name = k.removeprefix("cmdstat_")
                out[name] = out.get(name, 0) + v["calls"]
        return out

    def _is_write(self, cmd: str) -> bool:
        if cmd not in self._write_cmds:
            base = cmd.split("|")[0]
            flags = str(self.r.execute_command("COMMAND", "INFO", base))
            self._write_cmds[cmd] = base in ("evalsha", "eval", "fcall") or "write" in flags
        return self._write_cmds[cmd]

    def delta(self, before: dict[str, int]) -> tuple[int, int, dict[str, int]]:
        """(writes, all commands, per-command) since ``before``; INFO itself excluded."""
        after = self.snapshot()
        d = {k: after[k] - before.get(k, 0) for k in after
             if after[k] - before.get(k, 0) and k not in ("info", "command", "command|info")}
        writes = sum(v for k, v in d.items() if self._is_write(k))
        return writes, sum(d.values()), d


def mixed_history(client, topic: str) -> list[bytes]:
    """Plain, committed, aborted and losing-writer entries; returns what must be visible."""
    p1, p2 = client.create_producer(topic), client.create_producer(topic)
    p1.send(b"plain-0")
    committed = client.new_transaction()
    p1.send(b"c-1", txn=committed)
    p2.send(b"c-2", txn=committed)
    committed.commit()
    aborted = client.new_transaction()
    p1.send(b"a-1", txn=aborted)
    aborted.abort()
    losing = client.new_transaction()
    p1.send(b"win", txn=losing)
    p2.send(b"lose", txn=losing)
    client.coordinator.commit(losing.id, winners=[p1.writer_id])
    p2.send(b"plain-1")
    return [b"plain-0", b"c-1", b"c-2", b"win", b"plain-1"]


def committed(client, topic: str, *values: bytes) -> None:
    """Write ``values`` to ``topic`` in one committed transaction."""
    producer = client.create_producer(topic)
    with client.transaction() as txn:
        for v in values:
            producer.send(v, txn=txn)
    producer.close()


def copy_data_dir(server, dest: Path) -> Path:
    """A copy of the running server's data directory, as a backup holds it."""
    raw_redis(server.url).execute_command("BGREWRITEAOF")
    time.sleep(0.5)  # the rewrite is quick on a few thousand keys; the copy follows it
    shutil.copytree(server.workdir, dest)
    return dest


def restore_data_dir(server, copy: Path) -> None:
    """A host crash under a weaker fsync mode, or a restore from a backup: the server
    comes back with an earlier state (decisions since may be lost)."""
    server.kill()
    shutil.rmtree(server.workdir)
    shutil.copytree(copy, server.workdir)
    server.start()
