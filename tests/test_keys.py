"""Key layout: one cluster slot per txn partition, scripts declare their keys."""

from importlib import resources

from redis.crc import key_slot

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
