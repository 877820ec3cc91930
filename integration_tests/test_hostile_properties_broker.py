"""A hostile or malformed protocol property stops no reader (issue 26, hole 9).

Any plain pulsar-client producer can write ``__ptxn.txn``. Between committed
transactional entries it writes ids of partitions >= P (the issue's
``v5:99:1;w;<deployment id>``), huge and negative numbers, v4 prefixes, an empty
writer, wrong separators, aliases of the committed id, and the three-property form
with junk. A READ_COMMITTED Reader, a Consumer and the Spark source deliver every
committed (and plain) entry, none of the hostile ones, and raise nothing. The
property-based proof of the parser and classifier is tests/test_hostile_properties.py.
"""

from __future__ import annotations

import pytest
from helpers import values
from spark_helpers import source_df

from pulsar_txn.client import read_all
from pulsar_txn.records import PROP_DEPLOYMENT, PROP_TXN, PROP_WRITER


def hostile(client, committed, writer: str) -> list[dict[str, str]]:
    """Property maps a plain producer can write; none of them may be delivered, and
    none names another deployment's well-formed transaction (those are ``foreign``)."""
    dep, parts, c = client.store.deployment, client.store.partitions, committed
    one = [f"v5:{parts}:1;w;{dep}", f"v5:99:1;w;{dep}", f"v5:{parts + 7}:{c.seq};{writer};{dep}",
           f"v5:9999:1;{writer};{dep}", f"v5:0:{2**63};{writer};{dep}",
           f"v5:0:99999999999999999999;w;{dep}", f"v5:-1:1;w;{dep}", f"v5:0:-5;w;{dep}",
           f"v5:{c.partition}:0;{writer};{dep}", f"v4:{c.partition}:{c.seq};{writer};{dep}",
           "v4:123:456", f"{c};;{dep}", f"{c},{writer},{dep}", f"{c}|{writer}|{dep}",
           f"{c};{writer}", f"{c};{writer};{dep};x", f"v5:0{c.partition}:{c.seq};{writer};{dep}",
           f"{c}\n;{writer};{dep}", f"{c};{writer}\n;{dep}", "", ";;",
           "v5", "v5:1", "\x00", "v5:٣:1;w;" + dep]
    three = [{PROP_TXN: f"v5:{parts}:1", PROP_WRITER: writer, PROP_DEPLOYMENT: dep},
             {PROP_TXN: "v5:99:1", PROP_WRITER: "junk!"},
             {PROP_TXN: str(c), PROP_WRITER: "", PROP_DEPLOYMENT: dep},
             {PROP_TXN: f"{c};{writer};{dep}", PROP_WRITER: writer},
             {PROP_TXN: f"v5:{2**64}:1", PROP_DEPLOYMENT: dep}]
    return [{PROP_TXN: v} for v in one] + three


def foreign(client, committed, writer: str) -> list[dict[str, str]]:
    """Well-formed entries of another deployment: a reader raises
    ForeignDeploymentEntries at them by default (hole 13), or skips them when told to."""
    c = committed
    return [{PROP_TXN: f"{c};{writer};other"}, {PROP_TXN: "v5:99:1;w;other"},
            {PROP_TXN: str(c), PROP_WRITER: writer, PROP_DEPLOYMENT: "junk"}]


def write_history(client, plain_pulsar, topic: str, with_foreign: bool = False
                  ) -> list[bytes]:
    """Committed entries with hostile ones between them; returns what must be read."""
    p = client.create_producer(topic)
    txn = client.new_transaction()
    p.send(b"c-0", txn=txn)
    p.send(b"c-1", txn=txn)
    txn.commit()
    forger = plain_pulsar.create_producer(topic, batching_enabled=False)
    forger.send(b"plain-0")
    forged = hostile(client, txn.id, p.writer_id)
    if with_foreign:
        forged += foreign(client, txn.id, p.writer_id)
    for i, props in enumerate(forged):
        forger.send(f"HOSTILE-{i}".encode(), properties=props)
        if i == len(forged) // 2:
            with client.transaction() as mid:
                p.send(b"c-2", txn=mid)
            aborted = client.new_transaction()
            p.send(b"ABORTED", txn=aborted)
            aborted.abort()
    with client.transaction() as last:
        p.send(b"c-3", txn=last)
    forger.send(b"plain-1")
    forger.close()
    return [b"c-0", b"c-1", b"plain-0", b"c-2", b"c-3", b"plain-1"]


def test_reader_and_consumer_skip_hostile_protocol_properties_and_never_raise(
        client, plain_pulsar, topic_name):
    topic = topic_name("hostile")
    expected = write_history(client, plain_pulsar, topic)
    assert values(client.create_reader(topic), idle_ms=2000) == expected
    consumer = client.subscribe(topic, "hostile-sub")
    got = []
    for m in read_all(consumer, 2000):
        got.append(m.value)
        consumer.acknowledge(m)
    assert got == expected


def test_hostile_and_foreign_properties_are_skipped_when_foreign_ones_are_allowed(
        make_client, plain_pulsar, topic_name):
    client = make_client(skip_foreign_deployments=True)
    topic = topic_name("hostile-foreign")
    expected = write_history(client, plain_pulsar, topic, with_foreign=True)
    reader = client.create_reader(topic)
    assert values(reader, idle_ms=2000) == expected
    consumer = client.subscribe(topic, "hostile-sub")
    assert [m.value for m in read_all(consumer, 2000)] == expected


@pytest.mark.spark
def test_spark_source_skips_hostile_protocol_properties_and_never_raises(
        spark, client, plain_pulsar, broker, redis_server, namespace, topic_name):
    topic = topic_name("hostile-spark")
    expected = write_history(client, plain_pulsar, topic)
    rows = source_df(spark, broker, redis_server, namespace, stream=False,
                     topic=topic).select("value").collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(expected)
