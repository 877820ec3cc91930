"""Every Redis key the project uses is built here.

Slot layout (Redis Cluster): all records of one transaction *and* every
per-partition index that its scripts update carry the hash tag ``{<ns>:<p>}``,
where ``p = partition(txn)``. One Lua script can therefore touch the header, the
write/ack records, the per-segment open-write index, the aborted-writer set, the
deadline/finalized indexes and the event stream of partition ``p`` atomically.
Readers that need a per-segment view query all P partitions and merge.

The only keys outside a partition slot are the pending-ack claim tables, one
slot per (segment, subscription): conflicts between transactions of different
partitions must be decided in one place; and each scalable topic's DAG with its
event stream, one slot per topic ``{<ns>:st:<topic>}``, so a split or merge
(seal parents + create children + bump the epoch) is one script.
"""

from __future__ import annotations

POSITION_WIDTH = 16  # hex digits per ledgerId / entryId: lexicographic == numeric
SEP = "|"


def long_key(n: int) -> str:
    """Fixed-width hex so that lexicographic order equals numeric order (>= 0)."""
    return format(n, f"0{POSITION_WIDTH}x")


class Keys:
    """Key builder for one deployment (``ns`` is the per-deployment prefix)."""

    def __init__(self, ns: str, partitions: int) -> None:
        if not ns or any(c in ns for c in "{}"):
            raise ValueError(f"metastore key prefix {ns!r} must be non-empty and contain no braces")
        self.ns = ns
        self.partitions = partitions

    # ---- deployment-wide ----
    def config(self) -> str:
        return f"{self.ns}:config"

    # ---- partition slot ``{ns:p}`` ----
    def tag(self, p: int) -> str:
        return f"{{{self.ns}:{p}}}"

    def seq(self, p: int) -> str:
        return f"{self.tag(p)}:seq"

    def header(self, p: int, seq: int) -> str:
        return f"{self.tag(p)}:h:{seq}"

    def writes(self, p: int, seq: int) -> str:
        return f"{self.tag(p)}:w:{seq}"

    def acks(self, p: int, seq: int) -> str:
        return f"{self.tag(p)}:a:{seq}"

    def open_writes(self, p: int, segment: str) -> str:
        """Sorted set (lex) of OPEN writes on a segment: ``pos|seq|writer``."""
        return f"{self.tag(p)}:ow:{segment}"

    def aborted_writers(self, p: int, segment: str) -> str:
        """Set of ``seq|writer`` whose entries on the segment must never show (H2)."""
        return f"{self.tag(p)}:ab:{segment}"

    def live(self, p: int) -> str:
        """Sorted set of ids whose header exists (by seq): the oldest pins the watermark."""
        return f"{self.tag(p)}:live"

    def gc(self, p: int) -> str:
        """Hash ``w``: every id at or below is collected or can never be created;
        ``run``: the server run this state was last used on (a change opens a gap)."""
        return f"{self.tag(p)}:gc"

    def collected(self, p: int) -> str:
        """Sorted set of collected ids the watermark does not cover yet."""
        return f"{self.tag(p)}:gcs"

    def gaps(self, p: int) -> str:
        """Sorted set ``first:last`` of id ranges that may have been lost: never collected."""
        return f"{self.tag(p)}:gaps"

    def deadlines(self, p: int) -> str:
        return f"{self.tag(p)}:dl"

    def finalized(self, p: int) -> str:
        return f"{self.tag(p)}:fin"

    def unmaterialized(self, p: int) -> str:
        """Ended txns whose segment indexes are not cleaned yet (by end time)."""
        return f"{self.tag(p)}:um"

    def events(self, p: int) -> str:
        return f"{self.tag(p)}:ev"

    def counters(self, p: int) -> str:
        """Hash: opened, committed, aborted, timed_out (kept by the scripts, exact)."""
        return f"{self.tag(p)}:n"

    def fsync_mark(self, p: int) -> str:
        """A counter a repeated end (waitaof) writes so WAITAOF covers the earlier
        decision too: the AOF is written and fsynced in order."""
        return f"{self.tag(p)}:fs"

    def owners(self, p: int) -> str:
        """Hash owner → txn seq, so a Spark sink finds the txn of (sink id, batchId)."""
        return f"{self.tag(p)}:own"

    def sink(self, p: int, sink_id: str) -> str:
        """A Spark sink's progress: ``batch``, ``txn``, ``qid`` (the query it belongs to).
        In the partition of the sink's transactions, so the commit CAS advances it."""
        return f"{self.tag(p)}:sink:{sink_id}"

    # ---- scalable topic slot ``{ns:st:<tenant/ns/name>}`` ----
    def topic_tag(self, topic: str) -> str:
        return f"{{{self.ns}:st:{topic}}}"

    def topic_dag(self, topic: str) -> str:
        """Hash: ``epoch``, ``next`` (segment id), ``created``, ``seg:<id>`` → descriptor."""
        return f"{self.topic_tag(topic)}:dag"

    def topic_events(self, topic: str) -> str:
        return f"{self.topic_tag(topic)}:ev"

    def topics(self) -> str:
        """Set of scalable topics of the deployment (a listing aid; the DAG is the truth)."""
        return f"{self.ns}:topics"

    # ---- pending-ack slot, one per (segment, subscription) ----
    def ack_claims(self, segment: str, subscription: str) -> str:
        return f"{{{self.ns}:pa:{segment}{SEP}{subscription}}}"
