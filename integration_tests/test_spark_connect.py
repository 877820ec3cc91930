"""Spark Connect: the format works from a Connect client session (batch write, batch
read, and a streaming query), on a local Connect server started by PySpark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

# slow: a Connect server's start costs ~30 s per broker, and the default run was at 24 of
# its 25 minutes; .ci/run's slow stage runs it on the reference broker
pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).parent / "spark_jobs" / "connect_job.py"


def test_format_writes_reads_and_streams_through_spark_connect(broker, redis_server,
                                                               namespace):
    topic = f"persistent://public/default/connect-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run([sys.executable, str(JOB), "--service-url", broker.service_url,
                           "--metastore-url", redis_server.url, "--namespace", namespace,
                           "--topic", topic], capture_output=True, text=True, timeout=400,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "connect" in out["connect"], out  # a Connect client session, not classic
    want = sorted(f"v{i}" for i in range(20))
    assert out["read"] == want
    assert out["streamed"] == want
