"""Broker plugin benchmark (issue 28): what READ_COMMITTED enforced by the broker costs a
plain consumer, as ratios against the same broker without it, measured in the same run.
Not a test.

    python benchmarks/bench_plugin.py [--messages 200000] [--commits 300] [--json FILE]

One Apache Pulsar 4.0.7 standalone with the plugin (harness.broker_plugin) and one Redis.
Throughput: the same transactional data (batches of 100 messages per transaction, all
committed) is written to a topic of a governed Pulsar namespace (public/default: gate
and filter) and to one of a namespace the plugin does not govern (public/ungoverned: the
broker's disabled transaction buffer, the filter's first test lets it by); a plain
pulsar-client Reader reads each; each read runs twice, the faster counts; the ratio is
governed / ungoverned. Latency: a plain consumer tails a governed topic while one
transaction at a time sends a message and commits; commit -> visible is the time from
the commit's return to the consumer's receive (p50, p99).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import pulsar
from common import machine, plain_read

from pulsar_txn.admin import admin_request
from pulsar_txn.client import PulsarTxnClient, quiet_logger
from pulsar_txn.harness import broker_plugin
from pulsar_txn.harness.redis_server import RedisServer
from pulsar_txn.harness.standalone import PulsarStandalone
from pulsar_txn.metastore import RedisMetadataStore

REPO = Path(__file__).resolve().parents[1]
NS = "benchplugin"


def write(client: PulsarTxnClient, topic: str, n: int, per_txn: int = 100) -> None:
    p = client.create_producer(topic)
    payload = b"x" * 100
    for start in range(0, n, per_txn):
        with client.transaction() as t:
            for _ in range(min(per_txn, n - start)):
                p.send_async(payload, None, txn=t)
    p.close()


def latency(client: PulsarTxnClient, plain: pulsar.Client, topic: str, commits: int
            ) -> list[float]:
    consumer = plain.subscribe(topic, "lat", initial_position=pulsar.InitialPosition.Latest)
    p = client.create_producer(topic)
    out: list[float] = []
    for i in range(commits):
        t = client.new_transaction()
        p.send(f"m{i}".encode(), txn=t)
        t.commit()
        t0 = time.perf_counter()
        m = consumer.receive(10_000)
        out.append((time.perf_counter() - t0) * 1000)
        consumer.acknowledge(m)
        assert m.data() == f"m{i}".encode()
    consumer.close()
    p.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: CI checks it runs")
    args = ap.parse_args()
    if args.smoke:
        args.messages, args.commits = 2_000, 20
    out: dict = {"machine": machine(), "messages": args.messages, "commits": args.commits}
    with tempfile.TemporaryDirectory() as d:
        redis = RedisServer(Path(d) / "redis").start()
        RedisMetadataStore(f"{redis.url}?namespace={NS}").close()
        jar, nar = broker_plugin.build(REPO / "broker-plugin",
                                       settings=REPO / "benchmarks/peer/maven-settings.xml")
        broker = PulsarStandalone(Path(d) / "broker", extra_classpath=(jar,),
                                  extra_conf=broker_plugin.broker_conf(Path(d) / "broker", nar,
                                                                       redis.url, NS))
        broker.start()
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
            for name, topic in (("ungoverned", free), ("governed", gated)) * 2:
                dt = plain_read(broker.service_url, topic, args.messages)
                secs[name] = min(secs.get(name, dt), dt)
            out["throughput"] = {
                "ungoverned_msg_s": round(args.messages / secs["ungoverned"]),
                "governed_msg_s": round(args.messages / secs["governed"]),
                "ratio": round(secs["ungoverned"] / secs["governed"], 3)}
            print(json.dumps(out["throughput"]), flush=True)
            lat = latency(client, plain, f"persistent://public/default/lat-{tag}", args.commits)
            q = statistics.quantiles(lat, n=100, method="inclusive")
            out["commit_to_visible_ms"] = {"p50": round(statistics.median(lat), 2),
                                           "p99": round(q[98], 2), "max": round(max(lat), 2)}
            print(json.dumps(out["commit_to_visible_ms"]), flush=True)
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
