"""The end of a range inside a batched entry: a scan stops after the entry's last
message, never earlier, also when the reader is re-opened inside that entry.

The broker is a scripted stand-in (its answers, in order, are the test); the real
broker's behaviour on these paths is covered by integration_tests/test_source_ranges.
"""

import pulsar

from pulsar_txn.broker_io import scan


class _Id:
    def __init__(self, ledger: int, entry: int, index: int, size: int) -> None:
        self.pos, self.size = (ledger, entry, index), size

    def ledger_id(self) -> int:
        return self.pos[0]

    def entry_id(self) -> int:
        return self.pos[1]

    def batch_index(self) -> int:
        return self.pos[2]

    def serialize(self) -> bytes:
        return bytes([6 << 3, self.size])  # MessageIdData field 6: the batch's size


class _Message:
    def __init__(self, mid: _Id) -> None:
        self._id = mid

    def message_id(self) -> _Id:
        return self._id


class _Native:
    """Answers read_next from a script: a message, an exception to raise, or (delay in
    ms, message): a message that arrives only for a caller waiting that long."""

    def __init__(self, script: list) -> None:
        self.script, self.waits = script, []

    def read_next(self, timeout_ms: int):
        self.waits.append(timeout_ms)
        if not self.script:
            raise pulsar.Timeout()
        step = self.script[0]
        if isinstance(step, tuple):
            delay, step = step
            if timeout_ms < delay:
                raise pulsar.Timeout()  # still on its way; asked again, it comes
        self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


class _Reader:
    def __init__(self, script: list) -> None:
        self._reader = _Native(script)

    def is_connected(self) -> bool:
        return True

    def close(self) -> None:
        pass


class _Client:
    def __init__(self, *scripts: list) -> None:
        self.scripts, self.readers = list(scripts), []

    def create_reader(self, _topic, _start, **_kw):
        self.readers.append(_Reader(self.scripts.pop(0)))
        return self.readers[-1]


def _batch(ledger: int, entry: int, size: int) -> list[_Message]:
    return [_Message(_Id(ledger, entry, i, size)) for i in range(size)]


def test_a_reader_reopened_inside_the_end_entry_reads_the_rest_of_it():
    """The connection drops after the end entry's first message; the new reader's
    redelivery of that entry is slow (a reconnect takes longer than the short wait for
    'nothing more of this entry'). The scan must still return all three messages: the
    short wait is for an entry whose size is unknown, not for one known to hold more."""
    entry = _batch(5, 9, 3)
    client = _Client([entry[0], pulsar.NotConnected()],
                     [(1_000, entry[0]), *entry[1:]])  # the redelivery takes 1 s
    got = [pos for pos, _ in scan(client, "seg", (5, 8, 2**31 - 1), (5, 9, 2**31 - 1),
                                  timeout_ms=30_000, batch_end_wait_ms=200)]
    assert got == [(5, 9, 0), (5, 9, 1), (5, 9, 2)]


def test_an_end_entry_of_unknown_size_ends_after_a_short_wait():
    entry = [_Message(_Id(5, 9, i, 0)) for i in range(2)]  # size 0: not known
    client = _Client([*entry])
    got = [pos for pos, _ in scan(client, "seg", (5, 8, 2**31 - 1), (5, 9, 2**31 - 1),
                                  timeout_ms=30_000, batch_end_wait_ms=200)]
    assert got == [(5, 9, 0), (5, 9, 1)]
    assert client.readers[0]._reader.waits[-1] == 200


def test_an_end_entry_known_to_hold_more_is_never_taken_as_complete():
    """Two of three messages of the end entry arrive, the third does not: the range
    is read again later (BrokerUnavailable), never ended short or called lost."""
    import pytest

    from pulsar_txn.errors import BrokerUnavailable

    entry = _batch(5, 9, 3)
    client = _Client(entry[:2])
    got = []
    with pytest.raises(BrokerUnavailable, match="holds 3 messages"):
        for pos, _ in scan(client, "seg", (5, 8, 2**31 - 1), (5, 9, 2**31 - 1),
                           timeout_ms=30_000, batch_end_wait_ms=200):
            got.append(pos)
    assert got == [(5, 9, 0), (5, 9, 1)]


def _one(ledger: int, entry: int) -> _Message:
    return _Message(_Id(ledger, entry, -1, 0))


class _Kept:
    """A kept reader stopped at ``stopped`` (KeptReaders' take/give, for one key)."""

    def __init__(self, reader, stopped) -> None:
        self.taken, self.given = (reader, stopped), None

    def take(self, _key, _start):
        taken, self.taken = self.taken, None
        return taken

    def give(self, _key, end, reader) -> None:
        self.given = (end, reader)


def test_a_kept_reader_behind_the_start_reads_on_and_is_kept_again():
    """Two Python workers take a segment's micro-batches in turns: each worker's reader
    is one batch behind the next start. Reading on through the other worker's range
    costs less than a new reader (pulsar-lite keeps every closed reader for good)."""
    behind = _Reader([_one(7, e) for e in range(1, 12)])
    client, kept = _Client(), _Kept(behind, (7, 0, -1))
    got = [pos for pos, _ in scan(client, "seg", (7, 10, -1), (7, 11, -1), kept=kept)]
    assert got == [(7, 11, -1)] and client.readers == [] and kept.given[1] is behind


def test_a_kept_reader_too_far_behind_is_swapped_for_one_at_the_start():
    """Past ``kept_drop_limit`` messages before the start (big batched entries), the
    scan stops reading on and opens a reader at the start: a bounded cost either way."""
    behind = _Reader([_one(7, e) for e in range(1, 12)])
    client, kept = _Client([_one(7, 10), _one(7, 11)]), _Kept(behind, (7, 0, -1))
    got = [pos for pos, _ in scan(client, "seg", (7, 10, -1), (7, 11, -1), kept=kept,
                                  kept_drop_limit=4)]
    assert got == [(7, 11, -1)]
    left = [m.message_id().pos for m in behind._reader.script]
    assert len(client.readers) == 1 and left == [(7, e, -1) for e in range(6, 12)]
    assert kept.given[1] is client.readers[0]
