"""Every append's outcome from one acknowledgement per broker entry, not per message.

pulsar-client 3.x reports a send's outcome only through a per-message Python callback,
and each one costs a GIL round-trip from the client's I/O thread: a producer that
writes ~200k msg/s without callbacks writes ~36k msg/s with a callback that does
nothing (docs/benchmarks.md). Yet a batching producer stores its messages as entries,
each the whole of one batch, stored or refused as one, and the callback of a batch's
message says where in its entry that message sits (its batch index). So the callback
of the *last* message of each batch tells the fate of the whole batch.

The batches are formed by fixed rules of the C++ producer (a batch is sent when it
holds ``batching_max_messages``, or when the next message would take its payload
bytes past ``batching_max_allowed_size_in_bytes``; the time trigger is set far away
by the producer's owner), so the last message of each batch can be foreseen, and it
alone gets a callback; so does the last message of every hand-over, which covers
whatever a later hand-over's first message may do to the open batch.

Nothing relies on that foresight being right. The callback of message ``s`` says its
entry, its batch index ``i`` and the entry's size ``n``: the entry holds messages
``s-i .. s-i+n-1`` of the run, provided no other message went through the producer
since the run began with an empty batch (the owner's promise: the producer is the
run's alone, flushed before the run's first message). :meth:`EntryAcks.verify`
requires the entries heard of to tile every message sent, each exactly once. A batch
cut where it was not foreseen leaves messages that no entry is known to hold. A
message the producer refused without a word (it has no callback to say so) shifts the
indexes after it in its batch, so the entry's span no longer fits between its
neighbours'. Either way the run fails as a refused append would: fail closed, and
Spark writes the batch again.
"""

from __future__ import annotations

import threading

import pulsar

from pulsar_txn.broker_io import batch_size

# The broker answered a send without a position (see writer.NO_POSITION).
_NO_POSITION = ("was acknowledged by the broker without a position (its deduplication "
                "took it for a re-send): whether it is stored is unknown")


class EntryAcks:
    """The outcome of a run of asynchronous sends on one producer, entry by entry."""

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        if max_messages < 1 or max_bytes < 1:
            raise ValueError("a batching producer's limits must be positive")
        self._max_n, self._max_b = max_messages, max_bytes
        self.sent = 0  # messages handed to the producer so far, numbered from 0
        self._n = 0    # ... of them in the producer's open batch, by its rules
        self._b = 0    # their payload bytes
        # (ledger, entry, first message, size) per callback of a stored entry
        self.heard: list[tuple[int, int, int, int | None]] = []
        self.unforeseen = False  # verify found batches cut where ends() did not say
        self.errors: list[str] = []
        self._outstanding = 0
        self._count = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()

    def ends(self, lengths: list[int]) -> list[int]:
        """The positions in ``lengths`` (the payload sizes of the messages about to be
        handed over, in order) whose message ends a batch, as the producer will cut
        them, and the last one in any case; advances the open batch's state past them."""
        n, b, max_n, max_b = self._n, self._b, self._max_n, self._max_b
        out = []
        for j, size in enumerate(lengths):
            if n and (n >= max_n or b + size > max_b):
                if j:  # (at 0 it ended the last hand-over, whose last has a callback)
                    out.append(j - 1)  # no room for this one: the batch was sent before it
                n = b = 0
            n += 1
            b += size
            if n >= max_n or b >= max_b:
                out.append(j)  # full: sent as this one is added
                n = b = 0
        if lengths:
            out.append(len(lengths) - 1)
        self._n, self._b = n, b
        return sorted(set(out))

    def cut(self) -> None:
        """The producer's open batch was sent by its owner (a flush) right after a
        hand-over of this run, whose last message has a callback: the next message
        starts a batch."""
        self._n = self._b = 0

    def callback(self, seq: int):
        """The callback of message ``seq`` (counted once, waited for by :meth:`wait`)."""
        with self._count:
            self._outstanding += 1
            self._idle.clear()

        def done(res, msg_id, _ok=pulsar.Result.Ok) -> None:
            try:
                if res != _ok:
                    self.errors.append(f"an entry's appends failed: {res}")
                elif msg_id.entry_id() < 0:
                    self.errors.append(f"an entry {_NO_POSITION}")
                else:
                    index = msg_id.batch_index()
                    size = batch_size(msg_id) if index >= 0 else 1
                    self.heard.append((msg_id.ledger_id(), msg_id.entry_id(),
                                       seq - max(index, 0), size))
            finally:
                with self._count:
                    self._outstanding -= 1
                    if self._outstanding <= 0:
                        self._idle.set()

        return done

    def wait(self, timeout_s: float) -> bool:
        """Every callback given out has run (False: some did not in ``timeout_s``)."""
        return self._idle.wait(timeout_s)

    @property
    def outstanding(self) -> int:
        return self._outstanding

    def verify(self) -> list[str]:
        """What is wrong with the run's outcome: the failures heard, then whatever keeps
        the entries heard of from holding every message sent exactly once. Empty: every
        message sent is stored."""
        problems = list(self.errors)
        if problems:
            return problems
        # one span per entry (an entry with two callbacks, a hand-over's end inside it,
        # is counted once); a refusal inside an entry moves its span off the messages
        # it holds at one end or the other, and the tiling below finds the hole
        entries: dict[tuple[int, int], tuple[int, int | None]] = {}
        for ledger, entry, first, size in self.heard:
            entries.setdefault((ledger, entry), (first, size))
        covered = 0  # messages 0 .. covered-1 are in confirmed entries
        for (ledger, entry), (first, size) in sorted(entries.items(), key=lambda e: e[1][0]):
            if size is None:  # (a client that does not say it: fall back to per message)
                self.unforeseen = True
                return [f"entry {ledger}:{entry}: its size is unknown, so which messages it "
                        "holds is unknown"]
            if first != covered:
                break
            covered = first + size
        if covered != self.sent:
            self.unforeseen = True
            return [f"of {self.sent} messages sent, only the first {min(covered, self.sent)} "
                    "are known to be in entries the broker acknowledged (a batch was cut "
                    "where it was not foreseen, or a message was refused without a "
                    "callback): the outcome of the rest is unknown"]
        return []


def send_columns(producer, values: list, keys: list | None, properties: list | None,
                 event_times: list | None, base: dict, done, entries: EntryAcks | None,
                 start: int = 0) -> None:
    """Build and send ``values[start:]`` natively and in order: the one hot loop of the
    Spark sink's runs, transactional or not. ``base``: the properties every message
    carries (the transaction's; the usual one set by name, cheaper than a map), under a
    message's own; ``entries``: a callback only on the message that ends each entry,
    else ``done`` on every one. ``keys``/``properties``/``event_times``: per message,
    or None for none. Skips pulsar-client's per-call wrapper (argument checks)."""
    import _pulsar

    native, builder, n = producer._producer, _pulsar.MessageBuilder, len(values)
    one = next(iter(base.items())) if len(base) == 1 else None
    ends: set | tuple = ()
    callback = None
    if entries is not None:
        ends = {start + e for e in entries.ends([len(v) for v in values[start:]])}
        seq0 = entries.sent - start  # the run's number of values[start] is seq0 + start
        entries.sent += n - start
        callback, done = entries.callback, None
    for j in range(start, n):
        mb = builder()
        mb.content(values[j])
        extra = properties[j] if properties is not None else None
        if extra:
            mb.properties({**extra, **base} if base else extra)
        elif one is not None:
            mb.property(*one)
        elif base:
            mb.properties(base)
        if keys is not None and keys[j]:
            mb.partition_key(keys[j])
        if event_times is not None and event_times[j]:
            mb.event_timestamp(event_times[j])
        native.send_async(mb.build(), callback(seq0 + j) if j in ends else done)
