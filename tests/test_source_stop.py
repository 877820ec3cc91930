"""Spark stops a streaming query by terminating the Python process of its stream reader,
and it sends SIGTERM twice: ``PythonWorkerFactory.stopWorker`` destroys the worker's
process, then ``PythonWorkerFactory.stop`` destroys every simple worker it still lists,
the same one included (pyspark 4.3, read from its bytecode). The reader's ``stop()``
(which removes the planner's probe subscriptions) must survive the second signal, and
a stop that hangs must still end the process.

No Spark here: a real child process that names itself Spark's source runner, installs
the hook, and runs a slow ``finally`` as the runner's ``reader.stop()`` would.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import sys, time, types
import __main__
__main__.__spec__ = types.SimpleNamespace(
    name="pyspark.sql.streaming.python_streaming_source_runner")
from pulsar_txn.spark import source_reader
source_reader._STOP_GRACE_S = float(sys.argv[3])
source_reader._stop_on_terminate()
marks, stop_s = sys.argv[1], float(sys.argv[2])
try:
    open(marks + ".ready", "w").close()
    while True:
        time.sleep(0.02)
finally:
    open(marks + ".stopping", "w").close()
    time.sleep(stop_s)  # the runner's reader.stop(): probe subscriptions removed
    open(marks + ".stopped", "w").close()
"""


def _wait_for(path: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.01)


def _runner(tmp_path: Path, stop_s: float, grace_s: float) -> tuple[subprocess.Popen, Path]:
    marks = tmp_path / "runner"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(marks), str(stop_s),
                              str(grace_s)])
    _wait_for(marks.with_suffix(".ready"))
    return child, marks


def test_sparks_second_sigterm_does_not_cut_the_readers_stop_short(tmp_path):
    child, marks = _runner(tmp_path, stop_s=1.0, grace_s=30.0)
    try:
        child.send_signal(signal.SIGTERM)               # stopWorker
        _wait_for(marks.with_suffix(".stopping"))       # stop() is running
        child.send_signal(signal.SIGTERM)               # factory.stop(): the same process
        child.wait(timeout=20)
    finally:
        child.kill()
    assert marks.with_suffix(".stopped").exists(), (
        f"the second SIGTERM ended the process (exit {child.returncode}) before the "
        "reader's stop() finished: its probe subscriptions would outlive the query")


def test_a_stop_that_hangs_still_ends_the_process(tmp_path):
    child, marks = _runner(tmp_path, stop_s=3600.0, grace_s=1.0)
    try:
        child.send_signal(signal.SIGTERM)
        _wait_for(marks.with_suffix(".stopping"))
        child.send_signal(signal.SIGTERM)
        started = time.monotonic()
        child.wait(timeout=20)
        took = time.monotonic() - started
    finally:
        child.kill()
    assert not marks.with_suffix(".stopped").exists()
    assert child.returncode != 0 and took < 10, (child.returncode, took)
