"""A failed send inside a transaction still lets it commit (issue 26, hole 12): not any
more. The metastore is cut for a moment by a TCP proxy between the client and a real
Redis, so the send that needs a new write registration raises; the caller catches it
and, once Redis answers again, sends on and commits. Like Kafka's
``commitTransaction`` after a failed send, the commit raises and the transaction
aborts; a READ_COMMITTED reader sees none of its messages.
"""

from __future__ import annotations

import socket
import threading

import pytest

from pulsar_txn.errors import AppendFailed, PulsarTxnError
from pulsar_txn.harness.ports import free_port
from pulsar_txn.state import TxnState


class CuttableProxy(threading.Thread):
    """Forwards 127.0.0.1:port to a Redis server; ``cut()`` closes every connection and
    refuses new ones (the server is unreachable) until ``restore()``."""

    def __init__(self, target_port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.target = free_port(), target_port
        self.open = True
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._srv = socket.create_server(("127.0.0.1", self.port))

    def run(self) -> None:
        while True:
            try:
                client, _ = self._srv.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                self._conns += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass

    def cut(self) -> None:
        self.open = False
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def restore(self) -> None:
        self.open = True

    def close(self) -> None:
        self.cut()
        self._srv.close()


@pytest.fixture
def proxy(single_redis):
    p = CuttableProxy(single_redis.port)
    p.start()
    yield p
    p.close()


def test_a_txn_whose_send_failed_while_the_metastore_was_down_cannot_commit(
        make_client, client, proxy, single_redis, topic_name):
    topic = topic_name("failed-send")
    cut_client = make_client(metastore_url=single_redis.url.replace(
        f":{single_redis.port}/", f":{proxy.port}/"),
                             sweeper=False)
    producer = cut_client.create_producer(topic)
    txn = cut_client.new_transaction()
    proxy.cut()
    try:
        with pytest.raises(PulsarTxnError):
            producer.send(b"lost", txn=txn)  # its registration cannot reach Redis
    finally:
        proxy.restore()
    producer.send(b"after", txn=txn)  # the caller caught it and sent on
    with pytest.raises(AppendFailed, match="send"):
        txn.commit()
    assert txn.state is TxnState.ABORTED
    assert client.store.get_header(txn.id).state is TxnState.ABORTED
    with cut_client.new_transaction() as ok:  # the next transaction commits as usual
        producer.send(b"next", txn=ok)
    reader = client.create_reader(topic)
    assert reader.read_next(timeout_millis=10_000).data() == b"next"
