"""The server process a Redis store talks to, and the new starts it meets.

A restart of the server may come back from an earlier copy of its data (a restore, a
host crash under a weaker fsync mode, a failover to a lagging replica) and lose
decisions. The watch's RESYNC says so, but on its own connection and maybe later
than a reader's query; so each new connection of the store asks which server process
it reached, and one not met since the store opened counts in ``server_starts``
before that connection's first command answers (TransactionBuffer drops its cached
outcomes past one).
"""

from __future__ import annotations

import threading

import redis

from pulsar_txn.records import WIRE_THREE

from .keys import Keys


class RedisServerStarts:
    """Mixin of RedisMetadataStore (its ``r``, ``cluster``)."""

    r: redis.Redis
    cluster: bool
    keys: Keys
    deployment: str
    partitions: int
    wire_format: int
    run_id: str  # the server process(es) when opened (server_run_id)
    server_starts: int
    _runs: set[str]
    _runs_lock: threading.Lock
    _opened: bool

    def still_current(self) -> bool:
        """Whether the server still holds this namespace as it was opened: the same
        deployment id and partitions, and the same server process. A process that keeps
        a store for later jobs (a Spark worker) asks before each reuse; a wiped or
        replaced metastore at the same URL, or a restarted server, needs a fresh open
        (deployment id, partitions, persistence check), never the remembered ones."""
        try:
            dep, deployment, partitions, wire = self.r.hmget(
                Keys(self.keys.ns, 1).config(), "dep", "deployment", "partitions", "wire")
            return ((dep or deployment) == self.deployment and partitions is not None
                    and int(partitions) == self.partitions
                    and int(wire or WIRE_THREE) == self.wire_format
                    and self.server_run_id() == self.run_id)
        except (redis.RedisError, ValueError):
            return False

    def count_server_starts(self) -> None:
        """Before the first connection: the starts met while opening are the first."""
        self.server_starts = 0
        self._runs = set()
        self._runs_lock = threading.Lock()
        self._opened = False

    def opened_on_servers(self, run_ids: str) -> None:
        """Opened: from here a server process not met yet is a new start."""
        with self._runs_lock:
            self.run_id = run_ids
            self._runs.update(run_ids.split(","))
            self._opened = True

    def connect_hook(self, conn) -> None:
        """redis-py's connect hook (single server): its own handshake, then ours. The
        handshake runs without redis-py's health check, as redis-py's own connect does
        (a check that fails reconnects, and reconnecting calls this hook again)."""
        handshake = getattr(conn, "on_connect_check_health", None)
        if handshake is not None:
            handshake(check_health=False)
        else:  # redis-py < 6
            conn.on_connect()
        self.met_server(conn)

    def met_server(self, conn) -> None:
        """Each new connection asks which server process it reached. One this store has
        not met since it opened is a new start (a restart, maybe on an earlier copy; a
        failover): ``server_starts`` counts it before the connection's first command
        answers, so no answer of the new start meets outcomes cached before it."""
        run, role = _info_field(conn, "server", "run_id"), _info_field(conn, "replication", "role")
        if role not in ("master", ""):
            # a replica (a cluster's slot refresh, a seed): not a server the store's
            # commands run on; remembered, it would hide its later promotion (a failover,
            # the lossy case), so it is met again as a primary
            return
        with self._runs_lock:
            if run and run not in self._runs:
                self._runs.add(run)
                if self._opened:
                    self.server_starts += 1

    def server_run_id(self) -> str:
        """The server process(es): on a cluster, every primary's (a failover changes it)."""
        if self.cluster:
            return ",".join(sorted(str(self.r.info("server", target_nodes=n).get("run_id", ""))
                                   for n in self.r.get_primaries()))
        return str(self.r.info("server").get("run_id", ""))



def _info_field(conn, section: str, field: str) -> str:
    """One field of ``INFO <section>`` on a connection being opened (no health check:
    a failed one would reconnect, and reconnecting runs the connect hook again)."""
    conn.send_command("INFO", section, check_health=False)
    info = conn.read_response()
    if isinstance(info, bytes):
        info = info.decode()
    return next((line.partition(":")[2].strip() for line in str(info).splitlines()
                 if line.startswith(f"{field}:")), "")
