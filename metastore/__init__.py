"""Metadata stores for pulsar-txn transactions (PIP-473's MetadataStore role)."""

from __future__ import annotations

from .base import MetadataStore
from .redis_store import RedisMetadataStore


def open_store(url: str, namespace: str = "ptxn", partitions: int | None = None
               ) -> MetadataStore:
    """Open the backend named by the URL scheme (``redis://``, ``rediss://``, ``unix://``)."""
    return RedisMetadataStore(url, namespace=namespace, partitions=partitions)


__all__ = ["MetadataStore", "RedisMetadataStore", "open_store"]
