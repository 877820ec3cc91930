"""A client-API consume-transform-produce worker (the chaos test's process).

Receives up to ``--batch`` messages of the input, sends one output message per input
and acknowledges each input under the same transaction (every other transaction with
``acknowledge_async``), commits, and again. With
``--kill-after N`` it SIGKILLs itself right after its N-th commit returns: inside
pulsar-client's ack-grouping window, before any committed ack reached the broker.
Any other failure (a broker or Redis restart under it) ends it with exit code 3 after
aborting what it can; the test starts another.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import pulsar

from pulsar_txn.client import PulsarTxnClient
from pulsar_txn.errors import PulsarTxnError, ReadTimeout


def main() -> int:
    ap = argparse.ArgumentParser()
    for name in ("service-url", "metastore-url", "namespace", "src", "dst", "sub"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--kill-after", type=int, default=0)
    ap.add_argument("--idle-ms", type=int, default=3000)
    a = ap.parse_args()
    client = PulsarTxnClient(a.service_url, a.metastore_url, namespace=a.namespace,
                             sweep_interval_s=0.5, operation_timeout_seconds=10)
    consumer = client.subscribe(a.src, a.sub, consumer_type=pulsar.ConsumerType.Failover)
    producer = client.create_producer(a.dst)
    commits = 0
    try:
        while True:
            msgs = []
            try:
                msgs.append(consumer.receive(a.idle_ms))
                while len(msgs) < a.batch:
                    msgs.append(consumer.receive(50))
            except ReadTimeout:
                pass
            if not msgs:
                break
            txn = client.new_transaction(timeout_ms=8_000)
            # every other transaction acks asynchronously (claimed at its commit)
            ack = consumer.acknowledge_async if commits % 2 else consumer.acknowledge
            try:
                for m in msgs:
                    producer.send(b"out-" + m.value, key=m.key, txn=txn)
                    ack(m, txn=txn)
                txn.commit()
            except (PulsarTxnError, pulsar.PulsarException) as e:
                print(f"FAILED {type(e).__name__}: {e}", flush=True)
                try:
                    txn.abort()
                except Exception:  # noqa: BLE001 - the sweeper times it out otherwise
                    pass
                return 3
            commits += 1
            print(f"COMMIT {commits} {len(msgs)}", flush=True)
            if commits == a.kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
    except (PulsarTxnError, pulsar.PulsarException) as e:
        print(f"FAILED {type(e).__name__}: {e}", flush=True)
        return 3
    print("CTP-DONE", flush=True)
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
