"""Plain Pulsar consumers get READ_COMMITTED too: the broker plugin (docs/broker-plugin.md).

A consumer that knows nothing of pulsar-txn (pulsar-client's own ``subscribe``; a Java
service, a Flink job, a Pulsar Function would be the same) reads a topic that
pulsar-txn writes transactionally. The broker, Apache Pulsar with pulsar-txn's plugin,
holds it at a transaction that is still open and never delivers an aborted one.

Runs on services it starts itself: a Valkey server and the reference Apache Pulsar
broker (its jars resolved by Maven, cached) with the plugin built from ``broker-plugin/``
by Maven, the way docs/broker-plugin.md installs it on a real broker. Needs Java 17 and
Maven; pulsar-lite cannot host the plugin.

    python examples/plain_consumers.py
"""

from __future__ import annotations

import time
from pathlib import Path

import pulsar

from pulsar_txn.client import PulsarTxnClient, quiet_logger
from pulsar_txn.harness import Services

PLUGIN = Path(__file__).resolve().parent.parent / "broker-plugin"
TOPIC = "persistent://public/default/plain-orders"


def drain(consumer: pulsar.Consumer, quiet_s: float = 1.5) -> list[str]:
    """What arrives until nothing more does for ``quiet_s``."""
    got = []
    while True:
        try:
            m = consumer.receive(int(quiet_s * 1000))
        except pulsar.Timeout:
            return got
        consumer.acknowledge(m)
        got.append(m.data().decode())


def main() -> None:
    # the plugin governs public/default for pulsar-txn namespace "ptxn" (created first:
    # the operator's `pulsar-txn init`); the clients close before the services stop
    with (Services(broker="standalone", broker_plugin=PLUGIN, namespace="ptxn") as services,
          PulsarTxnClient(services.service_url, services.metastore_url) as client):
        print(f"Apache Pulsar {services.broker.version} with the broker plugin at "
              f"{services.service_url}, metastore at {services.metastore_url}")
        plain = pulsar.Client(services.service_url, logger=quiet_logger())
        try:
            consumer = plain.subscribe(TOPIC, "billing-service",
                                       consumer_type=pulsar.ConsumerType.Shared,
                                       initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(TOPIC)

            with client.transaction() as committed:
                for i in range(3):
                    producer.send(f"order-{i}".encode(), txn=committed)
            aborted = client.new_transaction()
            producer.send(b"order-cancelled", txn=aborted)
            aborted.abort()
            still_open = client.new_transaction(timeout_ms=60_000)
            producer.send(b"order-pending", txn=still_open)
            with client.transaction() as later:  # committed, but after the open one
                producer.send(b"order-after", txn=later)

            before = drain(consumer)
            print(f"a plain consumer, while one transaction is open: {before}")
            assert before == ["order-0", "order-1", "order-2"], before

            t0 = time.perf_counter()
            still_open.commit()
            after = drain(consumer)
            print(f"after its commit ({(time.perf_counter() - t0) * 1000:.0f} ms with the "
                  f"quiet wait): {after}")
            assert after == ["order-pending", "order-after"], after
            print("the aborted order was never delivered; each committed one once, in order")
            consumer.close()
        finally:
            plain.close()
    print("plain consumers: OK")


if __name__ == "__main__":
    main()
