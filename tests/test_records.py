"""Encodings shared with the Lua scripts: order, round trips, v4/v5 separation."""

import random

import pytest

from pulsar_txn.errors import InvalidTxnId
from pulsar_txn.metastore.keys import ack_key, ack_position
from pulsar_txn.records import (
    BEFORE_EARLIEST,
    PROP_DEPLOYMENT,
    PROP_TXN,
    PROP_WRITER,
    Position,
    TxnId,
    entry_txn,
    entry_txn_cached,
    txn_properties,
)


def test_position_encoding_orders_like_numbers():
    rnd = random.Random(7)
    ps = [Position(rnd.choice([0, 1, 2**40, 2**62]) + rnd.randrange(1000), rnd.randrange(2**50))
          for _ in range(2000)]
    assert sorted(ps, key=Position.encode) == sorted(ps)
    assert all(Position.decode(p.encode()) == p for p in ps)


def test_ack_keys_order_batch_indexes_and_whole_entries():
    whole, b0, b5 = Position(3, 9), Position(3, 9, 0), Position(3, 9, 5)
    assert ack_key(b0) < ack_key(b5) < ack_key(whole) < ack_key(Position(3, 10, 0))
    assert all(ack_position(ack_key(p)) == p for p in (whole, b0, b5))


def test_previous_steps_back_one_entry():
    assert Position(5, 3).previous() == Position(5, 2)
    assert Position(5, 0).previous() < Position(5, 0)
    assert Position(0, 0).previous() == BEFORE_EARLIEST


@pytest.mark.parametrize("text", ["v5:0:1", "v5:15:123456789"])
def test_v5_ids_round_trip(text):
    assert str(TxnId.parse(text)) == text


@pytest.mark.parametrize("text", ["(1,2)", "1:2", "v4:1:2", "v5:x:1", "v5:1:", None, 12])
def test_non_v5_ids_are_refused(text):
    with pytest.raises(InvalidTxnId):
        TxnId.parse(text)


def _never_ours(t: str | None) -> bool:
    """A txn text a reader can never classify as one of its own (fails to parse)."""
    try:
        TxnId.parse(t)
    except InvalidTxnId:
        return t is not None
    return False


def test_a_transactional_append_carries_one_protocol_property():
    props = txn_properties(TxnId(3, 17), "t0.a0.x-1", "0123456789ab")
    assert props == {PROP_TXN: "v5:3:17;t0.a0.x-1;0123456789ab"}
    assert entry_txn(props, "0123456789ab") == ("v5:3:17", "t0.a0.x-1")


def test_a_reader_of_the_three_property_form_never_delivers_the_one_property_form():
    """Earlier builds (and the external-reader rule they documented) take the whole
    ``__ptxn.txn`` value for the txn id: it must never parse, so they skip the entry
    rather than deliver it as a plain one whatever its transaction's outcome."""
    props = txn_properties(TxnId(3, 17), "w", "dep1")
    with pytest.raises(InvalidTxnId):
        TxnId.parse(props[PROP_TXN])


def test_entries_written_in_the_three_property_form_stay_readable():
    old = {PROP_TXN: "v5:3:17", PROP_WRITER: "w", PROP_DEPLOYMENT: "dep1", "user": "x"}
    assert entry_txn(old, "dep1") == ("v5:3:17", "w")
    # written before appends carried the deployment: taken as this deployment's
    assert entry_txn({PROP_TXN: "v5:3:17", PROP_WRITER: "w"}, "dep1") == ("v5:3:17", "w")


def _cached(props: dict, deployment: str):
    """entry_txn_cached with a cache per deployment shared across the calls of a test
    (as a reader's, whose store's deployment is fixed)."""
    return entry_txn_cached(props, deployment, _CACHES.setdefault(deployment, {}))


_CACHES: dict[str, dict] = {}
CLASSIFIERS = [entry_txn, _cached]


@pytest.mark.parametrize("classify", CLASSIFIERS)
def test_the_cached_classification_is_the_uncached_one(classify):
    for dep in ("dep1", "dep2"):
        for props in ({PROP_TXN: "v5:3:17;w;dep1"}, {PROP_TXN: "v5:3:17;w;dep2"},
                      {PROP_TXN: "v5:3:17;w;dep1", "u": "1"}, {PROP_TXN: "v5:3:17"}):
            assert classify(props, dep) == entry_txn(props, dep)


def test_a_plain_entry_has_no_txn():
    assert entry_txn({}, "dep1") == (None, "")
    assert entry_txn({"color": "red"}, "dep1") == (None, "")


@pytest.mark.parametrize("props", [
    {PROP_TXN: "v5:3:17;w;other"},
    {PROP_TXN: "v5:3:17;w;"},
    {PROP_TXN: "v5:3:17", PROP_WRITER: "w", PROP_DEPLOYMENT: "other"},
])
@pytest.mark.parametrize("classify", CLASSIFIERS)
def test_another_deployments_entry_is_never_one_of_ours(props, classify):
    t, _ = classify(props, "dep1")
    assert _never_ours(t)


def test_a_writer_id_the_property_cannot_carry_is_refused():
    with pytest.raises(ValueError, match="writer"):
        txn_properties(TxnId(0, 1), "a;b", "dep1")


@pytest.mark.parametrize("props", [
    {PROP_TXN: "v5:3:17;;dep1"},               # no writer: a forged or corrupt value
    {PROP_TXN: "v5:3:17;a b;dep1"},
    {PROP_TXN: "v5:3:17;w"},
    {PROP_TXN: "v5:3:17;w;dep1;more"},
    {PROP_TXN: ";;"},
    {PROP_TXN: ""},
    {PROP_TXN: "garbage;w;dep1"},
    {PROP_TXN: "garbage"},
    # a mix of both forms: which one to believe is unknown, so neither is
    {PROP_TXN: "v5:3:17;w;dep1", PROP_WRITER: "w"},
    {PROP_TXN: "v5:3:17;w;dep1", PROP_DEPLOYMENT: "dep1"},
])
@pytest.mark.parametrize("classify", CLASSIFIERS)
def test_a_malformed_protocol_property_is_never_one_of_ours(props, classify):
    t, _ = classify(props, "dep1")
    assert _never_ours(t)


def test_the_checkpoint_text_of_a_position_is_byte_identical():
    """Spark checkpoints hold offsets as this text: one codec, pinned (issue 32)."""
    from pulsar_txn.records import BEFORE, WHOLE_ENTRY, Position
    from pulsar_txn.spark.offsets import from_offset, to_offset

    positions = {"persistent://public/default/orders": Position(12, 345, WHOLE_ENTRY),
                 "persistent://public/default/b": BEFORE,
                 "persistent://public/default/c": Position(7, 0, 3)}
    text = to_offset(positions)
    assert text == {"persistent://public/default/b": "-1:-1:-1",
                    "persistent://public/default/c": "7:0:3",
                    "persistent://public/default/orders": "12:345:2147483647"}
    back = from_offset(text)
    assert back == positions and all(type(p) is Position for p in back.values())
    assert to_offset({"t": (12, 345, WHOLE_ENTRY)}) == {"t": "12:345:2147483647"}
    assert str(Position(12, 345)) == "12:345" and Position.parse("12:345") == (12, 345, -1)
