"""Metadata stores for pulsar-txn transactions (PIP-473's MetadataStore role)."""

from __future__ import annotations

from .base import MetadataStore
from .memory_store import MemoryMetadataStore
from .redis_store import RedisMetadataStore


def open_store(url: str, namespace: str = "ptxn", partitions: int | None = None,
               create: bool = True) -> MetadataStore:
    """Open the backend named by the URL scheme: ``redis://``, ``rediss://``, ``unix://``,
    or ``memory://`` (a private in-process store; ``memory://<name>``: one shared by
    every store opened with that name in this process, as clients share a server).

    ``create``: whether a namespace that does not exist is created (writers, an
    explicit init). Readers pass False: a missing namespace raises NamespaceNotFound
    naming ``metastore.namespace``, ``metastore.url`` and the namespaces that exist."""
    if url.startswith("memory:"):
        return MemoryMetadataStore.from_url(url, namespace=namespace, partitions=partitions,
                                            create=create)
    return RedisMetadataStore(url, namespace=namespace, partitions=partitions, create=create)


__all__ = ["MemoryMetadataStore", "MetadataStore", "RedisMetadataStore", "open_store"]
