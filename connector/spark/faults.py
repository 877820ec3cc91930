"""Fault injection for the sink's crash tests (option ``sink.fault``; never set in
production).

The exactly-once claims are about crashes at precise points (between the commit CAS
and Spark's commit log, after a task wrote but before its attempt reported), which
no external kill can hit reliably. So the sink consults this module at those points;
what a fault does (SIGKILL the driver JVM, fail or slow an attempt) lives here, out
of the paths under test.

``sink.fault`` is a comma list of ``<kind>:<batchId>[:<arg>]``: ``crash-before-commit``,
``crash-after-commit``, ``fail-first-attempt``, ``slow-partition0:<batchId>:<ms>``.
"""

from __future__ import annotations

import logging
import os
import signal
import time

from .options import SinkOptions

log = logging.getLogger("pulsar_txn.spark.sink")  # the name users configure: kept


def kill_driver(reason: str) -> None:
    """SIGKILL the Spark driver JVM (the Python worker's java ancestor): nothing of the
    driver may run after the crash point, not even its shutdown hooks."""
    log.warning("fault injection: killing the Spark driver (%s)", reason)
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
        if b"java" in cmd.split(b"\0")[0]:
            os.kill(pid, signal.SIGKILL)
            os._exit(137)
        pid = parent
    os._exit(137)


def fault(opts: SinkOptions, kind: str, batch_id: int) -> bool:
    for spec in filter(None, opts.fault.split(",")):
        name, _, arg = spec.partition(":")
        if name == kind and arg.split(":")[0] == str(batch_id):
            return True
    return False


def fault_arg(opts: SinkOptions, kind: str, batch_id: int) -> str | None:
    for spec in filter(None, opts.fault.split(",")):
        parts = spec.split(":")
        if parts[0] == kind and len(parts) > 2 and parts[1] == str(batch_id):
            return parts[2]
    return None


def at_commit(opts: SinkOptions, when: str, batch_id: int) -> None:
    """``when``: "before" the commit CAS (tasks wrote, nothing decided) or "after" it
    (decided, but Spark's commit log not written): the two crashes a replay must heal."""
    if fault(opts, f"crash-{when}-commit", batch_id):
        kill_driver(f"{when} commit of batch {batch_id}")


def after_task_write(opts: SinkOptions, batch_id: int, ctx) -> None:
    """A task attempt that wrote its rows and then fails (its retry must win), or a
    first partition slow enough for a speculative copy to start."""
    if fault(opts, "fail-first-attempt", batch_id) and ctx.attemptNumber() == 0:
        raise RuntimeError(f"fault injection: attempt 0 of batch {batch_id} fails after "
                           "writing")
    slow = fault_arg(opts, "slow-partition0", batch_id)
    if slow and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
        time.sleep(int(slow) / 1000)
