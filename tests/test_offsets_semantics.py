"""What a JSON position in ``startingOffsets`` / ``endingOffsets`` means, pinned without a
broker (docs/configuration.md states it in bold): the starting position is the last
message already read (exclusive, unlike Kafka's first offset to read), the ending one the
last message to read (inclusive, unlike Kafka's exclusive end). The option parser, the
batch planner, the streaming initial offset and the scan that reads a planned range are
each checked; integration_tests/test_spark_source.py checks the same on a broker."""

import json
from types import SimpleNamespace

import pulsar

from pulsar_txn.broker_io import scan
from pulsar_txn.records import Position
from pulsar_txn.spark import source_reader
from pulsar_txn.spark.options import SourceOptions
from pulsar_txn.spark.planning import Unit
from pulsar_txn.spark.source_reader import PulsarTxnBatchReader, PulsarTxnStreamReader

T = "persistent://public/default/orders"
OPTS = {"service.url": "pulsar://127.0.0.1:6650", "metastore.url": "redis://127.0.0.1:6379",
        "topic": T, "minPartitions": "1"}


class _Planner:
    """The planner's broker-facing calls, answered for one plain topic."""

    def __init__(self, *_a) -> None:
        pass

    def resolve(self):
        return (T,)

    def all_segments(self, name):
        return [Unit(name, name)]

    def units(self, cur):
        return [Unit(T, T)]

    def gate(self, segment, start, lac=None):
        raise AssertionError("endingOffsets names the end: no gate is asked")

    def first_entry(self, segment):
        return Position(7, 0)

    def topic_of(self, segment):
        return segment

    def close(self) -> None:
        pass


def test_offsets_json_parses_to_positions():
    opts = SourceOptions.from_options({**OPTS, "startingOffsets": json.dumps({T: "7:3"}),
                                       "endingOffsets": json.dumps({T: "7:6:-1"})}, batch=True)
    assert opts.starting == {T: (7, 3, -1)} and opts.ending == {T: (7, 6, -1)}


def test_batch_plan_starts_after_the_starting_position_and_ends_at_the_ending_one(
        monkeypatch):
    monkeypatch.setattr(source_reader, "Planner", _Planner)
    reader = PulsarTxnBatchReader({**OPTS, "startingOffsets": json.dumps({T: "7:3"}),
                                   "endingOffsets": json.dumps({T: "7:6"})})
    [part] = reader.partitions()
    # a SegmentPartition reads (start, end]: start exclusive, end inclusive
    assert (part.segment, part.start, part.end) == (T, "7:3:-1", "7:6:-1")


def test_stream_initial_offset_is_the_starting_position_itself():
    """A streaming query's first batch reads after its initial offset (the last message
    read), so the JSON position is that offset unchanged, not one before it."""
    source = PulsarTxnStreamReader.__new__(PulsarTxnStreamReader)
    source.opts = SimpleNamespace(starting={T: (7, 3, -1)}, starting_timestamp_ms=None)
    source._planner = _Planner()
    assert source.initialOffset() == {T: "7:3:-1"}


class _Id:
    def __init__(self, entry: int) -> None:
        self.pos = (7, entry, -1)  # unbatched entries

    def ledger_id(self):
        return self.pos[0]

    def entry_id(self):
        return self.pos[1]

    def batch_index(self):
        return self.pos[2]


class _Msg:
    def __init__(self, entry: int) -> None:
        self._id = _Id(entry)

    def message_id(self):
        return self._id


class _Client:
    """A reader opened at an entry (inclusive) reads on from it: entries 0..9 exist."""

    def create_reader(self, _topic, start, **_kw):
        first = 0 if start.entry_id() < 0 else start.entry_id()
        script = [_Msg(e) for e in range(first, 10)]

        def read_next(_timeout_ms):
            if not script:
                raise pulsar.Timeout()
            return script.pop(0)

        return SimpleNamespace(_reader=SimpleNamespace(read_next=read_next),
                               is_connected=lambda: True, close=lambda: None)


def test_a_planned_range_reads_after_its_start_up_to_and_with_its_end():
    """startingOffsets {T: "7:3"} and endingOffsets {T: "7:6"} read entries 4, 5, 6
    (Kafka's meaning of the same numbers would read 3, 4, 5)."""
    got = [pos[1] for pos, _ in scan(_Client(), T, (7, 3, -1), (7, 6, -1), timeout_ms=100)]
    assert got == [4, 5, 6]
