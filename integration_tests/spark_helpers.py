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
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)


class Observer(threading.Thread):
    """A READ_COMMITTED reader that records everything it is shown, while a job runs."""

    def __init__(self, client, topic) -> None:
        super().__init__(daemon=True)
        self.reader = client.create_reader(topic)
        self.seen: Counter = Counter()
        self._halt = threading.Event()

    def run(self) -> None:
        from pulsar_txn.errors import ReadTimeout

        while not self._halt.is_set():
            try:
                self.seen[self.reader.read_next(200).value] += 1
            except ReadTimeout:
                continue

    def finish(self, idle_ms: int = 1500) -> Counter:
        from pulsar_txn.client import read_all

        self._halt.set()
        self.join(5)
        for m in read_all(self.reader, idle_ms):
            self.seen[m.value] += 1
        return self.seen
