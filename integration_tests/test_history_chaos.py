"""The generated workload against real services, under injected faults, checked by the
history checker (tests/history): a bounded, seeded run.

Processes: this test's clients send under transactions to two topics (commit or abort,
keys, plain sends mixed in), feed an input topic (one message an entry, or batched:
several in one entry) and read with READ_COMMITTED reader sessions; worker processes
(tests/history/worker.py) consume the input and, per message, send its transform to an
output topic and ack the input in one transaction. Faults, at seeded random steps:
SIGKILL of a worker (restarted), a Redis restart (SIGKILL, AOF with appendfsync always:
nothing acknowledged may be lost), a broker restart, a cut of the workers' connections
to Redis for up to 2 s (a TCP proxy, harness/proxy.py), a topic unload (the reference
broker), and a restore of the Redis data
directory from a copy taken earlier in the run (decisions since may be lost: they
become unknown, and what was seen of them is set aside; see tests/history/checker.py;
``PULSAR_TXN_HISTORY_RESTORES=0`` leaves restores out). A plain producer also writes
the protocol's property in hostile forms, which must never be delivered.
At the end, open transactions time out, a fresh consumer recovers and drains the
subscription, a plain consumer lists what is left of the one-message entries, fresh
readers read every topic to its end, and the checker must find 0 anomalies in the
merged history.

Replay a failure with ``PULSAR_TXN_HISTORY_SEED=<the printed seed>``; the size is
``PULSAR_TXN_HISTORY_STEPS`` (default 150).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pulsar
import pytest

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from helpers import copy_data_dir, restore_data_dir  # noqa: E402
from history import check  # noqa: E402
from history.checker import explain  # noqa: E402
from history.model import History  # noqa: E402
from history.worker import UNCERTAIN  # noqa: E402
from history.workload import HOSTILE, Process, hostile_properties  # noqa: E402

from pulsar_txn.admin import admin_request, admin_topic_path  # noqa: E402
from pulsar_txn.errors import AdminError  # noqa: E402
from pulsar_txn.harness.proxy import TcpProxy  # noqa: E402

pytestmark = [pytest.mark.slow]

STEPS = int(os.environ.get("PULSAR_TXN_HISTORY_STEPS", "150"))
SUB = "hist"
WORKER_START_S = 120
# Restores of the Redis data directory are among the faults (``=0`` leaves them out,
# e.g. to tell whether an anomaly needs one)
RESTORES = os.environ.get("PULSAR_TXN_HISTORY_RESTORES", "1") == "1"
# A Spark streaming query among the processes, its driver and executors killed among
# the faults: "auto" runs it on the reference broker (a standalone Spark cluster costs
# a minute of CI), "1" on every broker, "0" nowhere
SPARK = os.environ.get("PULSAR_TXN_HISTORY_SPARK", "auto")
JOB = Path(__file__).parent / "spark_jobs" / "pipeline_job.py"


class SparkPipeline:
    """The run's streaming query: pulsar-txn source (READ_COMMITTED) on one of the run's
    topics, each row's value tagged with its message id, pulsar-txn sink (exactly once)
    to a topic of its own; on a standalone Spark cluster, so that an executor JVM can be
    killed as well as the driver. At the end a last run drains the source
    (``availableNow``), and the output, mapped back onto the source, is recorded as one
    reader session that read the source to its end: every committed value exactly
    once, nothing else (the checker's usual read rules)."""

    def __init__(self, broker, redis_url: str, namespace: str, src: str, dst: str,
                 tmp: Path) -> None:
        from spark_helpers import SparkCluster

        self.argv = [sys.executable, str(JOB), "--source", src, "--sink", dst,
                     "--checkpoint", str(tmp / "spark-ckpt"), "--service-url",
                     broker.service_url, "--metastore-url", redis_url, "--namespace",
                     namespace, "--max-records", "50", "--tag"]
        self.src, self.dst = src, dst
        self.log = tmp / "spark-driver.log"  # every run's stderr: why a run gave up
        self.cluster = SparkCluster(tmp / "spark", workers=1).start()
        self.proc: subprocess.Popen | None = None
        self.runs = 0

    def start(self, trigger: str = "continuous") -> None:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        with open(self.log, "a") as err:
            err.write(f"---- run {self.runs + 1} ({trigger})\n")
            err.flush()
            self.proc = subprocess.Popen(
                [*self.argv, "--master", self.cluster.url, "--trigger", trigger], env=env,
                stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        self.runs += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill_driver(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(30)

    def kill_executor(self) -> bool:
        """SIGKILL the query's executor JVM, once one runs (a driver just restarted
        takes seconds to get its executor)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.cluster.kill_executor() is not None:
                return True
            if not self.alive():
                return False
            time.sleep(0.5)
        return False

    def drain(self) -> None:
        """Stop the running query (a kill: its checkpoint decides) and read what is left."""
        self.kill_driver()
        for _ in range(3):  # a run that gave up (the broker was still coming back) again
            self.start("available-now")
            out, _ = self.proc.communicate(timeout=600)
            if "PIPELINE-DONE" in out:
                return
        raise AssertionError("the Spark query never drained its source; its runs' "
                             f"stderr: {self.log}\n" + self.log.read_text()[-3000:])

    def record(self, h: History, client) -> int:
        """The output, mapped back onto the source, as one complete reader session, in
        the source's order. What that checks: every committed value exactly once, no
        aborted, losing-writer, hostile or unknown value, all of a transaction or
        none. Not open-read: when each row was read is not known (the session is
        recorded at the end), so a row of a transaction read while it was OPEN that
        later committed passes here (the source's own tests check that gate)."""
        from pulsar_txn.client import read_all

        values = []
        for m in read_all(client.create_reader(self.dst), 2000):
            value, _, mid = m.value.decode().rpartition("@")
            values.append((tuple(int(x) for x in mid.split(":")), value))
        op = h.invoke("spark", "read", topic=self.src, session="spark-query", start="earliest")
        h.ok(op, values=sorted(values), complete=True)
        return len(values)

    def stop(self) -> None:
        self.kill_driver()
        self.cluster.stop()


def hostile_send(h: History, broker, topic: str, dep: str, form: str, step: int) -> None:
    """A plain producer writes the protocol's property (issue 26 hole 9): recorded as a
    send of a "transaction" that never commits, so never to be delivered."""
    from pulsar_txn.client import quiet_logger

    value = f"hostile-{form}-{step}"
    op = h.invoke("hostile", "send", topic=topic, value=value, key=None,
                  txn=f"hostile:{value}", writer="w", row=None)
    plain = pulsar.Client(broker.service_url, logger=quiet_logger())
    try:
        mid = plain.create_producer(topic, batching_enabled=False).send(
            value.encode(), properties=hostile_properties(form, dep))
        h.ok(op, position=(mid.ledger_id(), mid.entry_id(), mid.batch_index()))
    except pulsar.PulsarException as e:  # a broker restart in progress: stored or not
        h.unknown(op, f"{type(e).__name__}: {e}")
    finally:
        plain.close()


class Worker:
    """A consume-transform-produce worker process and its history file."""

    def __init__(self, tmp: Path, n: int, argv: list[str]) -> None:
        self.n = n
        self.history = tmp / f"worker-{n}.jsonl"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "history.worker", *argv, "--history", str(self.history),
             "--name", f"w{n}", "--seed", str(n)],
            cwd=TESTS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        seen: list[str] = []
        done = threading.Event()

        def pump() -> None:
            for line in self.proc.stdout:  # pulsar-client may log a retry first
                seen.append(line)
                if "WORKER-READY" in line:
                    break
            done.set()

        threading.Thread(target=pump, daemon=True).start()
        # bounded: a worker stuck on its way up fails the run with its stack, never
        # hangs CI (its subscribe retries for 12 s at most)
        if not done.wait(WORKER_START_S) and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGUSR1)  # faulthandler: its stack to stderr
            time.sleep(1)
            self.kill()
        if not any("WORKER-READY" in line for line in seen):
            raise AssertionError(f"worker {n} did not start within {WORKER_START_S} s: "
                                 f"{''.join(seen)[-2000:]}" + self.proc.stderr.read()[-5000:])

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def finish(self, timeout: float) -> None:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        assert self.proc.returncode == 0, err[-3000:]

    def records(self) -> list[dict]:
        if not self.history.exists():
            return []
        return [json.loads(line) for line in self.history.read_text().splitlines() if line]


def test_generated_history_under_faults_shows_no_anomaly(broker, tmp_path, topic_name):
    from pulsar_txn.client import PulsarTxnClient, quiet_logger
    from pulsar_txn.harness.redis_server import RedisServer

    seed = int(os.environ.get("PULSAR_TXN_HISTORY_SEED") or random.randrange(2**32))
    print(f"\nhistory chaos: seed {seed} (PULSAR_TXN_HISTORY_SEED={seed} replays it)")
    rnd = random.Random(seed)
    redis = RedisServer(tmp_path / "redis").start()  # our own: this test restarts it
    namespace = f"hist{seed % 10_000}"
    topics = [topic_name("hist-a"), topic_name("hist-b")]
    src, dst = topic_name("hist-in"), topic_name("hist-out")
    h = History(time.monotonic_ns)
    clients = []

    def client(**kw):
        c = PulsarTxnClient(broker.service_url, redis.url, namespace=namespace, **kw)
        clients.append(c)
        return c

    main = Process("p0", client(sweep_interval_s=0.5), h, UNCERTAIN)
    main.read_timeout_ms = 200
    main.begin(5_000)  # creates the namespace before any reader opens it
    main.abort(next(iter(main.txns)))
    feeder = Process("feeder", main.client, h, UNCERTAIN)
    # Failover: one worker at a time; Shared: two at once (a message one holds may be
    # handed to the other, whose ack must conflict)
    kind = rnd.choice(["Failover", "Shared"])
    ctype = getattr(pulsar.ConsumerType, kind)
    # the workers reach Redis through a proxy the harness cuts (the network, not a
    # process, fails: both ends live on)
    proxy = TcpProxy(redis.port)
    proxy.start()
    cut_url = redis.url.replace(f":{redis.port}/", f":{proxy.port}/")
    argv = ["--service-url", broker.service_url, "--metastore-url", cut_url,
            "--namespace", namespace, "--input", src, "--subscription", SUB,
            "--output", dst, "--type", kind]
    print(f"history chaos: a {kind} subscription", flush=True)
    for _ in range(20):
        feeder.send(src)
    workers: list[Worker] = []

    def top_up() -> None:
        """As many running workers as the subscription type calls for, each started once:
        one that then finds nothing to consume exits by itself (--idle-s) and is not
        replaced in a loop. The loop never ended under CI's load: starting a worker took
        longer than the other's idle exit, so two were never alive at once (136 workers
        started in 15 minutes, until pytest's timeout)."""
        need = (1 if kind == "Failover" else 2) - sum(w.proc.poll() is None for w in workers)
        for _ in range(max(0, need)):
            workers.append(Worker(tmp_path, len(workers), argv))

    top_up()
    faults: Counter = Counter()
    started = time.monotonic()
    spark = None
    if SPARK == "1" or (SPARK == "auto" and getattr(broker, "admin_url", "")):
        # no restores with Spark in the run: its checkpoint lives outside the metastore,
        # so a restore of the metastore loses committed output by design (the price of a
        # lossy restore, docs/durability.md), which the checker would report
        spark = SparkPipeline(broker, cut_url, namespace, topics[0],
                              topic_name("hist-spark"), tmp_path)
        spark.start()
        print("history chaos: a Spark query (a standalone cluster) reads "
              f"{topics[0]}; no restores in this run", flush=True)
    restores = RESTORES and spark is None
    try:
        for step in range(STEPS):
            r = rnd.random()
            if r < 0.3:
                label = main.begin(5_000)
                for _ in range(rnd.randint(1, 4)):
                    main.send(rnd.choice(topics), label, rnd.choice([None, "k0", "k1"]))
                if label in main.txns:
                    (main.commit if rnd.random() < 0.8 else main.abort)(label)
            elif r < 0.4:
                main.send(rnd.choice(topics), None, rnd.choice([None, "k0", "k1"]))
            elif r < 0.55:  # batched half the time: acks of one message of an entry
                if rnd.random() < 0.5:
                    feeder.send(src)
                else:
                    feeder.send_batch(src, rnd.randint(2, 6))
            elif r < 0.9:
                mine = [s for s, (t, _, _) in main.readers.items()]
                if mine and rnd.random() < 0.7:
                    main.read(main.readers[rnd.choice(mine)][0], rnd.choice(mine))
                else:
                    main.read(rnd.choice(topics))
            elif r < 0.93:  # a plain producer writes the protocol's property (hole 9)
                hostile_send(h, broker, rnd.choice(topics), main.client.store.deployment,
                             rnd.choice(HOSTILE), step)
            if step % 15 == 7:  # a backup of the metastore, for a later restore
                copy = (h.now, copy_data_dir(redis, tmp_path / f"copy-{step}"))
            if step % 15 == 14:
                fault = rnd.choice(["worker", "worker", "redis", "broker", "cut"]
                                   + (["restore"] if restores else [])
                                   + (["unload"] if getattr(broker, "admin_url", "") else [])
                                   + (["spark-driver", "spark-executor"] if spark else []))
                h.note("harness", "fault", what=fault)
                faults[fault] += 1
                print(f"history chaos: step {step}: {fault}", flush=True)
                if fault == "worker":
                    alive = [w for w in workers if w.proc.poll() is None]
                    if alive:  # one may have finished: idle longer than --idle-s
                        rnd.choice(alive).kill()
                    top_up()
                elif fault == "redis":
                    redis.restart(crash=True)
                elif fault == "restore":  # maybe the same copy again: ids never reused
                    restore_data_dir(redis, copy[1])
                    h.restore(copy[0], process="harness")
                elif fault == "cut":  # the workers' connections to Redis drop, a while
                    proxy.cut()
                    time.sleep(rnd.uniform(0.3, 2.0))
                    proxy.restore()
                elif fault == "unload":  # the broker hands the topic over (reconnects)
                    try:
                        admin_request(broker.admin_url, "PUT", admin_topic_path(
                            rnd.choice([src, dst, *topics])) + "/unload")
                    except AdminError as e:  # not created yet (nothing written to it)
                        print(f"history chaos: unload: {e}", flush=True)
                elif fault == "spark-driver":  # SIGKILL, restarted from its checkpoint
                    spark.kill_driver()
                    spark.start()
                elif fault == "spark-executor":  # the worker relaunches it
                    if not spark.kill_executor():
                        faults["spark-executor (none running)"] += 1
                else:
                    broker.restart()
            if spark is not None and not spark.alive():  # it gave up (a fault): again
                faults["spark query restarted"] += 1
                spark.start()
        top_up()  # someone drains what is left
        if spark is not None:
            spark.drain()
        for w in workers:
            if w.proc.poll() is None:
                w.finish(timeout=180)
        # every open transaction times out; the sweeper of main's client aborts it
        time.sleep(6)
        last = Process("final", client(sweeper=False), h, UNCERTAIN)
        # recovery: committed acks a kill left are applied
        last.subscribe(src, SUB, consumer_type=ctype)
        while last.receive():
            pass
        last.consumer.close()
        plain = pulsar.Client(broker.service_url, logger=quiet_logger())
        probe = plain.subscribe(src, SUB, consumer_type=ctype)
        # What is left: a message of a one-message entry on the broker's cursor itself;
        # one of a batched entry as the final consumer saw it (without batch-index acks
        # the broker keeps a partly acked entry whole, and a plain consumer gets all of
        # it again: the project's consumer must hand out exactly the unconsumed ones)
        op = h.invoke("final", "cursor", topic=last.consumer.segment, sub=SUB)
        left = {v for o in h.ops if o.f == "receive" and o.process == "final"
                for _, v in o.result.get("values", ())}
        try:
            while True:
                m = probe.receive(2000)
                if m.message_id().batch_index() < 0:
                    left.add(m.data().decode())
        except pulsar.Timeout:
            pass
        h.ok(op, remaining=sorted(left))
        probe.close()
        plain.close()
        last.read_timeout_ms = 2000
        for topic in (*topics, dst):
            last.read(topic, complete=True)
        spark_rows = spark.record(h, last.client) if spark is not None else 0
        for w in workers:
            h.merge(w.records())
        found = check(h)
        counts = h.counts()
        print(f"history chaos: seed {seed}, {time.monotonic() - started:.0f} s, operations "
              f"{dict(sorted(counts.items()))}, faults {dict(faults)}, "
              f"{len(workers)} worker runs ({kind})"
              + (f", Spark: {spark.runs} query runs, {spark_rows} rows out" if spark else "")
              + f"; {len(found)} anomalies")
        if found:
            dump = tmp_path / "history.txt"
            # with each operation's clock (invoked..completed): a restore's copy and the
            # operations around it are compared by these
            dump.write_text("\n".join(f"{op.invoked}..{op.completed} {op.describe()}"
                                       for op in h.ops))
            print(f"history chaos: the whole history is in {dump}")
        assert not found, f"seed {seed}\n{explain(found)}"
        print("history chaos: 0 anomalies")
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.kill()
        for c in clients:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - a client cut by the last restart
                pass
        proxy.close()
        if spark is not None:
            spark.stop()
        redis.stop()
