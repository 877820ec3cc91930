"""max_read_position is one pure function: each rule, and that it never goes back."""

from pulsar_txn.buffer import max_read_position
from pulsar_txn.records import BEFORE_EARLIEST, OpenWrite, Position, TxnId

T1, T2 = TxnId(0, 1), TxnId(1, 2)


def test_no_open_writes_gate_is_what_was_received():
    assert max_read_position(Position(1, 10), [], BEFORE_EARLIEST) == Position(1, 10)


def test_open_txn_append_pins_max_read_position():
    ow = [OpenWrite(T1, "w", Position(1, 4)), OpenWrite(T2, "w", Position(1, 7))]
    assert max_read_position(Position(1, 10), ow, BEFORE_EARLIEST) == Position(1, 3)


def test_pending_registration_holds_gate_for_readers_that_cannot_place_it():
    ow = [OpenWrite(T1, "w", None)]
    assert max_read_position(Position(1, 10), ow, Position(1, 2)) == Position(1, 2)


def test_pending_registration_placed_by_in_order_reader():
    ow = [OpenWrite(T1, "w", None)]
    held = {(T1, "w"): Position(1, 6)}
    assert max_read_position(Position(1, 10), ow, BEFORE_EARLIEST,
                             lambda t, w: held.get((t, w))) == Position(1, 5)
    # not among the received entries: its append lies beyond them
    assert max_read_position(Position(1, 10), ow, BEFORE_EARLIEST,
                             lambda t, w: None) == Position(1, 10)


def test_gate_never_moves_backwards():
    ow = [OpenWrite(T1, "w", Position(1, 4))]
    assert max_read_position(Position(1, 10), ow, Position(1, 8)) == Position(1, 8)
