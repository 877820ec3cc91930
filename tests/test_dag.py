"""The segment DAG as data: routing, split/merge planning, happens-before order."""

import pytest

from pulsar_txn.errors import ConfigError
from pulsar_txn.records import BEFORE_EARLIEST, Position
from pulsar_txn.scalable.dag import (
    HASH_SPACE,
    Layout,
    Segment,
    initial_segments,
    key_hash,
    plan_merge,
    plan_split,
)
from pulsar_txn.state import SegmentState
from pulsar_txn.topics import normalize_scalable


def _apply(lay: Layout, parents, kids) -> Layout:
    segs = dict(lay.segments)
    for p in parents:
        old = segs[p]
        segs[p] = Segment(old.id, old.lo, old.hi, old.backing, SegmentState.SEALED, old.parents,
                          tuple(k.id for k in kids), old.created_epoch, lay.epoch + 1)
    for k in kids:
        segs[k.id] = k
    return Layout(lay.topic, lay.epoch + 1, segs)


def _layout(n: int) -> Layout:
    return Layout("public/default/t", 1, {s.id: s for s in initial_segments("public/default/t", n)})


def test_initial_segments_tile_the_hash_space():
    for n in (1, 2, 3, 7, 16):
        _layout(n).check()


def test_every_key_routes_to_exactly_one_active_segment_after_split_and_merge():
    lay = _layout(2)
    lay = _apply(lay, *plan_split(lay, 0, 2))
    lay = _apply(lay, *plan_merge(lay, 3, 1, 4))
    lay.check()
    for k in range(2000):
        h = key_hash(f"k{k}")
        assert [s.id for s in lay.active() if s.covers(h)] == [lay.route(h).id]


def test_split_children_cover_exactly_the_parent():
    lay = _layout(1)
    parents, kids = plan_split(lay, 0, 1, at=100)
    assert parents == [0]
    assert [(k.lo, k.hi) for k in kids] == [(0, 99), (100, HASH_SPACE - 1)]
    assert all(k.parents == (0,) for k in kids)


def test_merge_needs_adjacent_active_siblings():
    lay = _layout(3)
    with pytest.raises(ConfigError, match="not adjacent"):
        plan_merge(lay, 0, 2, 3)
    lay2 = _apply(lay, *plan_merge(lay, 0, 1, 3))
    with pytest.raises(ConfigError, match="not ACTIVE"):
        plan_merge(lay2, 0, 2, 4)


def test_read_order_puts_every_parent_before_its_children():
    lay = _layout(2)
    lay = _apply(lay, *plan_split(lay, 1, 2))
    lay = _apply(lay, *plan_merge(lay, 0, 2, 4))
    lay = _apply(lay, *plan_split(lay, 4, 5))
    order = [s.id for s in lay.read_order()]
    for s in lay.segments.values():
        for p in s.parents:
            assert order.index(p) < order.index(s.id), (p, s.id, order)


def test_key_hash_is_stable_across_processes():
    # not Python's salted hash: every producer and reader agrees
    assert key_hash("customer-1", "crc32") == key_hash(b"customer-1", "crc32") == 0xDC7D
    assert key_hash("customer-1") == key_hash(b"customer-1")


def test_murmur3_matches_the_published_vectors_and_routes_like_upstream():
    """MurmurHash3 x86_32 reference vectors (seed 0 is what Pulsar's Murmur3_32Hash
    uses). Upstream's current rule (PIP-486, v5 SegmentRouter): segment hash = raw
    Murmur3_32(key UTF-8) >>> 16, the default for new layouts; the earlier spec's
    makeHash(key) & 0xFFFF is 'murmur3-low16'. Upstream has no fixed key vectors:
    these follow from the reference hash values."""
    from pulsar_txn.hashing import murmur3_32

    assert murmur3_32(b"") == 0
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"abc") == 0xB3DD93FA
    assert murmur3_32(b"aaaa", 0x9747B28C) == 0x5A97808A
    assert murmur3_32(b"Hello, world!", 1234) == 0xFAF6CDB3
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog", 0x9747B28C) == 0x2FA826CD
    assert key_hash("hello") == 0x248B == key_hash("hello", "murmur3")
    assert key_hash("hello", "murmur3-low16") == 0xFA47
    assert key_hash("customer-99") == 0xD8FF and key_hash("order-42") == 0x4B11
    assert key_hash("") == 0  # the empty key is hashed, not spread
    assert key_hash("ключ") == murmur3_32("ключ".encode()) >> 16  # UTF-8 bytes


def test_descriptor_json_round_trips_with_end():
    """The store's codec of a segment (metastore/keys.py), pinned byte for byte: the
    Lua scripts and every deployed DAG hold this JSON."""
    from pulsar_txn.metastore.keys import decode_segment, encode_segment

    s = Segment(3, 0, 10, "persistent://a/b/c-seg-3", SegmentState.SEALED, (1,), (4, 5), 2, 3,
                Position(7, 9))
    assert decode_segment(encode_segment(s)) == s
    assert encode_segment(s) == (
        '{"id":3,"lo":0,"hi":10,"backing":"persistent://a/b/c-seg-3","state":"SEALED",'
        '"parents":[1],"children":[4,5],"ce":2,"se":3,"st":null,"end":"7:9"}')
    empty = Segment(3, 0, 10, "x", SegmentState.SEALED, end=BEFORE_EARLIEST)
    assert decode_segment(encode_segment(empty)).end == BEFORE_EARLIEST
    assert decode_segment(encode_segment(Segment(1, 0, 1, "x"))).end is None
    assert decode_segment('{"id":1,"lo":0,"hi":1,"backing":"x","state":"ACTIVE",'
                          '"parents":{},"children":{}}').parents == ()  # cjson's {} for []


@pytest.mark.parametrize("bad", ["", "a/b", "persistent://a/b/c", "topic://a/b/c/d",
                                 "topic://a/b/c d"])
def test_bad_scalable_names_are_refused_naming_the_topic(bad):
    with pytest.raises(ConfigError):
        normalize_scalable(bad)


def test_scalable_names_normalize():
    assert normalize_scalable("topic://t/ns/x") == "t/ns/x"
    assert normalize_scalable("x") == "public/default/x"
