"""Broker plugin benchmark (issue 28): what READ_COMMITTED enforced by the broker costs a
plain consumer, as ratios against the same broker without it, measured in the same run.
Not a test.

    python benchmarks/bench_plugin.py [--messages 200000] [--commits 300] [--json FILE]

One Apache Pulsar 4.0.7 standalone with the plugin (harness ``start_broker(plugin=)``,
the topics it does not govern on Pulsar's own transaction buffer) and one Redis. A full
run gives the broker C2 (``-XX:TieredStopAtLevel=4``, as a production broker has; the
harness's default is C1 alone, for start-up time); ``--smoke`` keeps the default.

Throughput: the same transactional data (100 messages per transaction, all committed)
is written to a topic of a governed Pulsar namespace (public/default: gate and filter)
and to one of a namespace the plugin does not govern (public/ungoverned: Pulsar's own
transaction buffer, the filter's first test lets it by); a plain pulsar-client Reader
reads each, three times in turn, the fastest counts; the ratio is governed / ungoverned.

Commit -> visible, one transaction of one message at a time, the waiting consumer on
another process: a plain Python consumer and a plain Java consumer (Pulsar's Java client
4.0.7, benchmarks/peer's PlainPeer ``tail``) on governed topics, from the start of
pulsar-txn's commit call and from its return to the consumer's receive (wall clock, same
host); beside them, in the same run on the same broker, Pulsar v4's own transactions
(benchmarks/peer's V4Bench ``visible``: a Java reader blocked in readNext, from the
commit call) on a topic of the ungoverned namespace.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pulsar
from common import machine, plain_read

from pulsar_txn.admin import admin_request
from pulsar_txn.client import PulsarTxnClient, quiet_logger
from pulsar_txn.harness import broker_plugin
from pulsar_txn.harness.redis_server import RedisServer
from pulsar_txn.harness.services import start_broker
from pulsar_txn.harness.standalone import JVM_OPTS_ENV
from pulsar_txn.metastore import RedisMetadataStore

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "integration_tests"))
from java_peer import java_cmd  # noqa: E402 - the tests' builder of the Java peers

NS = "benchplugin"


def write(client: PulsarTxnClient, topic: str, n: int, per_txn: int = 100) -> None:
    p = client.create_producer(topic)
    payload = b"x" * 100
    for start in range(0, n, per_txn):
        with client.transaction() as t:
            for _ in range(min(per_txn, n - start)):
                p.send_async(payload, None, txn=t)
    p.close()


def percentiles(ms: list[float]) -> dict:
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return {"n": len(ms), "p50": round(statistics.median(ms), 2), "p99": round(q[98], 2),
            "max": round(max(ms), 2)}


def python_latency(client: PulsarTxnClient, plain: pulsar.Client, topic: str, warm: int,
                   commits: int) -> dict:
    """A plain Python consumer on this process: from the commit's call and return."""
    consumer = plain.subscribe(topic, "lat", initial_position=pulsar.InitialPosition.Latest)
    p = client.create_producer(topic)
    call, ret = [], []
    for i in range(warm + commits):
        t = client.new_transaction()
        p.send(f"m{i}".encode(), txn=t)
        t0 = time.perf_counter()
        t.commit()
        t1 = time.perf_counter()
        m = consumer.receive(10_000)
        t2 = time.perf_counter()
        consumer.acknowledge(m)
        assert m.data() == f"m{i}".encode()
        if i >= warm:
            call.append((t2 - t0) * 1000)
            ret.append((t2 - t1) * 1000)
    consumer.close()
    p.close()
    return {"from_commit_call_ms": percentiles(call), "from_commit_return_ms": percentiles(ret)}


def java_latency(client: PulsarTxnClient, service_url: str, topic: str, warm: int,
                 commits: int) -> dict:
    """A plain Java consumer (PlainPeer tail) stamps each arrival with the wall clock."""
    n = warm + commits
    proc = subprocess.Popen(java_cmd("PlainPeer", "tail", service_url, topic, str(n),
                                     str(60_000 + n * 10_000)),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        assert lines.get(timeout=60).strip() == "ready"
        p = client.create_producer(topic)
        call, ret = [], []
        for i in range(n):
            t = client.new_transaction()
            p.send(f"m{i}".encode(), txn=t)
            t0 = time.time_ns() // 1000
            t.commit()
            t1 = time.time_ns() // 1000
            _, payload, at = lines.get(timeout=10).split()
            assert payload == f"m{i}", payload
            if i >= warm:
                call.append((int(at) - t0) / 1000)
                ret.append((int(at) - t1) / 1000)
        p.close()
    finally:
        proc.kill()
        proc.wait()
    return {"from_commit_call_ms": percentiles(call), "from_commit_return_ms": percentiles(ret)}


def v4_latency(broker, namespace: str, warm: int, commits: int) -> dict:
    """Pulsar v4's own transactions on the same broker (V4Bench visible)."""
    cmd = java_cmd("V4Bench", "--service-url", broker.service_url, "--admin-url",
                   broker.admin_url, "--namespace", namespace, "--only", "visible",
                   "--reps", str(commits), "--warmup", str(warm), "--visible-timeout-s", "10")
    cmd[1:1] = ["-Dio.netty.tryReflectionSetAccessible=true"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    for line in done.stdout.splitlines():
        if line.startswith("PEER-RESULT "):
            res = json.loads(line[len("PEER-RESULT "):])
            vis = res.get("commit_to_visible") or {}
            if not vis.get("p50_ms") or "error" in vis or vis.get("not_visible"):
                raise RuntimeError(f"V4Bench's commit_to_visible failed: {res}")
            return {"from_commit_call_ms": vis}
    raise RuntimeError(f"V4Bench printed no result (exit {done.returncode}): "
                       f"{(done.stdout + done.stderr)[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: CI checks it runs")
    args = ap.parse_args()
    if args.smoke:
        args.messages, args.commits = 2_000, 20
    else:
        # the harness runs brokers on C1 alone (a faster start for tests); a broker in
        # production runs C2, and the filter's decoding is what C2 compiles best
        os.environ.setdefault(JVM_OPTS_ENV, "-XX:TieredStopAtLevel=4")
    out: dict = {"machine": machine(), "broker": "Apache Pulsar 4.0.7 standalone",
                 "broker_jvm_opts": os.environ.get(JVM_OPTS_ENV, "(C1 only)"),
                 "messages": args.messages, "commits": args.commits}
    with tempfile.TemporaryDirectory() as d:
        redis = RedisServer(Path(d) / "redis").start()
        RedisMetadataStore(f"{redis.url}?namespace={NS}").close()
        broker = start_broker("standalone", Path(d) / "broker", plugin=broker_plugin.Governing(
            redis.url, NS, REPO / "broker-plugin", delegate=broker_plugin.Governing.TOPIC_BUFFER))
        try:
            admin_request(broker.admin_url, "PUT", "/admin/v2/namespaces/public/ungoverned",
                          body={})
            client = PulsarTxnClient(broker.service_url, redis.url, namespace=NS)
            plain = pulsar.Client(broker.service_url, logger=quiet_logger())
            tag = uuid.uuid4().hex[:8]
            gated = f"persistent://public/default/bench-{tag}"
            free = f"persistent://public/ungoverned/bench-{tag}"
            for topic in (gated, free):
                write(client, topic, args.messages)
            secs = {}
            for name, topic in (("ungoverned", free), ("governed", gated)) * 3:
                dt = plain_read(broker.service_url, topic, args.messages)
                secs[name] = min(secs.get(name, dt), dt)
            out["throughput"] = {
                "ungoverned_msg_s": round(args.messages / secs["ungoverned"]),
                "governed_msg_s": round(args.messages / secs["governed"]),
                "ratio": round(secs["ungoverned"] / secs["governed"], 3)}
            print(json.dumps(out["throughput"]), flush=True)
            warm = max(3, args.commits // 10)
            lat = out["commit_to_visible"] = {}
            lat["python_consumer"] = python_latency(
                client, plain, f"persistent://public/default/lat-py-{tag}", warm, args.commits)
            lat["java_consumer"] = java_latency(
                client, broker.service_url, f"persistent://public/default/lat-java-{tag}",
                warm, args.commits)
            lat["pulsar_v4_txn_java_reader"] = v4_latency(broker, "public/ungoverned", warm,
                                                          args.commits)
            print(json.dumps(lat), flush=True)
            plain.close()
            client.close()
        finally:
            broker.stop()
            redis.stop()
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
