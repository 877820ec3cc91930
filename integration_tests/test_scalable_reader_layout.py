"""The DAG reader after layout changes: children are read once their parents are
exhausted, whatever the reader received from those parents (nothing at all, too).

Real Redis + a real broker; each test changes the layout while a reader is open and
checks the exact set of messages it then delivers.
"""

from __future__ import annotations

import uuid

import pytest

from pulsar_txn.client import read_all
from pulsar_txn.errors import ReadTimeout
from pulsar_txn.records import BEFORE_EARLIEST
from pulsar_txn.scalable.dag import key_hash

KEYS = [f"k{i}" for i in range(8)]


@pytest.fixture
def sclient(make_client, broker):
    return make_client(admin_url=getattr(broker, "admin_url", "") or None, seal_grace_ms=200)


@pytest.fixture
def scalable_name():
    return f"topic://public/default/sr-{uuid.uuid4().hex[:10]}"


def _send(producer, tag: str, keys=KEYS) -> list[bytes]:
    out = []
    for k in keys:
        v = f"{k}:{tag}".encode()
        producer.send(v, key=k)
        out.append(v)
    return out


def _read(reader, idle_ms: int = 1500) -> list[bytes]:
    return sorted(m.value for m in read_all(reader, idle_ms=idle_ms))


def _assert_nothing_yet(reader) -> None:
    """The reader has opened its segments and found nothing (it is past its start)."""
    with pytest.raises(ReadTimeout):
        reader.read_next(300)


def test_reader_moves_to_children_after_empty_parent_sealed(sclient, scalable_name):
    topics = sclient.scalable
    topics.create(scalable_name, segments=1)
    reader = sclient.create_reader(scalable_name)
    _assert_nothing_yet(reader)                      # it reads segment 0, which stays empty
    lay = topics.split(scalable_name, 0)
    assert lay.segments[0].end == BEFORE_EARLIEST
    sent = _send(sclient.create_producer(scalable_name), "child")
    assert _read(reader) == sorted(sent)


def test_reader_moves_on_after_an_empty_segment_is_merged_away(sclient, scalable_name):
    topics = sclient.scalable
    lay = topics.create(scalable_name, segments=2)
    producer = sclient.create_producer(scalable_name)
    keys1 = [k for k in KEYS if lay.route(key_hash(k, lay.hash_fn)).id == 1]
    assert keys1 and len(keys1) < len(KEYS)
    before = _send(producer, "before", keys1)        # segment 0 receives nothing
    reader = sclient.create_reader(scalable_name)
    assert _read(reader, 800) == sorted(before)
    lay = topics.merge(scalable_name, 0, 1)
    assert lay.segments[0].end == BEFORE_EARLIEST
    after = _send(producer, "after")
    assert _read(reader) == sorted(after)


def test_latest_reader_follows_a_split(sclient, scalable_name):
    topics = sclient.scalable
    topics.create(scalable_name, segments=1)
    producer = sclient.create_producer(scalable_name)
    _send(producer, "old")
    reader = sclient.create_reader(scalable_name, start="latest")
    _assert_nothing_yet(reader)                      # it received nothing from the parent
    topics.split(scalable_name, 0)
    sent = _send(producer, "new")
    assert _read(reader) == sorted(sent)


def test_latest_reader_on_an_empty_topic_follows_a_split(sclient, scalable_name):
    topics = sclient.scalable
    topics.create(scalable_name, segments=1)
    reader = sclient.create_reader(scalable_name, start="latest")
    _assert_nothing_yet(reader)
    topics.split(scalable_name, 0)
    sent = _send(sclient.create_producer(scalable_name), "new")
    assert _read(reader) == sorted(sent)


def test_latest_reader_delivers_exactly_what_follows_its_start_across_a_split(
        sclient, scalable_name):
    topics = sclient.scalable
    topics.create(scalable_name, segments=1)
    producer = sclient.create_producer(scalable_name)
    _send(producer, "old")
    reader = sclient.create_reader(scalable_name, start="latest")
    mid = _send(producer, "mid")                     # after the start, into the parent
    topics.split(scalable_name, 0)
    new = _send(producer, "new")
    assert _read(reader) == sorted(mid + new)
