"""Which range may go on with a reader a previous range left behind (executor side)."""

from pulsar_txn.records import WHOLE_ENTRY
from pulsar_txn.spark.resources import KeptReaders


class Reader:
    closed = False

    def close(self):
        self.closed = True


def _kept_at(pos, **kw):
    kept, reader = KeptReaders(**kw), Reader()
    kept.give(("c", "seg"), pos, reader)
    return kept, reader


def test_a_range_starting_where_the_reader_stopped_or_a_little_on_gets_it():
    for start in ((7, 10, WHOLE_ENTRY), (7, 11, 4), (7, 10 + 5_000, WHOLE_ENTRY)):
        kept, reader = _kept_at((7, 10, WHOLE_ENTRY))
        assert kept.take(("c", "seg"), start) == (reader, (7, 10, WHOLE_ENTRY)), start
        assert not reader.closed


def test_a_range_starting_before_the_reader_never_gets_it_and_it_is_closed():
    """A reader past the start would miss entries: a replay, a retry, the middle of
    an entry it already read wholly, another ledger, too far to read on to."""
    for start in ((7, 9, WHOLE_ENTRY), (7, 10, 3), (8, 11, WHOLE_ENTRY),
                  (6, 500, WHOLE_ENTRY), (7, 10 + 5_001, WHOLE_ENTRY), (-1, -1, -1)):
        kept, reader = _kept_at((7, 10, WHOLE_ENTRY))
        assert kept.take(("c", "seg"), start) is None, start
        assert reader.closed


def test_other_segments_idle_and_surplus_readers_are_closed():
    kept, reader = _kept_at((7, 10, WHOLE_ENTRY))
    assert kept.take(("c", "other"), (7, 10, WHOLE_ENTRY)) is None
    assert not reader.closed
    kept, reader = _kept_at((7, 10, WHOLE_ENTRY), idle_s=0.0)
    assert kept.take(("c", "other"), (7, 10, WHOLE_ENTRY)) is None
    assert reader.closed  # idle past idle_s: closed at the next take
    kept = KeptReaders(limit=2)
    readers = [Reader() for _ in range(3)]
    for i, r in enumerate(readers):
        kept.give(("c", f"s{i}"), (7, 1, WHOLE_ENTRY), r)
    assert [r.closed for r in readers] == [True, False, False]
    kept.close()
    assert all(r.closed for r in readers)
