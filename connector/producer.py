"""The producer of one plain topic (segment) whose sends may join a transaction.

pulsar-client has no transaction API, so a transactional send is an ordinary
append carrying the txn id and writer id as properties, preceded by a write
registration in the metastore (once per writer-run and segment, not per
message): that is the transaction's ``run_for``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pulsar

from pulsar_txn.errors import BrokerUnavailable, ConfigError
from pulsar_txn.metastore.redis_url import redact_url
from pulsar_txn.records import PROTOCOL_PREFIX
from pulsar_txn.topics import normalize_topic
from pulsar_txn.transaction import Transaction


class Producer:
    """A producer whose sends may join a transaction (``txn=``)."""

    def __init__(self, client: pulsar.Client, topic: str, service_url: str = "",
                 **kwargs) -> None:
        """``service_url``: the client's, for errors (redacted); ``kwargs``:
        pulsar-client's ``create_producer``."""
        self.service_url = service_url
        self.segment = normalize_topic(topic)
        self.writer_id = f"p{uuid.uuid4().hex[:16]}"
        self.native = client.create_producer(self.segment, **kwargs)
        self._bytes_only = kwargs.get("schema") is None

    def _check(self, value: object, key: object, event_time_ms: object) -> None:
        check_send(value, key, event_time_ms, self._bytes_only)

    def _run(self, txn: Transaction):
        return txn.run_for(self.segment, self.writer_id, self.native)

    def send(self, value: bytes, key: str | None = None, properties: dict | None = None,
             txn: Transaction | None = None, event_time_ms: int | None = None):
        self._check(value, key, event_time_ms)  # refused before anything is registered
        with send_errors_named(self.segment, value, self.service_url):
            if txn is None:
                return self.native.send(value, properties=user_props(properties),
                                        **send_kw(key, event_time_ms))
            try:
                return self._run(txn).send(value, user_props(properties),
                                           **send_kw(key, event_time_ms))
            except BaseException as e:
                txn.send_failed(e)  # the transaction cannot commit (Transaction.send_failed)
                raise

    def send_async(self, value: bytes, callback: Callable | None = None, key: str | None = None,
                   properties: dict | None = None, txn: Transaction | None = None,
                   event_time_ms: int | None = None) -> None:
        self._check(value, key, event_time_ms)
        if txn is None:
            self.native.send_async(value, callback or (lambda r, m: None),
                                   properties=user_props(properties),
                                   **send_kw(key, event_time_ms))
            return
        try:
            self._run(txn).send_async(value, callback, user_props(properties),
                                      **send_kw(key, event_time_ms))
        except BaseException as e:
            txn.send_failed(e)
            raise

    def flush(self) -> None:
        self.native.flush()

    def close(self) -> None:
        self.native.close()


def user_props(properties: dict | None) -> dict:
    """A send's own properties as strings; the ``__ptxn.`` ones are the protocol's."""
    props = {str(k): str(v) for k, v in (properties or {}).items()}
    reserved = [k for k in props if k.startswith(PROTOCOL_PREFIX)]
    if reserved:
        raise ConfigError(f"message property {reserved[0]!r}: properties starting with "
                          f"{PROTOCOL_PREFIX!r} are reserved")
    return props


def check_send(value: object, key: object, event_time_ms: object, bytes_only: bool) -> None:
    """A send's arguments, checked before anything is sent or registered, so a refused
    send leaves its transaction able to commit. pulsar-client's own answers name its
    ``partition_key``/``event_timestamp`` or say ``Invalid record obj``. None is a
    value (a null value, as in pulsar-client); with a ``schema=`` the schema checks."""
    if bytes_only and value is not None and not isinstance(value, bytes):
        hint = " (encode it, e.g. value.encode(), or create the producer with " \
               "schema=pulsar.schema.StringSchema())" if isinstance(value, str) else ""
        raise ConfigError(f"send: 'value' must be bytes (the producer has no schema=), got "
                          f"{type(value).__name__}{hint}")
    if key is not None and not isinstance(key, str):
        raise ConfigError(f"send: 'key' must be a str or None, got {type(key).__name__}")
    if event_time_ms is not None and (isinstance(event_time_ms, bool)
                                      or not isinstance(event_time_ms, int)):
        raise ConfigError(f"send: 'event_time_ms' must be an int (ms since the epoch) or "
                          f"None, got {type(event_time_ms).__name__}")


@contextmanager
def send_errors_named(topic: str, value: object, service_url: str) -> Iterator[None]:
    """pulsar-client's ``MessageTooBig`` and ``Timeout`` name neither the topic nor the
    limit nor the address."""
    try:
        yield
    except pulsar.Timeout as e:
        at = f" at {redact_url(service_url)}" if service_url else ""
        raise BrokerUnavailable(
            f"send to {topic}: the Pulsar broker{at} (option "
            "'service.url') did not confirm it within the producer's send_timeout_millis "
            "(default 30000): check that the broker is up; under a transaction, it can no "
            "longer commit") from e
    except pulsar.MessageTooBig as e:
        size = f"{len(value)} bytes" if isinstance(value, bytes) else "its encoded value"
        raise ConfigError(
            f"send to {topic}: the message ({size}) is over the broker's maxMessageSize "
            "(a broker setting, 5242880 bytes = 5 MB by default): split it, or create the "
            "producer with chunking_enabled=True, batching_enabled=False") from e


def send_kw(key: str | None, event_time_ms: int | None) -> dict:
    """pulsar-client's keyword names for a send's key and event time."""
    kw: dict = {}
    if key is not None:
        kw["partition_key"] = key
    if event_time_ms is not None:
        kw["event_timestamp"] = int(event_time_ms)
    return kw
