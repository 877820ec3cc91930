"""Planning of source partitions: splits stay inside one ledger and cover the range."""

from pulsar_txn.records import Position
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
                            first_entry=lambda t: Position(7, 0))
    assert [(p.start, p.end) for p in parts] == [
        (f"7:-1:{WHOLE_ENTRY}", f"7:49:{WHOLE_ENTRY}"), (f"7:49:{WHOLE_ENTRY}",
                                                         f"7:99:{WHOLE_ENTRY}")]


def test_plan_uses_every_core_by_default_but_never_cuts_tiny_pieces(monkeypatch):
    """Without ``minPartitions`` a big range is read by one task per core of the
    machine (Spark runs them side by side); a small one stays one task, since a task
    costs more than a few entries."""
    import pulsar_txn.spark.offsets as offsets

    monkeypatch.setattr(offsets, "cores", lambda: 4)
    big = plan_partitions({"t": f"7:-1:{WHOLE_ENTRY}"}, {"t": f"7:999:{WHOLE_ENTRY}"}, None)
    assert len(big) == 4
    assert _entries([(tuple(map(int, p.start.split(":"))), tuple(map(int, p.end.split(":"))))
                     for p in big]) == list(range(0, 1000))
    few = offsets.AUTO_MIN_ENTRIES * 2
    mid = plan_partitions({"t": f"7:-1:{WHOLE_ENTRY}"}, {"t": f"7:{few - 1}:{WHOLE_ENTRY}"},
                          None)
    assert len(mid) == 2  # 4 cores, but no piece under AUTO_MIN_ENTRIES entries
    tiny = plan_partitions({"t": f"7:-1:{WHOLE_ENTRY}"}, {"t": f"7:5:{WHOLE_ENTRY}"}, None)
    assert len(tiny) == 1
    asked = plan_partitions({"t": f"7:-1:{WHOLE_ENTRY}"}, {"t": f"7:5:{WHOLE_ENTRY}"}, 3)
    assert len(asked) == 3  # an explicit minPartitions is obeyed as before


def test_min_partitions_option_defaults_to_automatic():
    from pulsar_txn.spark.options import SourceOptions

    opts = SourceOptions.from_options({"service.url": "pulsar://127.0.0.1:6650",
                                       "metastore.url": "redis://127.0.0.1:6379",
                                       "topic": "persistent://public/default/t"})
    assert opts.min_partitions is None


def test_an_automatic_split_never_fails_a_plan_a_requested_one_may():
    """Placing a range that starts before the earliest entry needs the first entry: if
    that cannot be read now, an automatic split reads the range whole instead."""
    import pytest

    from pulsar_txn.errors import BrokerUnavailable

    def first_entry(_t):
        raise BrokerUnavailable("no answer")

    whole = plan_partitions({"t": "-1:-1:-1"}, {"t": f"7:999:{WHOLE_ENTRY}"}, None,
                            first_entry=first_entry)
    assert [(p.start, p.end) for p in whole] == [("-1:-1:-1", f"7:999:{WHOLE_ENTRY}")]
    with pytest.raises(BrokerUnavailable):
        plan_partitions({"t": "-1:-1:-1"}, {"t": f"7:999:{WHOLE_ENTRY}"}, 2,
                        first_entry=first_entry)


def test_cores_follow_the_process_affinity():
    import os

    import pulsar_txn.spark.offsets as offsets

    if hasattr(os, "sched_getaffinity"):
        assert offsets.cores() == len(os.sched_getaffinity(0))


def test_a_streaming_micro_batch_is_split_only_when_it_is_a_backlog(monkeypatch):
    """A streaming query's usual micro-batch (a trigger's worth of entries) stays one
    task per segment: two tasks cost two tasks' start-up each trigger, and readers a
    worker keeps would each read the whole stream. Only a backlog (many entries) is
    split; a batch query's range is split from a few entries on."""
    import pulsar_txn.spark.offsets as offsets

    monkeypatch.setattr(offsets, "cores", lambda: 2)
    trigger = {"t": f"7:{offsets.STREAM_MIN_ENTRIES * 2 - 2}:{WHOLE_ENTRY}"}
    start = {"t": f"7:-1:{WHOLE_ENTRY}"}
    assert len(plan_partitions(start, trigger, None, streaming=True)) == 1
    assert len(plan_partitions(start, trigger, None)) == 2
    backlog = {"t": f"7:{offsets.STREAM_MIN_ENTRIES * 2 - 1}:{WHOLE_ENTRY}"}
    assert len(plan_partitions(start, backlog, None, streaming=True)) == 2
    assert len(plan_partitions(start, trigger, 2, streaming=True)) == 2  # asked for
