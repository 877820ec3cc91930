"""Failures to reach the Pulsar broker, said in the user's terms.

pulsar-client reports an unreachable broker after its operation timeout (30 s by
default) as a bare ``Pulsar error: TimeOut`` that names neither the setting nor the
address. Every place that first talks to the broker goes through :func:`naming`,
so the error says which option to fix and which address failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pulsar_txn.errors import BrokerUnavailable


def _transport_errors() -> tuple[type[BaseException], ...]:
    import pulsar

    return tuple(getattr(pulsar, n) for n in ("Timeout", "ConnectError", "LookupError")
                 if isinstance(getattr(pulsar, n, None), type))


def shown_url(url: str) -> str:
    from pulsar_txn.metastore.redis_store import redact_url

    return redact_url(url)


@contextmanager
def naming(service_url: str, option: str = "service.url", what: str = "") -> Iterator[None]:
    """Re-raise a transport failure as :class:`BrokerUnavailable` naming the option
    and the address (never a secret: the URL is redacted)."""
    try:
        yield
    except _transport_errors() as e:
        doing = f" while {what}" if what else ""
        raise BrokerUnavailable(
            f"the Pulsar broker at {shown_url(service_url)} (option '{option}') did not "
            f"answer{doing}: {e}. Check the address and that the broker is up; "
            "pulsar-client gives up after its operation timeout "
            "('pulsar.client.operation_timeout_seconds', default 30 s)") from e


def check_reachable(client, service_url: str, topic: str, option: str = "service.url") -> None:
    """One lookup, so a wrong address fails when a query starts, not in a task later."""
    with naming(service_url, option, f"looking up {topic}"):
        client.get_topic_partitions(topic)
