"""Planning of source partitions: splits stay inside one ledger and cover the range."""

from pulsar_txn.spark.offsets import BEFORE, WHOLE_ENTRY, _split, plan_partitions


def _entries(ranges):
    """Entries (ledger 7) each range covers, for ranges inside ledger 7."""
    out = []
    for lo, hi in ranges:
        out += list(range(lo[1] + 1, hi[1] + 1))
    return out


def test_split_covers_the_range_exactly_once():
    start, end = (7, 9, WHOLE_ENTRY), (7, 109, WHOLE_ENTRY)
    for pieces in (1, 2, 3, 7):
        ranges = _split(start, end, pieces)
        assert len(ranges) == pieces
        assert _entries(ranges) == list(range(10, 110))
        assert ranges[0][0] == start and ranges[-1][1] == end


def test_ranges_across_ledgers_or_from_before_earliest_are_not_split():
    assert _split((7, 9, WHOLE_ENTRY), (8, 5, WHOLE_ENTRY), 4) == [((7, 9, WHOLE_ENTRY),
                                                                     (8, 5, WHOLE_ENTRY))]
    assert _split(BEFORE, (7, 50, WHOLE_ENTRY), 4) == [(BEFORE, (7, 50, WHOLE_ENTRY))]


def test_plan_places_before_earliest_to_split_it():
    parts = plan_partitions({"t": "-1:-1:-1"}, {"t": f"7:99:{WHOLE_ENTRY}"}, 2,
                            first_entry=lambda t: (7, 0))
    assert [(p.start, p.end) for p in parts] == [
        (f"7:-1:{WHOLE_ENTRY}", f"7:49:{WHOLE_ENTRY}"), (f"7:49:{WHOLE_ENTRY}",
                                                         f"7:99:{WHOLE_ENTRY}")]
