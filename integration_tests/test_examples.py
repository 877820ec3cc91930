"""Every example runs as it is, on the embedded services it starts itself.

Slow suite: each example starts its own services and Spark session (minutes in all);
the default run stays under its 25 minutes, and `.ci/run`'s slow stage runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs(example):
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "PULSAR_TXN_BROKER": "lite"}
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert " OK" in done.stdout
    # clients close before the services stop: no flood of connection errors at shutdown
    # (pulsar-lite's "Topic has no messages" warnings for empty topics are not that)
    noise = [ln for ln in (done.stdout + done.stderr).splitlines()
             if "Connection refused" in ln or "Failed to establish connection" in ln]
    assert noise == [], noise[:5]
