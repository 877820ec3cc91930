"""Topic-name normalization shared by the client API, the CLI and Spark."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from pulsar_txn.errors import ConfigError, PulsarTxnError

log = logging.getLogger(__name__)

Pos = tuple[int, int, int]  # (ledgerId, entryId, batchIndex)
_BEFORE: Pos = (-1, -1, -1)
WHOLE_ENTRY = 2**31 - 1  # a batch index above every real one: "the whole entry"


def _fmt(p: Pos) -> str:
    return f"{p[0]}:{p[1]}:{p[2]}"


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


def _probe_last(client, topic: str, on_error):
    """The broker's last confirmed entry, from a throw-away subscription; ``on_error``
    decides what a failed probe means (pulsar-lite answers an empty topic with one)."""
    import uuid

    import pulsar

    consumer = client.subscribe(topic, f"__ptxn-probe-{uuid.uuid4().hex[:12]}",
                                initial_position=pulsar.InitialPosition.Latest,
                                receiver_queue_size=1)
    try:
        mid = consumer.get_last_message_id()
        return None if mid.entry_id() < 0 else (mid.ledger_id(), mid.entry_id())
    except Exception as e:
        return on_error(e)
    finally:
        try:
            consumer.unsubscribe()
        except Exception:
            consumer.close()


def last_entry(client, topic: str) -> tuple[int, int] | None:
    """The last confirmed entry of a topic; ``None`` when it holds none (or the probe
    failed: callers use it to plan, and plan again at the next trigger)."""
    return _probe_last(client, topic, lambda _e: None)


def last_entry_strict(client, topic: str) -> tuple[int, int] | None:
    """Like :func:`last_entry`, but an error is never taken for "empty".

    It fixes a sealed segment's end once and for all, so a failed probe must not
    become "no entries": a reader from the earliest entry confirms the topic is
    really empty, else the error is raised (and the seal is finished later).
    """
    import pulsar

    from pulsar_txn.errors import PulsarTxnError

    def confirm_empty(error: Exception) -> None:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        try:
            reader.read_next(2000)
        except pulsar.Timeout:
            return None
        finally:
            reader.close()
        raise PulsarTxnError(f"{topic}: cannot tell its last entry ({error}); try again")

    return _probe_last(client, topic, confirm_empty)


class DataLoss(PulsarTxnError):
    """Entries of a planned range can no longer be read (deleted topic or ledgers)."""


def scan(client, segment: str, start: Pos, end: Pos, timeout_ms: int = 30_000,
         fail_on_data_loss: bool = True, reader: dict | None = None
         ) -> Iterator[tuple[Pos, object]]:
    """Yield (position, native message) for start < position <= end, in order.

    Starts the reader *inclusively* at the start entry and filters, rather than
    trusting exclusive starts inside batches; never seeks (pulsar-lite cannot).
    """
    import pulsar

    if end <= start:
        return
    if start == _BEFORE or start[1] < 0:  # earlier ledgers are filtered out below
        mid, inclusive = pulsar.MessageId.earliest, False
    else:
        mid, inclusive = pulsar.MessageId(-1, start[0], start[1], -1), True
    reader = client.create_reader(segment, mid, start_message_id_inclusive=inclusive,
                                  **{"receiver_queue_size": 2000, **(reader or {})})
    native = reader._reader
    last: Pos | None = None
    try:
        while True:
            at_end_entry = last is not None and (last[0], last[1]) == (end[0], end[1])
            wait = 200 if at_end_entry else timeout_ms
            try:
                raw = native.read_next(wait)
            except pulsar.Timeout:
                if at_end_entry:
                    return  # the end entry's batch is complete
                msg = (f"{segment}: no entry after {_fmt(last or start)} within {timeout_ms} "
                       f"ms although {_fmt(end)} was planned: its data is gone (deleted "
                       "topic or ledgers). Set failOnDataLoss=false to skip lost ranges.")
                if fail_on_data_loss:
                    raise DataLoss(msg) from None
                log.warning("%s (failOnDataLoss=false: skipped)", msg)
                return
            m = raw.message_id()
            pos = (m.ledger_id(), m.entry_id(), m.batch_index())
            if last is not None and pos <= last:
                continue  # a redelivery (pulsar-lite duplicates unbatched topics)
            last = pos
            if pos <= start:
                continue
            if pos > end:
                return
            yield pos, raw
            if pos == end or (pos[2] < 0 and (pos[0], pos[1]) == (end[0], end[1])):
                return
    finally:
        reader.close()
