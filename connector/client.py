"""The plain-Python client API: one façade over the roles.

    client = PulsarTxnClient("pulsar://127.0.0.1:6650", "redis://127.0.0.1:6379")
    with client.transaction() as txn:
        producer.send(b"x", txn=txn)
        consumer.acknowledge(msg, txn=txn)

It wires two pulsar-client ``Client`` objects (producers on one; readers,
consumers and probes on the other), the metastore, the coordinator, the
transaction buffer and the store's event watch together, and hands each
producer, reader and transaction only the pieces it uses (``ReadSide``, a
pulsar client, the topic admin). Nothing else in the package depends on it.
"""

from __future__ import annotations

import logging
import numbers
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import pulsar

from pulsar_txn.admin import AdminAuth, check_admin_url
from pulsar_txn.broker_io import partitions_of
from pulsar_txn.buffer import TransactionBuffer
from pulsar_txn.connection import check_service_url, naming, quiet_logger
from pulsar_txn.consumer import Consumer
from pulsar_txn.coordinator import DEFAULT_RETENTION_MS, DEFAULT_TIMEOUT_MS, TransactionCoordinator
from pulsar_txn.errors import ConfigError, NamespaceNotFound
from pulsar_txn.metastore import open_store
from pulsar_txn.metastore.base import MetadataStore, Watch
from pulsar_txn.producer import Producer
from pulsar_txn.readers import Reader, ReadSide, read_all
from pulsar_txn.records import Position, TxnEvent
from pulsar_txn.scalable.admin import ScalableTopics
from pulsar_txn.scalable.producer import ScalableProducer
from pulsar_txn.scalable.reader import ScalableReader
from pulsar_txn.topics import is_scalable, normalize_topic
from pulsar_txn.transaction import Transaction

__all__ = ["PulsarTxnClient", "Transaction", "Producer", "Reader", "Consumer", "read_all"]

log = logging.getLogger(__name__)


@dataclass
class _Roles:
    """The metastore and the roles over it, opened together once."""
    store: MetadataStore
    coordinator: TransactionCoordinator
    buffer: TransactionBuffer
    watch: Watch
    read_side: ReadSide | None = None

    @classmethod
    def start(cls, store: MetadataStore, sweeper: bool, sweep_interval_s: float,
              retention_ms: int, on_event: Callable[[TxnEvent], None]) -> _Roles:
        coordinator = TransactionCoordinator(store)
        roles = cls(store, coordinator, TransactionBuffer(store), store.watch(on_event))
        if sweeper:
            coordinator.start_sweeper(sweep_interval_s, retention_ms)
        return roles


class PulsarTxnClient:
    """Entry point: a Pulsar client plus the v5 transaction roles over one metastore."""

    def __init__(self, service_url: str, metastore_url: str, *, namespace: str = "ptxn",
                 partitions: int | None = None, sweeper: bool = True,
                 sweep_interval_s: float = 1.0, retention_ms: int = DEFAULT_RETENTION_MS,
                 admin_url: str | None = None, admin_token: str | None = None,
                 admin_auth: AdminAuth | None = None, seal_grace_ms: int = 300,
                 create_namespace: bool | None = None,
                 skip_foreign_deployments: bool = False, **pulsar_kwargs) -> None:
        """``admin_token``: the bearer token of a broker with token authentication,
        for the REST admin calls (``admin_url``); their TLS trust follows the
        ``tls_*`` settings in ``pulsar_kwargs``. ``admin_auth``: all of it
        explicitly (e.g. a TLS client certificate for the admin API).

        ``create_namespace``: None (default) opens an existing namespace now and
        creates a missing one only when something writes (a transaction, a producer,
        a scalable topic); a reader or consumer of a missing namespace fails at once
        (NamespaceNotFound, naming the namespaces that exist). True creates it now
        (an explicit init); False refuses a missing one here.

        ``skip_foreign_deployments``: pass over transactional entries of another
        deployment (another namespace or metastore, or this one before a reset),
        counted in each reader's ``skipped_foreign``; by default a reader meeting one
        raises ForeignDeploymentEntries (never delivered either way)."""
        check_pulsar_kwargs(pulsar_kwargs)  # before anything is opened
        check_service_url(service_url)  # no credentials: pulsar-client logs it whole
        self._metastore = (metastore_url, namespace, partitions)
        self._sweep = (sweeper, sweep_interval_s, retention_ms)
        self._opened: _Roles | None = None
        self._open_lock = threading.Lock()
        self.skip_foreign_deployments = skip_foreign_deployments
        if create_namespace is not None:
            self._roles(create=create_namespace)
        else:
            try:
                self._roles(create=False)
            except NamespaceNotFound:
                pass  # created by the first writer; readers fail at once until then
        pulsar_kwargs.setdefault("logger", quiet_logger())
        # Two pulsar clients, so two connection pools: producers on one, readers,
        # consumers and probes on the other. pulsar-client 3.x closes a whole connection
        # when a reader caught up on a terminated topic (a sealed segment) gets the
        # broker's end-of-topic command, and a send in flight on it can then be answered
        # as a duplicate and never stored (docs/durability.md).
        self.pulsar = pulsar.Client(service_url, **pulsar_kwargs)
        self.read_pulsar = pulsar.Client(service_url, **pulsar_kwargs)
        self.service_url = service_url
        self.admin_url = check_admin_url(admin_url)
        self.admin_auth = admin_auth or AdminAuth.from_client_settings(admin_token,
                                                                       pulsar_kwargs)
        self._seal_grace_ms = seal_grace_ms
        self._scalable: ScalableTopics | None = None

    # ---- the metastore and the roles over it, opened when first needed ----
    def _roles(self, create: bool) -> _Roles:
        """The store and its roles; ``create``: a writer's need (creates a missing
        namespace), else a reader's (a missing one raises NamespaceNotFound)."""
        roles = self._opened
        if roles is not None:
            return roles
        with self._open_lock:
            if self._opened is None:
                url, namespace, partitions = self._metastore
                store = open_store(url, namespace=namespace, partitions=partitions,
                                   create=create)
                self._opened = _Roles.start(store, *self._sweep, self._on_event)
            return self._opened

    @property
    def store(self) -> MetadataStore:
        return self._roles(create=True).store

    @property
    def coordinator(self) -> TransactionCoordinator:
        return self._roles(create=True).coordinator

    @property
    def buffer(self) -> TransactionBuffer:
        return self._roles(create=True).buffer

    @property
    def _watch(self) -> Watch:
        """The store's event watch (tests close it to play a process that learns
        no outcome)."""
        return self._roles(create=True).watch

    @property
    def read_side(self) -> ReadSide:
        """What readers and consumers share; never creates the namespace."""
        roles = self._roles(create=False)
        if roles.read_side is None:
            with self._open_lock:
                if roles.read_side is None:
                    roles.read_side = ReadSide(
                        self.read_pulsar, roles.store, roles.buffer, self.admin_url,
                        self.admin_auth, skip_foreign=self.skip_foreign_deployments)
        return roles.read_side

    @property
    def scalable(self) -> ScalableTopics:
        """Scalable topics (``topic://``): create, describe, split, merge; layouts watched."""
        if self._scalable is None:
            self._scalable = ScalableTopics(self.store, self.read_pulsar, self.admin_url,
                                            self._seal_grace_ms, self.admin_auth)
        return self._scalable

    # ---- transactions ----
    def new_transaction(self, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Transaction:
        """A new transaction; refused (DeploymentChanged) once the metastore at
        ``metastore.url`` holds another deployment than this client opened: one
        read of its config per begin, so nothing is begun, written or committed
        under a stale deployment id."""
        check_timeout_ms(timeout_ms)
        roles = self._roles(create=True)
        roles.store.check_deployment()
        return Transaction(roles.store, roles.coordinator.new_transaction(timeout_ms),
                           roles.coordinator)

    @contextmanager
    def transaction(self, timeout_ms: int = DEFAULT_TIMEOUT_MS):
        """Commit on success, abort on an exception (skipped once the txn is fenced)."""
        txn = self.new_transaction(timeout_ms)
        with txn:
            yield txn

    # ---- producers / readers / consumers ----
    def create_producer(self, topic: str, **kwargs) -> Producer | ScalableProducer:
        """A producer; for a ``topic://`` scalable topic, one that routes by key hash.
        A writer: a missing namespace is created here (see ``create_namespace``)."""
        self._roles(create=True)
        with naming(self.service_url, what=f"creating a producer on {topic}"):
            if is_scalable(topic):
                return ScalableProducer(self.pulsar, self.scalable, topic,
                                        service_url=self.service_url, **kwargs)
            self._refuse_partitioned(topic)
            return Producer(self.pulsar, topic, service_url=self.service_url, **kwargs)

    def create_reader(self, topic: str, start: str | Position = "earliest",
                      **kwargs) -> Reader | ScalableReader:
        """A READ_COMMITTED reader; for a ``topic://`` topic, in the DAG's order. A
        namespace that does not exist fails here at once (NamespaceNotFound)."""
        side = self.read_side
        with naming(self.service_url, what=f"creating a reader on {topic}"):
            if is_scalable(topic):
                return ScalableReader(side, self.scalable, topic, start, **kwargs)
            self._refuse_partitioned(topic)
            return Reader(side, topic, start, **kwargs)

    def subscribe(self, topic: str, subscription: str, **kwargs) -> Consumer:
        if is_scalable(topic):
            raise ConfigError(f"topic {topic!r}: subscriptions on scalable topics are not "
                              "supported yet; subscribe to a segment's backing topic, or read "
                              "with create_reader (DAG order)")
        side = self.read_side  # a namespace that does not exist fails here at once
        with naming(self.service_url, what=f"subscribing to {topic}"):
            self._refuse_partitioned(topic)
            return Consumer(side, topic, subscription, **kwargs)

    def _refuse_partitioned(self, topic: str) -> None:
        """A transaction registers, gates and classifies per segment, and a partition is
        one; the client API works on them one at a time (the Spark source and sink
        handle a partitioned topic whole)."""
        name = normalize_topic(topic)
        parts = partitions_of(self.read_pulsar, name)
        if len(parts) > 1:
            raise ConfigError(
                f"topic {name!r} is partitioned ({len(parts)} partitions): the client API "
                f"works per partition, e.g. {parts[0]!r}; the Spark source and sink read and "
                "write a partitioned topic whole")

    def _on_event(self, ev: TxnEvent) -> None:
        roles = self._opened
        if roles is None:
            return
        roles.buffer.on_event(ev)
        if roles.read_side is not None:
            roles.read_side.participants.on_event(ev)

    def close(self) -> None:
        roles = self._opened
        if roles is not None:
            roles.coordinator.close()
            roles.watch.close()
        if self._scalable is not None:
            self._scalable.close()
        try:
            try:
                self.pulsar.close()
            finally:
                self.read_pulsar.close()
        finally:
            if roles is not None:
                roles.store.close()

    def __enter__(self) -> PulsarTxnClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_timeout_ms(timeout_ms: object) -> int:
    """A transaction timeout is whole milliseconds: ``"30s"`` or ``1.5`` is refused here
    (int() would fail unnamed, or silently truncate to 1 ms)."""
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, numbers.Integral) \
            or timeout_ms <= 0:
        raise ConfigError(f"timeout_ms must be a positive int (milliseconds), got "
                          f"{timeout_ms!r}")
    return int(timeout_ms)


def check_pulsar_kwargs(kwargs: dict) -> None:
    """Keywords not ours go to ``pulsar.Client``; one it does not take is named here
    with the valid ones, not as pulsar-client's ``Client.__init__`` TypeError after
    the metastore was opened."""
    import difflib
    import inspect

    theirs = [n for n in inspect.signature(pulsar.Client.__init__).parameters
              if n not in ("self", "service_url")]
    unknown = sorted(set(kwargs) - set(theirs))
    if not unknown:
        return
    ours = [n for n, p in inspect.signature(PulsarTxnClient.__init__).parameters.items()
            if p.kind is p.KEYWORD_ONLY]
    near = difflib.get_close_matches(unknown[0], ours + theirs, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise ConfigError(f"PulsarTxnClient: unknown keyword argument(s) {', '.join(unknown)}"
                      f"{hint}; PulsarTxnClient's own: {', '.join(ours)}; passed to "
                      f"pulsar.Client: {', '.join(theirs)}")
