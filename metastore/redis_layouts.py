"""The scalable-topic methods of RedisMetadataStore: one DAG per topic.

Why apart: a topic's DAG and its event stream are a slot of their own
(``{<ns>:st:<topic>}``, keys.py), touched by no transaction script; a split or a
merge is one script there (change_layout.lua). The memory backend keeps the same
split (memory_layouts.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence

import redis

from pulsar_txn.errors import ConfigError, TopicNotFound
from pulsar_txn.records import Position, Segment

from .base import LayoutChange, LayoutRecord
from .keys import (
    Keys,
    decode_end,
    decode_segment,
    encode_end,
    encode_segment,
    segment_field,
    segment_of_field,
)
from .replies import LAYOUT, translate
from .scripts import Scripts
from .watch import RedisTopicWatch


class RedisLayouts:
    """Mixed into RedisMetadataStore, which provides the client and the scripts."""

    r: redis.Redis
    keys: Keys
    scripts: Scripts
    event_maxlen: int

    @translate
    def create_topic(self, topic: str, segments: Sequence[Segment], next_id: int,
                     hash_fn: str = "murmur3") -> bool:
        """Create the DAG at epoch 1 with its key hash function; False if the topic
        already exists."""
        k = self.keys
        res = self.scripts.create_topic(keys=[k.topic_dag(topic), k.topic_events(topic)],
                                        args=[self.event_maxlen, next_id, hash_fn,
                                              *map(encode_segment, segments)])
        self.r.sadd(k.topics(), topic)  # listing aid only: the DAG above is the truth
        return res[0] == "OK"

    @translate
    def get_layout(self, topic: str) -> LayoutRecord | None:
        """One read of the DAG, or None. A topic created before the hash function
        was recorded reads as 'crc32' (what it was routed by)."""
        raw = self.r.hgetall(self.keys.topic_dag(topic))
        if not raw:
            return None
        segs = {i: decode_segment(v) for f, v in raw.items()
                if (i := segment_of_field(f)) is not None}
        return LayoutRecord(int(raw["epoch"]), int(raw["next"]), segs, int(raw.get("ver", 0)),
                            raw.get("hash", "crc32"))

    @translate
    def get_segment(self, topic: str, segment_id: int) -> Segment | None:
        raw = self.r.hget(self.keys.topic_dag(topic), segment_field(segment_id))
        return None if raw is None else decode_segment(raw)

    @translate
    def change_layout(self, topic: str, expected_epoch: int, parents: Sequence[int],
                      children: Sequence[Segment], next_id: int) -> LayoutChange:
        """The split/merge CAS (epoch-checked)."""
        k = self.keys
        res = self.scripts.change_layout(
            keys=[k.topic_dag(topic), k.topic_events(topic)],
            args=[expected_epoch, self.event_maxlen, next_id, json.dumps(list(parents)),
                  *map(encode_segment, children)])
        return LayoutChange(LAYOUT[res[0]], res[1] if len(res) > 1 else "")

    @translate
    def seal_end(self, topic: str, segment_id: int, end: Position) -> Position:
        """Fix a sealed segment's last entry once; returns the end that stands."""
        k = self.keys
        res = self.scripts.seal_end(keys=[k.topic_dag(topic), k.topic_events(topic)],
                                    args=[segment_id, encode_end(end), self.event_maxlen])
        if res[0] in ("OK", "ALREADY"):
            return decode_end(res[1])
        if res[0] == "NOTFOUND":
            raise TopicNotFound(f"scalable topic topic://{topic} has no segment {segment_id}")
        raise ConfigError(f"topic://{topic}: segment {segment_id} is still ACTIVE; only a "
                          "sealed segment's end can be fixed")

    @translate
    def list_topics(self) -> list[str]:
        return sorted(self.r.smembers(self.keys.topics()))

    def watch_topics(self, topics: Callable[[], Iterable[str]],
                     callback: Callable[[str | None], None]) -> RedisTopicWatch:
        """Follow the layout events of the topics ``topics()`` names (re-read each turn)."""
        w = RedisTopicWatch(self, topics, callback)
        w.start()
        return w
