"""Scalable topics (``topic://``) on ordinary Pulsar topics.

The modules, by role (imports point down this list):

- ``pulsar_txn.scalable.dag``: the pure DAG — segments, key ranges, routing, split and
  merge plans, and the one admission rule (``Layout.admissible``);
- ``admin``: ``ScalableTopics`` — create, split, merge, seal, describe, and the
  watched layout cache producers and readers follow;
- ``producer``: ``ScalableProducer`` — routes by key hash, re-routes in order;
- ``reader``: ``ScalableReader`` — READ_COMMITTED, in happens-before order.

Names are resolved lazily, so ``pulsar_txn.topics`` (which routes keys with the
DAG's hash) can import the DAG without loading producers and readers.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ScalableTopics": "pulsar_txn.scalable.admin",
    "read_layout": "pulsar_txn.scalable.admin",
    "count_backing_entries": "pulsar_txn.scalable.admin",
    "ScalableProducer": "pulsar_txn.scalable.producer",
    "ScalableReader": "pulsar_txn.scalable.reader",
    "is_scalable": "pulsar_txn.topics",
    "normalize_scalable": "pulsar_txn.topics",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pulsar_txn.scalable' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
