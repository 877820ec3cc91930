"""Key layout: one cluster slot per txn partition, scripts declare their keys."""

from importlib import resources

import pytest
from redis.crc import key_slot

from pulsar_txn.metastore import keys
from pulsar_txn.metastore.keys import Keys


def test_all_keys_a_txn_script_touches_share_one_cluster_slot():
    k = Keys("prod", 16)
    for p in range(16):
        keys = [k.seq(p), k.header(p, 42), k.writes(p, 42), k.acks(p, 42),
                k.open_writes(p, "persistent://t/n/a"), k.aborted_writers(p, "persistent://t/n/b"),
                k.deadlines(p), k.finalized(p), k.events(p), k.owners(p), k.live(p), k.gc(p),
                k.collected(p), k.gaps(p), k.sink(p, "query-1")]
        assert len({key_slot(x.encode()) for x in keys}) == 1


def test_claim_tables_are_one_slot_each():
    k = Keys("prod", 16)
    key = k.ack_claims("persistent://t/n/a", "sub")
    assert key.startswith("{") and key.endswith("}")


def test_every_script_has_a_shebang_and_documents_its_keys():
    lua = resources.files("pulsar_txn.metastore").joinpath("lua")
    # preludes (``_<name>.lua``) are inlined into scripts by ``--#include <name>``
    scripts = [f for f in lua.iterdir() if f.name.endswith(".lua") and f.name[0] != "_"]
    assert len(scripts) >= 9
    for f in scripts:
        text = f.read_text()
        assert text.startswith("#!lua\n"), f.name
        assert "KEYS[1]" in text and "returns" in text, f.name


def test_member_encodings_round_trip():
    from pulsar_txn.metastore import keys
    from pulsar_txn.records import Position

    p = Position(3, 9)
    assert keys.decode_open_write(f"{p.encode()}|42|w-1") == (p, 42, "w-1")
    assert keys.decode_open_write(f"{keys.PENDING}|42|w-1") == (None, 42, "w-1")
    assert keys.open_write_seq(f"{keys.PENDING}|42|w-1") == 42
    assert keys.split_record_field(keys.record_field("persistent://t/n/a", "w")) == (
        "persistent://t/n/a", "w")
    assert keys.decode_write_span(f"{p.encode()},") == (p, None)
    assert keys.decode_gap("10:20") == (10, 20)
    assert keys.segment_of_field(keys.segment_field(7)) == 7
    assert keys.segment_of_field("epoch") is None
    k = keys.Keys("prod", 16)
    assert k.open_writes_segment(3, k.open_writes(3, "persistent://t/n/a")) == "persistent://t/n/a"
    assert k.sink_id(3, k.sink(3, "q-1")) == "q-1"


def test_claim_tables_and_ack_records_decode_to_typed_values():
    """The encodings stay inside the store: a claim table and an ack record come out
    as Positions and TxnIds (whole entries after their batch indexes)."""
    from pulsar_txn.metastore.claims import AckRecord, Claims, Holding
    from pulsar_txn.metastore.keys import (
        CUM,
        TOMB,
        TRIMMED,
        ack_key,
        claim_fields,
        decode_ack_record,
        decode_claims,
    )
    from pulsar_txn.records import Position, TxnId

    a, b, c, d, e = (Position(1, i) for i in range(5))
    claims = decode_claims({ack_key(a): "v5:1:2", ack_key(b): "=v5:1:3",
                            CUM: f"v5:1:4|{ack_key(c)}", TOMB: f"v5:1:5|{ack_key(d)}",
                            TRIMMED: ack_key(e)})
    assert claims == Claims({a: TxnId(1, 2)}, {b: TxnId(1, 3)}, Holding(TxnId(1, 4), c),
                            Holding(TxnId(1, 5), d), e)
    assert claims.committed_horizon == d and decode_claims({}).committed_horizon is None
    rec = decode_ack_record({"ind": [ack_key(a), ack_key(b)], "cum": ack_key(c),
                             "applied": True})
    assert rec == AckRecord((a, b), c, True)
    assert claim_fields(rec.individual, rec.cumulative is not None) == [
        ack_key(a), ack_key(b), CUM]
    assert decode_ack_record({"ind": {}, "cum": ""}).empty  # cjson's {} for []


@pytest.mark.parametrize("partitions", [3, 12, 16, 64])
def test_spread_tags_put_partitions_evenly_on_a_clusters_shards(partitions):
    """A cluster whose slots are split in even ranges (what redis-cli --cluster create
    and the harness do) gets the same number of partitions on every shard, give or
    take one, for any shard count dividing the slot space evenly enough."""
    k = keys.Keys("prod", partitions, layout=keys.SPREAD_LAYOUT)
    slots = [key_slot(k.tag(p).encode()) for p in range(partitions)]
    for shards in (2, 3, 4):
        per = [0] * shards
        for s in slots:
            per[min(s * shards // 16384, shards - 1)] += 1
        assert max(per) - min(per) <= 1, (shards, per)
    assert k.tag(0) != keys.Keys("prod", partitions).tag(0)  # a different key layout


def test_plain_tags_are_unchanged_for_existing_deployments():
    assert keys.Keys("prod", 16).tag(5) == "{prod:5}"


def test_spread1_tags_never_change():
    """The layout's keys of an existing namespace: a change here renames every key
    (and restarts id counters under the same deployment id). Change the algorithm
    only under a new layout name."""
    k = keys.Keys("prod", 16, layout="spread1")
    assert [k.tag(p) for p in range(16)] == [
        "{prod~158}", "{prod~12}", "{prod~8}", "{prod~78}", "{prod~159}", "{prod~13}",
        "{prod~9}", "{prod~79}", "{prod~29}", "{prod~163}", "{prod~43}", "{prod~109}",
        "{prod~28}", "{prod~162}", "{prod~42}", "{prod~108}"]


def test_partitions_beyond_the_slot_count_are_refused():
    with pytest.raises(ValueError, match="partitions"):
        keys.Keys("prod", 16385, layout="spread1")
