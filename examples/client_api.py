"""The plain-Python client API: consume, produce and acknowledge in one transaction.

A service reads requests, writes a response and acknowledges the request in the
same transaction: either both happen or neither. The first attempt fails midway
(the transaction aborts: no response visible, the request is redelivered); the
second commits. Runs on embedded services (Valkey + pulsar-lite).

    python examples/client_api.py
"""

from __future__ import annotations

from pulsar_txn.client import PulsarTxnClient, read_all
from pulsar_txn.errors import ReadTimeout
from pulsar_txn.harness import Services


def main() -> None:
    # the client closes before the services stop, also on an error
    with (Services() as services,
          PulsarTxnClient(services.service_url, services.metastore_url) as client):
        client.create_producer("requests").send(b"order #1", key="c-1")
        responses = client.create_producer("responses")

        consumer = client.subscribe("requests", "order-service")
        request = consumer.receive(5000)
        try:
            with client.transaction(timeout_ms=10_000) as txn:
                responses.send(b"accepted: " + request.value, txn=txn)
                consumer.acknowledge(request, txn=txn)
                raise RuntimeError("crash before commit")
        except RuntimeError as e:
            print(f"first attempt failed ({e}); transaction {txn.id} is {txn.state.value}")
        consumer.close()

        seen = [m.value for m in read_all(client.create_reader("responses"), 500)]
        print(f"responses visible after the abort: {seen}")
        assert seen == []

        consumer = client.subscribe("requests", "order-service")  # the request is still there
        request = consumer.receive(5000)
        with client.transaction(timeout_ms=10_000) as txn:
            responses.send(b"accepted: " + request.value, txn=txn)
            consumer.acknowledge(request, txn=txn)
        print(f"second attempt committed {txn.id}")
        consumer.close()

        seen = [m.value for m in read_all(client.create_reader("responses"), 500)]
        print(f"responses visible after the commit: {seen}")
        assert seen == [b"accepted: order #1"]
        again = client.subscribe("requests", "order-service")
        try:
            again.receive(1500)
            raise AssertionError("the request was acknowledged in the committed transaction")
        except ReadTimeout:
            print("the request is acknowledged: nothing left on the subscription")
    print("client API OK")


if __name__ == "__main__":
    main()
