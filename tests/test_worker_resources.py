"""What a Spark Python worker keeps between tasks (pulsar_txn.spark.resources), with
stand-in clients and stores: kept while used, closed when idle or after a failure,
a metastore reopened when it is no longer the one that was opened."""

from __future__ import annotations

from types import SimpleNamespace

from pulsar_txn.spark.resources import WorkerResources


class _Closable:
    def __init__(self, name: str) -> None:
        self.name, self.closed = name, False

    def close(self) -> None:
        self.closed = True


class _Client(_Closable):
    def __init__(self) -> None:
        super().__init__("client")
        self.made: list[_Closable] = []

    def create_producer(self, topic: str, **kw) -> _Closable:
        p = _Closable(topic)
        self.made.append(p)
        return p


class _Store(_Closable):
    def __init__(self) -> None:
        super().__init__("store")
        self.current = True

    def still_current(self) -> bool:
        return self.current


def _opts(token: str = "t1") -> SimpleNamespace:
    return SimpleNamespace(service_url="pulsar://b:6650", client={}, auth_plugin="token",
                           auth_params=f"token:{token}")


def _resources(idle_s: float = 300.0):
    clients: list[_Client] = []
    stores: list[_Store] = []

    def make_client(opts):
        clients.append(_Client())
        return clients[-1]

    def open_store(url, ns):
        stores.append(_Store())
        return stores[-1]

    return WorkerResources(idle_s, make_client, open_store), clients, stores


def test_producers_and_clients_are_kept_across_tasks():
    res, clients, _ = _resources()
    for _ in range(3):
        res.begin_task()
        first = res.producer(_opts(), "persistent://t/n/a", {"batching_enabled": True})
        assert res.producer(_opts(), "persistent://t/n/a", {"batching_enabled": True}) is first
    assert len(clients) == 1 and len(clients[0].made) == 1
    res.producer(_opts(), "persistent://t/n/a", {"batching_enabled": False})  # other settings
    res.producer(_opts("t2"), "persistent://t/n/a", {"batching_enabled": True})  # other token
    assert len(clients) == 2 and len(clients[0].made) == 2


def test_source_reads_never_share_a_client_with_sink_producers():
    """pulsar-client 3.x resets a whole connection when a reader reaches the end of a
    terminated topic (a sealed segment): producers must not be on it (durability.md)."""
    res, clients, _ = _resources()
    producer = res.producer(_opts(), "persistent://t/n/a", {})
    reads = res.client(_opts(), reads=True)
    assert reads is res.client(_opts(), reads=True)  # kept, too
    assert producer not in reads.made and reads is not res.client(_opts())
    assert len(clients) == 2


def test_a_failed_tasks_producers_are_closed_and_replaced():
    res, clients, _ = _resources()
    used = res.producer(_opts(), "persistent://t/n/a", {})
    kept = res.producer(_opts(), "persistent://t/n/b", {})
    res.discard([used])
    assert used.closed and not kept.closed
    fresh = res.producer(_opts(), "persistent://t/n/a", {})
    assert fresh is not used and not fresh.closed


def test_idle_producers_are_closed_when_a_task_starts_never_during_one():
    res, clients, _ = _resources(idle_s=0.0)
    borrowed = res.producer(_opts(), "persistent://t/n/a", {})
    res.producer(_opts(), "persistent://t/n/b", {})  # a long task borrowing more
    res.client(_opts())
    assert not borrowed.closed  # nothing is evicted while the task runs
    res.begin_task()  # the next task: everything idle goes, the client with it
    assert borrowed.closed and clients[0].closed


def test_a_metastore_that_changed_since_it_was_opened_is_opened_again():
    res, _, stores = _resources()
    first = res.store("redis://m/0", "ns")
    assert res.store("redis://m/0", "ns") is first and len(stores) == 1
    first.current = False  # wiped, replaced or restarted behind the same URL
    second = res.store("redis://m/0", "ns")
    assert second is not first and first.closed and not second.closed


def test_everything_is_closed_at_exit():
    res, clients, stores = _resources()
    p = res.producer(_opts(), "persistent://t/n/a", {})
    s = res.store("redis://m/0", "ns")
    res.close()
    assert p.closed and clients[0].closed and s.closed


def test_the_broker_check_is_remembered_per_credentials():
    res, _, _ = _resources()
    key = ("reachable", res.client_key(_opts()), "persistent://t/n/a")
    res.mark_checked(key)
    assert res.checked(key)
    assert not res.checked(("reachable", res.client_key(_opts("wrong")), "persistent://t/n/a"))
