"""The state machine table: legal moves, idempotent repeats, refused moves."""

import pytest

from pulsar_txn.errors import InvalidTxnTransition
from pulsar_txn.state import ALLOWED, TxnState, check_transition


def test_open_moves_to_either_terminal_state():
    assert check_transition("t", TxnState.OPEN, TxnState.COMMITTED) is True
    assert check_transition("t", TxnState.OPEN, TxnState.ABORTED) is True


@pytest.mark.parametrize("state", [TxnState.COMMITTED, TxnState.ABORTED])
def test_repeating_an_end_is_a_no_op(state):
    assert check_transition("t", state, state) is False


@pytest.mark.parametrize("current,target", [
    (TxnState.COMMITTED, TxnState.ABORTED),
    (TxnState.ABORTED, TxnState.COMMITTED),
    (TxnState.COMMITTED, TxnState.OPEN),
    (TxnState.ABORTED, TxnState.OPEN),
    (TxnState.OPEN, TxnState.OPEN),
])
def test_illegal_moves_raise_and_name_the_states(current, target):
    with pytest.raises(InvalidTxnTransition) as e:
        check_transition("v5:1:2", current, target)
    assert (e.value.current, e.value.target) == (current.value, target.value)


def test_terminal_states_allow_nothing():
    assert all(not ALLOWED[s] for s in TxnState if s.is_terminal)
    assert not TxnState.OPEN.is_terminal
