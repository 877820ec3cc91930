"""Topic-name normalization shared by the client API, the CLI and Spark."""

from __future__ import annotations

from pulsar_txn.errors import ConfigError


def normalize_topic(topic: str) -> str:
    """``x`` → ``persistent://public/default/x``; full names are validated, not rewritten."""
    if not topic or not isinstance(topic, str):
        raise ConfigError(f"topic must be a non-empty string, got {topic!r}")
    if "|" in topic or "\n" in topic:
        raise ConfigError(f"topic {topic!r} must not contain '|' or newlines")
    if "://" not in topic:
        parts = topic.split("/")
        if len(parts) == 1:
            return f"persistent://public/default/{topic}"
        if len(parts) == 3:
            return f"persistent://{topic}"
        raise ConfigError(f"topic {topic!r} is not 'name', 'tenant/ns/name' or a full topic URL")
    scheme = topic.split("://", 1)[0]
    if scheme != "persistent":
        raise ConfigError(f"topic {topic!r}: only persistent:// topics carry transactions")
    return topic


def normalize_any(topic: str) -> str:
    """A scalable ``topic://`` name or a ``persistent://`` one, each normalized."""
    from pulsar_txn.dag import is_scalable, normalize_scalable

    if is_scalable(topic):
        return "topic://" + normalize_scalable(topic)
    return normalize_topic(topic)


def last_entry(client, topic: str) -> tuple[int, int] | None:
    """The broker's last confirmed entry of a topic, from a throw-away subscription.

    ``None`` when the topic holds no entry (pulsar-lite raises instead of
    answering -1, so both are folded here).
    """
    import uuid

    import pulsar

    consumer = client.subscribe(topic, f"__ptxn-probe-{uuid.uuid4().hex[:12]}",
                                initial_position=pulsar.InitialPosition.Latest,
                                receiver_queue_size=1)
    try:
        mid = consumer.get_last_message_id()
        return None if mid.entry_id() < 0 else (mid.ledger_id(), mid.entry_id())
    except Exception:
        return None
    finally:
        try:
            consumer.unsubscribe()
        except Exception:
            consumer.close()


def last_entry_strict(client, topic: str) -> tuple[int, int] | None:
    """Like :func:`last_entry`, but an error is never taken for "empty".

    It fixes a sealed segment's end once and for all, so a probe failure must not
    become "no entries". pulsar-lite answers an empty topic with an error: then a
    reader from the earliest entry confirms the topic is really empty.
    """
    import uuid

    import pulsar

    from pulsar_txn.errors import PulsarTxnError

    consumer = client.subscribe(topic, f"__ptxn-probe-{uuid.uuid4().hex[:12]}",
                                initial_position=pulsar.InitialPosition.Latest,
                                receiver_queue_size=1)
    try:
        mid = consumer.get_last_message_id()
        return None if mid.entry_id() < 0 else (mid.ledger_id(), mid.entry_id())
    except Exception as probe_error:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        try:
            reader.read_next(2000)
        except pulsar.Timeout:
            return None  # nothing to read: empty
        finally:
            reader.close()
        raise PulsarTxnError(f"{topic}: cannot tell its last entry ({probe_error}); "
                             "try again") from probe_error
    finally:
        try:
            consumer.unsubscribe()
        except Exception:
            consumer.close()
