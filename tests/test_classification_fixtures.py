"""The Python readers' classification against the shared fixtures
(``tests/fixtures/classification.json``), which the broker plugin's classifier passes
too (``broker-plugin``, ``ClassifierFixturesTest``): the two implementations of one
rule cannot drift apart without one of the two suites failing. The store's raw keys
are loaded into a real Redis and read by the real store, so a change of the key
layout fails here as well as a change of the rule."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import redis

from pulsar_txn.metastore import RedisMetadataStore
from pulsar_txn.metastore.keys import Keys

FIXTURES = Path(__file__).parent / "fixtures"
DOC = json.loads((FIXTURES / "classification.json").read_text())
_spec = importlib.util.spec_from_file_location("make_classification",
                                               FIXTURES / "make_classification.py")
make = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    from pulsar_txn.harness.redis_server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


def load(r: redis.Redis, keys: dict) -> None:
    for key, value in keys.items():
        if "hash" in value:
            r.hset(key, mapping=value["hash"])
        elif "set" in value:
            r.sadd(key, *value["set"])
        elif "zset" in value:
            r.zadd(key, {m: s for m, s in value["zset"]})
        else:
            r.set(key, value["string"])


@pytest.fixture(scope="module")
def stores(redis_server):
    r = redis.Redis.from_url(redis_server.url)
    out = {}
    for ns in DOC["namespaces"]:
        load(r, ns["keys"])
        out[ns["namespace"]] = RedisMetadataStore(
            f"{redis_server.url}?namespace={ns['namespace']}", create=False)
    r.close()
    yield out
    for s in out.values():
        s.close()


CASES = [(ns["namespace"], c) for ns in DOC["namespaces"] for c in ns["cases"]]


@pytest.mark.parametrize("ns,case", CASES, ids=[f"{n}: {c['name']}" for n, c in CASES])
def test_python_readers_classify_each_shared_fixture_as_it_expects(stores, ns, case):
    got = make.verdict(stores[ns], case["segment"], case["properties"])
    assert got == case["expected"], case["name"]


@pytest.mark.parametrize("ns", DOC["namespaces"], ids=lambda ns: ns["namespace"])
def test_the_fixtures_tags_are_the_key_layouts(ns):
    """The tags a client in another language must compute (step 1 of the rule)."""
    keys = Keys(ns["namespace"], ns["partitions"], ns["layout"])
    assert [keys.tag(p) for p in range(ns["partitions"])] == ns["tags"]


def test_the_fixtures_cover_every_verdict_and_both_layouts():
    expected = {c["expected"] for _, c in CASES}
    assert expected == {"deliver", "skip", "wait"}
    assert {ns["layout"] for ns in DOC["namespaces"]} == {"plain", "spread1"}
