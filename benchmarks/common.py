"""Shared pieces of the benchmarks (baselines measured the same way everywhere)."""

from __future__ import annotations

import os
import sys
import time

import pulsar

from pulsar_txn.client import quiet_logger


def machine() -> str:
    """Where a result was measured (recorded with it in docs/bench-results)."""
    import platform

    return (f"{platform.machine()} {os.cpu_count()} cores, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")


def plain_read(service_url: str, topic: str, n: int) -> float:
    """Seconds for a plain pulsar-client Reader to read n messages (payload + id)."""
    c = pulsar.Client(service_url, logger=quiet_logger())
    r = c.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=2000)
    t0 = time.perf_counter()
    got, last = 0, None
    while got < n:
        m = r.read_next(10_000)
        mid = m.message_id()
        key = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
        if last is not None and key <= last:
            continue  # pulsar-lite redelivers on unbatched topics
        last = key
        m.data()
        got += 1
    dt = time.perf_counter() - t0
    r.close()
    c.close()
    return dt


def local_spark():
    """A local[2] session like the tests' (real Spark, loopback only)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


ROLES = (("pulsar-lite", "broker"), ("PulsarStandaloneStarter", "broker"),
         ("org.apache.pulsar", "broker"), ("redis-server", "redis"),
         ("valkey-server", "redis"), ("SparkSubmit", "spark-jvm"),
         ("pyspark.daemon", "python-workers"), ("pyspark.worker", "python-workers"),
         # the driver side's Python (source runner: latestOffset, probes; sink commit)
         ("pyspark.sql.", "python-workers"))


def cpu_by_role() -> dict[str, float]:
    """CPU seconds used so far by each process of the machine, summed by its role here:
    the broker, Redis, Spark's JVM, its Python workers, this process ("bench": the
    driver's Python, the feeders and watchers) and everything else ("other": what the
    machine runs besides the benchmark). Two samples' difference shows which of them
    grows when a trend appears (bench_pipeline/bench_soak)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # exited meanwhile
        # utime + stime, and cutime + cstime: what its reaped children used (a Python
        # worker that exits moves to its parent's count, not out of the total)
        used = sum(int(x) for x in fields[11:15]) / tick
        role = "bench" if int(d) == me else next(
            (r for needle, r in ROLES if needle in cmd), "other")
        out[role] = out.get(role, 0.0) + used
    return out
