"""Topic names: normalization shared by the client API, the CLI and Spark, and the
partition a key routes to. No broker I/O here (that is
``broker_io``), so the options parser can check names without a connection."""

from __future__ import annotations

import re

from pulsar_txn.errors import ConfigError
from pulsar_txn.hashing import murmur3_32

# scalable topics (PIP-460's topic://): the name rule, here at the bottom so that
# routing and the layout code share it
SCHEME = "topic://"
_NAME_PART = re.compile(r"^[A-Za-z0-9_.=\-]{1,120}$")


# The library's own readers and probes name their subscriptions with this prefix: the
# broker plugin (broker-plugin/, docs/broker-plugin.md) exempts them from its entry
# filter, since they classify every entry themselves and a range scan must see its end
# entry even where the filter would hide it.
INTERNAL_PREFIX = "__ptxn"


def normalize_scalable(name: str) -> str:
    """``topic://t/ns/x`` or ``t/ns/x`` or ``x`` → ``t/ns/x`` (the DAG's key)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"scalable topic name must be a non-empty string, got {name!r}")
    rest = name[len(SCHEME):] if name.startswith(SCHEME) else name
    if "://" in rest:
        raise ConfigError(f"{name!r} is not a scalable topic (expected topic://tenant/ns/name)")
    parts = rest.split("/")
    if len(parts) == 1:
        parts = ["public", "default", parts[0]]
    if len(parts) != 3 or not all(_NAME_PART.match(p) for p in parts):
        raise ConfigError(f"scalable topic {name!r} must be topic://tenant/namespace/name "
                          "with letters, digits, '_', '-', '.', '='")
    return "/".join(parts)


def is_scalable(name: str) -> bool:
    return isinstance(name, str) and name.startswith(SCHEME)


_NAMED = re.compile(r"[-=:.\w]+", re.ASCII)  # Pulsar's rule for tenants and namespaces


def normalize_topic(topic: str) -> str:
    """``x`` → ``persistent://public/default/x``; full names are validated, not rewritten."""
    if not topic or not isinstance(topic, str):
        raise ConfigError(f"topic must be a non-empty string, got {topic!r}")
    if "|" in topic or "\n" in topic:
        raise ConfigError(f"topic {topic!r} must not contain '|' or newlines")
    if "://" not in topic:
        parts = topic.split("/")
        if len(parts) == 1:
            full = f"persistent://public/default/{topic}"
        elif len(parts) == 3:
            full = f"persistent://{topic}"
        else:
            raise ConfigError(f"topic {topic!r} is not 'name', 'tenant/ns/name' or a full "
                              "topic URL")
    else:
        full = topic
    scheme, _, rest = full.partition("://")
    if scheme != "persistent":
        raise ConfigError(f"topic {topic!r}: only persistent:// topics carry transactions")
    parts = rest.split("/")
    if len(parts) not in (3, 4):  # 4: a v1 name, persistent://tenant/cluster/ns/name
        raise ConfigError(f"topic {topic!r} is not 'persistent://tenant/namespace/name'")
    *scope, local = parts
    for what, name in zip(("tenant", "cluster" if len(scope) == 3 else "namespace",
                           "namespace"), scope):
        if not _NAMED.fullmatch(name):
            raise ConfigError(f"topic {topic!r}: {what} {name!r} may hold only letters, "
                              "digits and - _ = : .")
    if not local or any(c.isspace() or not c.isprintable() for c in local):
        raise ConfigError(f"topic {topic!r}: the name {local!r} must be non-empty, without "
                          "spaces or control characters")
    return full


def normalize_any(topic: str) -> str:
    """A scalable ``topic://`` name or a ``persistent://`` one, each normalized."""
    if is_scalable(topic):
        return "topic://" + normalize_scalable(topic)
    return normalize_topic(topic)


def partition_for(key: str | bytes | None, n: int, counter: int) -> int:
    """Pulsar's cross-language routing for keyed messages (the Murmur3_32Hash
    scheme: signSafeMod(makeHash(key), n)); unkeyed ones round-robin."""
    if key is None:
        return counter % n
    data = key.encode() if isinstance(key, str) else bytes(key)
    return (murmur3_32(data) & 0x7FFFFFFF) % n
