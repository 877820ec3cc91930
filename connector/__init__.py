"""pulsar-txn: metadata-driven (PIP-473) transactions for Apache Pulsar, for Spark and Python.

Heavy imports (pulsar-client, pyspark) are deferred so that ``import pulsar_txn``
stays cheap on Spark executors and in the metastore package.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "PulsarTxnClient": "pulsar_txn.client",
    "Transaction": "pulsar_txn.client",
    "TxnMessage": "pulsar_txn.message",
    "TransactionCoordinator": "pulsar_txn.coordinator",
    "TransactionBuffer": "pulsar_txn.buffer",
    "PendingAckStore": "pulsar_txn.pending_ack",
    "TxnState": "pulsar_txn.state",
    "TxnId": "pulsar_txn.records",
    "Position": "pulsar_txn.records",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pulsar_txn' has no attribute {name!r}")


__all__ = sorted(_LAZY)
