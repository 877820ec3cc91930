"""The pending-ack methods of RedisMetadataStore: claim tables and ack records.

Why apart: the claim tables live outside the transaction slots (one slot per
(segment, subscription), keys.py), so these methods share nothing with the
transaction scripts but the header fence of ``record_acks``; and the memory
backend keeps the same split (memory_acks.py), so the two read side by side.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

import redis

from pulsar_txn.records import Position, TxnId

from .claims import AckRecord, Claims, ClaimView
from .keys import (
    Keys,
    ack_conflict,
    ack_key,
    claim_fields,
    claim_view_fields,
    decode_ack_record,
    decode_claim_view,
    decode_claims,
    record_field,
    split_record_field,
    tombstone_arg,
)
from .redis_tracking import ClaimTracking, RedisClaimReads
from .replies import raise_txn_status, translate
from .scripts import Scripts


class RedisAcks:
    """Mixed into RedisMetadataStore, which provides the client and the scripts."""

    r: redis.Redis
    keys: Keys
    scripts: Scripts
    url: str
    pool: redis.ConnectionPool | None  # None: a cluster (a pool per node)

    def pool_of(self, key: str) -> redis.ConnectionPool:
        """The connection pool of the server (cluster node) that holds ``key``."""
        return (self.pool if self.pool is not None
                else self.r.get_node_from_key(key).redis_connection.connection_pool)

    @functools.cached_property
    def claim_tracking(self) -> ClaimTracking:
        return ClaimTracking(self.pool_of)

    def close_claim_tracking(self) -> None:
        tracking = vars(self).get("claim_tracking")  # made on first use only
        if tracking is not None:
            tracking.close()

    @translate
    def claim_acks(self, txn_id: TxnId, segment: str, subscription: str,
                   positions: Sequence[Position], cumulative: bool,
                   given: Sequence[Position] = ()) -> None:
        res = self.scripts.claim_acks(
            keys=[self.keys.ack_claims(segment, subscription)],
            args=[str(txn_id), "cum" if cumulative else "ind", *map(ack_key, positions),
                  *(map(ack_key, given) if cumulative else ())])
        if res[0] == "CONFLICT":
            raise ack_conflict(res[1], res[2], committed=res[3] == "COMMITTED")

    @translate
    def release_acks(self, holder: TxnId, segment: str, subscription: str,
                     positions: Sequence[Position] = (), committed: bool = False,
                     cumulative: bool = False) -> int:
        """Settle a holder's claims: delete them, or (``committed``) turn them into
        tombstones that conflict with every later claim of those messages."""
        return int(self.scripts.release_acks(
            keys=[self.keys.ack_claims(segment, subscription)],
            args=[str(holder), "commit" if committed else "release",
                  *claim_fields(positions, cumulative)]))

    @translate
    def record_acks(self, txn_id: TxnId, segment: str, subscription: str,
                    positions: Sequence[Position], cumulative: bool) -> None:
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        res = self.scripts.record_acks(
            keys=[k.header(p, seq), k.acks(p, seq)],
            args=[record_field(segment, subscription), "cum" if cumulative else "ind",
                  *map(ack_key, positions)])
        if res[0] != "OK":
            raise_txn_status(txn_id, res)

    @translate
    def list_acks(self, txn_id: TxnId) -> dict[tuple[str, str], AckRecord]:
        raw = self.r.hgetall(self.keys.acks(txn_id.partition, txn_id.seq))
        out = {}
        for field, value in raw.items():
            rec = json.loads(value)
            if isinstance(rec.get("ind"), dict):  # cjson encodes an empty array as {}
                rec["ind"] = []
            out[split_record_field(field)] = decode_ack_record(rec)
        return out

    @translate
    def list_claims(self, segment: str, subscription: str) -> Claims:
        return decode_claims(self.r.hgetall(self.keys.ack_claims(segment, subscription)))

    @translate
    def has_claims(self, segment: str, subscription: str) -> bool:
        return bool(self.r.exists(self.keys.ack_claims(segment, subscription)))

    @translate
    def claims_of(self, segment: str, subscription: str,
                  positions: Sequence[Position]) -> ClaimView:
        row = self.r.hmget(self.keys.ack_claims(segment, subscription),
                           claim_view_fields(positions))
        return decode_claim_view(positions, row)

    def claim_reads(self, segment: str, subscription: str) -> RedisClaimReads:
        key = self.keys.ack_claims(segment, subscription)
        return RedisClaimReads(self.claim_tracking, key, self.url,
                               lambda ps: self.claims_of(segment, subscription, ps))

    @translate
    def trim_tombstones(self, segment: str, subscription: str, horizon: Position,
                        tombstones: Sequence[tuple[Position, TxnId]]) -> int:
        """Drop the (position, holder) tombstones at or below ``horizon`` still held by
        that holder; the horizon stays a conflict for later claims (trim_acks.lua)."""
        return int(self.scripts.trim_acks(
            keys=[self.keys.ack_claims(segment, subscription)],
            args=[ack_key(horizon), *(tombstone_arg(p, h) for p, h in tombstones)]))

    @translate
    def mark_acks_applied(self, txn_id: TxnId, segment: str, subscription: str) -> None:
        p, k, seq = txn_id.partition, self.keys, txn_id.seq
        self.scripts.mark_acks_applied(keys=[k.header(p, seq), k.acks(p, seq)],
                                       args=[record_field(segment, subscription)])
