"""Encodings shared with the Lua scripts: order, round trips, v4/v5 separation."""

import random

import pytest

from pulsar_txn.errors import InvalidTxnId
from pulsar_txn.metastore.keys import ack_key, ack_position
from pulsar_txn.records import BEFORE_EARLIEST, Position, TxnId


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
