"""Small helpers shared by integration tests (no mocks: they drive real services)."""

from __future__ import annotations

import redis

from pulsar_txn.client import Reader, read_all


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
        self.r = redis.Redis.from_url(url, decode_responses=True)
        self._write_cmds: dict[str, bool] = {}

    def snapshot(self) -> dict[str, int]:
        stats = self.r.info("commandstats")
        return {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}

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
