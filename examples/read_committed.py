"""One transaction over two topics, watched by READ_COMMITTED readers (client API).

Runs on embedded services it starts itself (a Valkey server and the pulsar-lite
broker, both real processes on loopback); set PULSAR_TXN_BROKER=standalone to
use the reference Apache Pulsar broker instead.

    python examples/read_committed.py
"""

from __future__ import annotations

import threading

from pulsar_txn.client import PulsarTxnClient, read_all
from pulsar_txn.harness import Services


def main() -> None:
    # the client closes before the services stop, also on an error
    with (Services() as services,
          PulsarTxnClient(services.service_url, services.metastore_url) as client):
        print(f"broker {services.kind} at {services.service_url}, "
              f"metastore at {services.metastore_url}")
        orders, payments = "quickstart-orders", "quickstart-payments"
        po, pp = client.create_producer(orders), client.create_producer(payments)
        ro, rp = client.create_reader(orders), client.create_reader(payments)

        # 1. A transaction writes to two topics; a reader watches concurrently.
        txn = client.new_transaction(timeout_ms=30_000)
        for i in range(3):
            po.send(f"order-{i}".encode(), key=f"customer-{i}", txn=txn)
            pp.send(f"payment-{i}".encode(), key=f"customer-{i}", txn=txn)
        seen_before = [m.value for m in read_all(ro, 500)] + [m.value for m in read_all(rp, 500)]
        print(f"before commit, the readers see {len(seen_before)} messages: {seen_before}")
        assert seen_before == []

        woke = threading.Event()
        got: list[bytes] = []

        def wait_for_commit() -> None:
            got.append(ro.read_next(10_000).value)  # blocks at the gate; woken by the commit
            woke.set()

        waiter = threading.Thread(target=wait_for_commit)
        waiter.start()
        txn.commit()
        waiter.join()
        after = got + [m.value for m in read_all(ro, 500)] + [m.value for m in read_all(rp, 500)]
        print(f"after commit {txn.id}, the readers see {len(after)} messages: {after}")
        assert sorted(after) == sorted([f"order-{i}".encode() for i in range(3)]
                                       + [f"payment-{i}".encode() for i in range(3)])

        # 2. An aborted transaction: its data is never shown.
        doomed = client.new_transaction()
        po.send(b"order-cancelled", txn=doomed)
        doomed.abort()
        po.send(b"order-plain")  # a non-transactional send is delivered normally
        later = [m.value for m in read_all(ro, 500)]
        print(f"after abort {doomed.id}, the reader sees: {later}")
        assert later == [b"order-plain"]
        fresh = [m.value for m in read_all(client.create_reader(orders), 500)]
        print(f"a new reader from the beginning sees: {fresh}")
        assert b"order-cancelled" not in fresh
    print("read_committed OK")


if __name__ == "__main__":
    main()
