"""Who creates a namespace, and what a store notices when its namespace changes
(issue 26, holes 8 and 13), on the in-memory backend (no broker is contacted)."""

from __future__ import annotations

import uuid

import pytest

from pulsar_txn.client import PulsarTxnClient
from pulsar_txn.errors import DeploymentChanged, NamespaceNotFound
from pulsar_txn.metastore import open_store
from pulsar_txn.metastore.memory_namespace import reset_named


def _name() -> str:
    return f"ns-{uuid.uuid4().hex[:8]}"


def test_a_readers_open_never_creates_a_namespace_and_names_those_that_exist():
    url = f"memory://{_name()}"
    open_store(url, namespace="orders").close()
    for _ in range(2):  # the first refusal created nothing
        with pytest.raises(NamespaceNotFound) as e:
            open_store(url, namespace="ordres", create=False)
        text = str(e.value)
        assert "'metastore.namespace'" in text and "'ordres'" in text and "'orders'" in text
    assert open_store(url, namespace="orders", create=False).deployment


def test_a_client_creates_its_namespace_only_when_it_writes():
    url = f"memory://{_name()}"
    client = PulsarTxnClient("pulsar://127.0.0.1:1", url, namespace="typo", sweeper=False)
    try:
        with pytest.raises(NamespaceNotFound, match="metastore.namespace"):
            client.create_reader("persistent://public/default/t")
        with pytest.raises(NamespaceNotFound):
            open_store(url, namespace="typo", create=False)
        client.new_transaction().abort()  # a writer: creates it
        assert open_store(url, namespace="typo", create=False).deployment == \
            client.store.deployment
    finally:
        client.close()


def test_a_store_notices_its_namespace_was_reset():
    name = _name()
    store = open_store(f"memory://{name}", namespace="ns")
    store.check_deployment()
    reset_named(name, "ns")
    fresh = open_store(f"memory://{name}", namespace="ns")
    assert fresh.deployment != store.deployment
    with pytest.raises(DeploymentChanged, match="metastore.url"):
        store.check_deployment()
    fresh.check_deployment()
