"""The scalable-topic methods of the in-memory store: one DAG per topic.

Why apart: a topic's layout is its own slot in Redis (keys.py), touched by no
transaction script, and these methods follow create_topic.lua, change_layout.lua
and seal_end.lua, each one atomic under the store's lock. Descriptors are kept as
the JSON the scripts would hold (keys.encode_segment); a sealed parent is re-encoded,
as the scripts re-encode it (cjson writes an empty list as ``{}``; readers accept
both), and callers get ``Segment`` records.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence

from pulsar_txn.errors import ConfigError, TopicNotFound
from pulsar_txn.records import Position, Segment
from pulsar_txn.state import SegmentState

from .base import LayoutChange, LayoutRecord, LayoutVerdict
from .keys import decode_end, decode_segment, encode_end, encode_segment
from .memory_state import Server, Topic, decode
from .memory_watch import MemoryTopicWatch


class Layouts:
    """Mixed into MemoryMetadataStore, which provides the state and its watches."""

    _s: Server
    _watches: list

    def create_topic(self, topic: str, segments: Sequence[Segment], next_id: int,
                     hash_fn: str = "murmur3") -> bool:
        """create_topic.lua: epoch 1; False if the topic exists."""
        segs = {int(decode(raw)["id"]): raw for raw in map(encode_segment, segments)}
        with self._s.lock:
            self._s.topic_names.add(topic)
            if topic in self._s.topics:
                return False
            self._s.topics[topic] = Topic(segs, int(next_id), self._s.now(), hash_fn)
            self._s.publish_topic(topic)
            return True

    def get_layout(self, topic: str) -> LayoutRecord | None:
        with self._s.lock:
            t = self._s.topics.get(topic)
            if t is None:
                return None
            segs = dict(t.segs)
            record = t.epoch, t.next, t.version, t.hash_fn
        epoch, nxt, version, hash_fn = record
        return LayoutRecord(epoch, nxt, {i: decode_segment(raw) for i, raw in segs.items()},
                            version, hash_fn)

    def get_segment(self, topic: str, segment_id: int) -> Segment | None:
        with self._s.lock:
            t = self._s.topics.get(topic)
            raw = None if t is None else t.segs.get(int(segment_id))
        return None if raw is None else decode_segment(raw)

    def change_layout(self, topic: str, expected_epoch: int, parents: Sequence[int],
                      children: Sequence[Segment], next_id: int) -> LayoutChange:
        """change_layout.lua: seal the parents, create the children, bump the epoch."""
        children = [encode_segment(c) for c in children]
        kids = [decode(raw) for raw in children]
        with self._s.lock:
            t = self._s.topics.get(topic)
            if t is None:
                return LayoutChange(LayoutVerdict.NOT_FOUND)
            if str(t.epoch) != str(expected_epoch):
                return LayoutChange(LayoutVerdict.STALE, str(t.epoch))
            if any(int(d["id"]) in t.segs for d in kids):
                return LayoutChange(LayoutVerdict.STALE, str(t.epoch))
            descs = []
            for pid in parents:
                d = decode(t.segs[int(pid)]) if int(pid) in t.segs else None
                if d is None or d.get("state") != SegmentState.ACTIVE.value:
                    return LayoutChange(LayoutVerdict.NOT_ACTIVE, str(pid))
                descs.append(d)
            epoch, now, kid_ids = t.epoch + 1, self._s.now(), [k["id"] for k in kids]
            for d in descs:
                d.update(state=SegmentState.SEALED.value, se=epoch, st=now, children=kid_ids)
                t.segs[int(d["id"])] = json.dumps(d, separators=(",", ":"))
            for d, raw in zip(kids, children):
                t.segs[int(d["id"])] = raw
            t.epoch, t.next, t.version = epoch, int(next_id), t.version + 1
            self._s.publish_topic(topic)
            return LayoutChange(LayoutVerdict.APPLIED, str(epoch))

    def seal_end(self, topic: str, segment_id: int, end: Position) -> Position:
        """seal_end.lua: the first caller's end stands."""
        return decode_end(self._seal_end(topic, segment_id, encode_end(end)))

    def _seal_end(self, topic: str, segment_id: int, end: str) -> str:
        with self._s.lock:
            t = self._s.topics.get(topic)
            raw = t.segs.get(int(segment_id)) if t else None
            if raw is None:
                raise TopicNotFound(f"scalable topic topic://{topic} has no segment {segment_id}")
            d = decode(raw)
            if d.get("state") != SegmentState.SEALED.value:
                raise ConfigError(f"topic://{topic}: segment {segment_id} is still ACTIVE; only "
                                  "a sealed segment's end can be fixed")
            if d.get("end"):
                return d["end"]
            d["end"] = end
            t.segs[int(segment_id)] = json.dumps(d, separators=(",", ":"))
            t.version += 1
            self._s.publish_topic(topic)
            return end

    def list_topics(self) -> list[str]:
        with self._s.lock:
            return sorted(self._s.topic_names)

    def watch_topics(self, topics: Callable[[], Iterable[str]],
                     callback: Callable[[str | None], None]) -> MemoryTopicWatch:
        w = MemoryTopicWatch(self._s.topic_watches, self._s.lock, topics, callback).begin()
        self._watches.append(w)
        return w
