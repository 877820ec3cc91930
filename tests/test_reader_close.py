"""Closing a READ_COMMITTED reader whose connection is gone does not raise.

A reader of a sealed segment is closed by the scalable reader as soon as it is read
to its end; pulsar-client 3.x then often has no connection for it (the broker's
end-of-topic command makes it reset the connection, see docs/durability.md) and its
close answers NotConnected. The broker dropped that reader with the connection, so
there is nothing left to close, and the read that finished the segment must go on.
"""

from __future__ import annotations

from types import SimpleNamespace

import pulsar
import pytest

from pulsar_txn.readers import Reader


class _NativeReader:
    def __init__(self, error: Exception | None) -> None:
        self._reader, self._error, self.closed = self, error, 0

    def close(self) -> None:
        self.closed += 1
        if self._error is not None:
            raise self._error


def _reader(error: Exception | None) -> tuple[Reader, _NativeReader]:
    native = _NativeReader(error)
    side = SimpleNamespace(pulsar=SimpleNamespace(create_reader=lambda *a, **k: native))
    return Reader(side, "persistent://public/default/sealed"), native


@pytest.mark.parametrize("gone", [pulsar.NotConnected("NotConnected"),
                                  pulsar.AlreadyClosed("AlreadyClosed")])
def test_closing_a_reader_whose_connection_is_gone_does_not_raise(gone):
    reader, native = _reader(gone)
    reader.close()
    assert native.closed == 1


def test_any_other_close_failure_is_still_raised():
    reader, _ = _reader(pulsar.Timeout("Timeout"))
    with pytest.raises(pulsar.Timeout):
        reader.close()
