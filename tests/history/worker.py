"""A client process of the real-services history run, which the harness SIGKILLs.

It consumes the input subscription and, per message, in one transaction sends the
transformed value to the output topic and acks the input (consume-transform-produce),
aborting one transaction in ten; every operation is written to its history file as
it is invoked and completed (history.model.Recorder), so the operations a kill cut
short are known. It exits after ``--idle-s`` seconds with nothing to consume.

    python -m history.worker --service-url ... --metastore-url ... --namespace ns \
        --input T --subscription S --output U --history file.jsonl --name w1 --seed 7
"""

from __future__ import annotations

import argparse
import faulthandler
import random
import signal
import time

import pulsar
import redis

from pulsar_txn.client import PulsarTxnClient
from pulsar_txn.errors import PulsarTxnError

from .model import Recorder
from .workload import Process

UNCERTAIN = (PulsarTxnError, pulsar.PulsarException, redis.RedisError, TimeoutError)


def main() -> None:
    a = argparse.ArgumentParser()
    for opt in ("service-url", "metastore-url", "namespace", "input", "subscription",
                "output", "history", "name"):
        a.add_argument(f"--{opt}", required=True)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--idle-s", type=float, default=5.0)
    a.add_argument("--type", choices=["Failover", "Shared"], default="Failover")
    args = a.parse_args()
    faulthandler.register(signal.SIGUSR1)  # the harness asks for its stack if stuck
    rnd = random.Random(args.seed)
    h = Recorder(args.history, time.monotonic_ns)
    client = PulsarTxnClient(args.service_url, args.metastore_url, namespace=args.namespace,
                             sweeper=False, operation_timeout_seconds=5)
    p = Process(args.name, client, h, UNCERTAIN)
    for attempt in range(12):  # the broker may be restarting, or still see a killed worker
        try:
            # Failover or Shared: a new worker may subscribe while the broker still holds
            # the consumer of the one just killed (pulsar-lite keeps an Exclusive one)
            p.subscribe(args.input, args.subscription,
                        consumer_type=getattr(pulsar.ConsumerType, args.type))
            break
        except UNCERTAIN:
            if attempt == 11:
                raise
            time.sleep(1)
    idle_since = time.monotonic()
    print("WORKER-READY", flush=True)
    while time.monotonic() - idle_since < args.idle_s:
        try:
            if not p.held and not p.receive():
                continue
            idle_since = time.monotonic()
            label = p.begin(5_000)
            p.transform(args.output, label)
            if label not in p.txns:
                continue
            if rnd.random() < 0.1:
                p.abort(label)
            else:
                p.commit(label)
        except UNCERTAIN:  # begin failed: the metastore or broker is restarting
            time.sleep(0.2)
    client.close()
    print("WORKER-DONE", flush=True)


if __name__ == "__main__":
    main()
