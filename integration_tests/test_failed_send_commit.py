"""A failed send inside a transaction still lets it commit (issue 26, hole 12): not any
more. The metastore is cut for a moment by a TCP proxy between the client and a real
Redis, so the send that needs a new write registration raises; the caller catches it
and, once Redis answers again, sends on and commits. Like Kafka's
``commitTransaction`` after a failed send, the commit raises and the transaction
aborts; a READ_COMMITTED reader sees none of its messages.
"""

from __future__ import annotations

import pytest

from pulsar_txn.errors import AppendFailed, PulsarTxnError
from pulsar_txn.harness.proxy import TcpProxy
from pulsar_txn.state import TxnState


@pytest.fixture
def proxy(single_redis):
    p = TcpProxy(single_redis.port)
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
