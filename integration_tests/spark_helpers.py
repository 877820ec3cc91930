"""Helpers for Spark integration tests: input files, job processes, committed output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

JOB = Path(__file__).parent / "spark_jobs" / "sink_job.py"


def source_df(spark, broker, redis_server, namespace, stream=True, **opts):
    """A pulsar-txn source DataFrame on the test's services (stream or batch). On
    pulsar-lite, which keeps no schema registry, the value is read as bytes without the
    bounded registry lookup each definition would otherwise wait out (2 s), unless the
    test sets either schema option itself (test_spark_schemas.py covers the lookup)."""
    if broker.kind == "lite" and not {"valueSchema", "schemaLookupTimeoutMs"} & set(opts):
        opts = {"valueSchema": "bytes", **opts}
    r = spark.readStream if stream else spark.read
    r = (r.format("pulsar-txn").option("service.url", broker.service_url)
         .option("metastore.url", redis_server.url).option("metastore.namespace", namespace))
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def write_inputs(d: Path, files: int, rows: int) -> Counter:
    d.mkdir(parents=True, exist_ok=True)
    expected = Counter()
    for f in range(files):
        with open(d / f"part-{f:03d}.json", "w") as out:
            for r in range(rows):
                i = f * rows + r
                out.write(json.dumps({"id": i, "payload": f"row-{i}"}) + "\n")
                expected[f"row-{i}".encode()] += 1
    return expected


def run_job(broker, redis_server, namespace, topic, inputs, ckpt, fault="", timeout=300,
            **kw) -> subprocess.CompletedProcess:
    args = [sys.executable, str(JOB), "--input", str(inputs), "--checkpoint", str(ckpt),
            "--topic", topic, "--service-url", broker.service_url, "--metastore-url",
            redis_server.url, "--namespace", namespace, "--fault", fault]
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        args += [flag] if v is True else [flag, str(v)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "PULSAR_TXN_LOG_LEVEL": "DEBUG"}  # the per-batch lines the tests read
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)


class Observer(threading.Thread):
    """A READ_COMMITTED reader that records everything it is shown, while a job runs."""

    def __init__(self, client, topic) -> None:
        super().__init__(daemon=True)
        self.reader = client.create_reader(topic)
        self.seen: Counter = Counter()
        self._halt = threading.Event()

    def run(self) -> None:
        from pulsar_txn.errors import PulsarTxnError, ReadTimeout

        while not self._halt.is_set():
            try:
                self.seen[self.reader.read_next(200).value] += 1
            except ReadTimeout:
                continue
            except PulsarTxnError as e:  # the metastore restarting (chaos): retry
                if not e.retriable:
                    raise
                self._halt.wait(0.2)

    def finish(self, idle_ms: int = 1500) -> Counter:
        from pulsar_txn.client import read_all

        self._halt.set()
        self.join(5)
        for m in read_all(self.reader, idle_ms):
            self.seen[m.value] += 1
        return self.seen


class SparkCluster:
    """A real standalone Spark cluster on loopback: one master, workers on distinct hosts.

    Spark launches no speculative task in ``local`` mode and never on a host that
    already runs an attempt of the task, so the speculation test needs workers on
    different hosts: 127.0.0.2 and 127.0.0.3 (loopback, this machine only).
    """

    def __init__(self, workdir: Path, workers: int = 2) -> None:
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.workdir = workdir
        self.workers = workers
        self.procs: list[subprocess.Popen] = []
        self.url = ""

    def _spawn(self, name: str, args: list[str], host: str) -> subprocess.Popen:
        env = {**os.environ, "SPARK_HOME": str(self.home), "SPARK_LOCAL_IP": host,
               "PYSPARK_PYTHON": sys.executable}
        log = open(self.workdir / f"{name}.log", "wb")
        p = subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], env=env,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def start(self, timeout: float = 90.0) -> SparkCluster:
        import time

        from pulsar_txn.harness.ports import free_port, wait_tcp

        self.workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        master = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host",
                                        "127.0.0.1", "--port", str(port), "--webui-port",
                                        str(free_port())], "127.0.0.1")
        wait_tcp(port, timeout, master, "spark master")
        self.url = f"spark://127.0.0.1:{port}"
        for i in range(self.workers):
            host = f"127.0.0.{i + 2}"
            self._spawn(f"worker{i}", ["org.apache.spark.deploy.worker.Worker", "--host", host,
                                       "--cores", "1", "--memory", "1g", "--webui-port", "0",
                                       "--work-dir", str(self.workdir / f"w{i}"), self.url],
                        host)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            logs = [(self.workdir / f"worker{i}.log").read_text(errors="replace")
                    for i in range(self.workers)]
            if all("Successfully registered with master" in t for t in logs):
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError("spark workers did not register in time")

    def kill_executor(self) -> int | None:
        """SIGKILL one executor JVM (a worker relaunches it); its pid, or None if none ran."""
        import signal

        out = subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"],
                             capture_output=True, text=True).stdout.split()
        mine = [int(p) for p in out if _cwd(int(p)).startswith(str(self.workdir))]
        if not mine:
            return None
        os.kill(mine[0], signal.SIGKILL)
        return mine[0]

    def stop(self) -> None:
        import signal

        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        self.procs = []


def _cwd(pid: int) -> str:
    """An executor runs in its worker's work dir (``<work-dir>/<app>/<id>``)."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""
