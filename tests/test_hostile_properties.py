"""Any protocol property a plain producer can write is classified by the documented
rule or skipped, and never raises (issue 26, hole 9).

``__ptxn.txn`` is an ordinary message property: any pulsar-client producer can write
anything there, e.g. ``v5:99:1;w;<deployment id>`` on a namespace of 16 partitions
(the deployment id is in every transactional entry). The documented rule (DESIGN §3,
records.entry_txn): an entry is delivered iff it carries no ``__ptxn.txn``, or its
txn id is one of this deployment's, COMMITTED, and its writer a winner. Every other
value (malformed, foreign, an id this store can never have handed out) is skipped.

Property-based (hypothesis) over the whole read path a reader, a consumer and a Spark
executor share: the parser (``entry_txn``, ``entry_txn_cached``, ``TxnId.parse``),
the classifier (``TransactionBuffer.classify``, ``wait_for_outcome``) and the
store's handling of the id (key building, header, collected and aborted-writer
lookups), on the memory store and on real Redis with the default (spread) key
layout and the plain one.
"""

from __future__ import annotations

import uuid

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsar_txn.buffer import TransactionBuffer, Verdict
from pulsar_txn.coordinator import TransactionCoordinator
from pulsar_txn.errors import InvalidTxnId
from pulsar_txn.metastore import MemoryMetadataStore, RedisMetadataStore
from pulsar_txn.metastore.keys import Keys
from pulsar_txn.records import (
    PROP_DEPLOYMENT,
    PROP_TXN,
    PROP_WRITER,
    Position,
    TxnId,
    entry_txn,
    entry_txn_cached,
)

SEGMENT = "persistent://public/default/hostile"
P = 4
WINNER = "w1"


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    from pulsar_txn.harness.redis_server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


class World:
    """A store holding one committed, one aborted and one OPEN transaction of this
    deployment on SEGMENT, each written by WINNER; and a reader's buffer over it."""

    def __init__(self, store) -> None:
        self.store = store
        coord = TransactionCoordinator(store, materialize_inline=True)
        self.committed = coord.new_transaction().txn_id
        self.aborted = coord.new_transaction().txn_id
        self.open = coord.new_transaction().txn_id
        for t in (self.committed, self.aborted, self.open):
            store.register_write(t, SEGMENT, WINNER)
            store.record_write(t, SEGMENT, WINNER, Position(1, t.seq), None)
        coord.commit(self.committed, [WINNER], [SEGMENT])
        coord.abort(self.aborted, [SEGMENT])
        self.buffer = TransactionBuffer(store)
        self.cache: dict = {}

    def verdict(self, props: dict) -> Verdict:
        """What a reader does with an entry carrying ``props`` (readers.GatedStream and
        spark.partition_reader take the same steps)."""
        dep = self.store.deployment
        t, w = entry_txn(props, dep)
        assert (t, w) == entry_txn_cached(props, dep, self.cache)
        if t is None:
            return Verdict.DELIVER
        try:
            txn = TxnId.parse(t)
        except InvalidTxnId:
            return Verdict.SKIP
        verdict = self.buffer.classify(SEGMENT, [(txn, w)])[0]
        if verdict is Verdict.WAIT:  # only this deployment's OPEN txn may wait
            assert txn == self.open
            assert self.buffer.wait_for_outcome(txn, 0.01) is False
        return verdict

    def legit(self, props: dict) -> bool:
        """Whether the documented rule delivers the entry: a plain one, or exactly what
        the committed transaction's winner wrote (a copy cannot be told apart)."""
        t, w = entry_txn(props, self.store.deployment)
        return t is None or (t == str(self.committed) and w == WINNER)


@pytest.fixture(scope="module", params=["memory", "redis-spread", "redis-plain"])
def world(request):
    if request.param == "memory":
        yield World(MemoryMetadataStore(partitions=P))
        return
    ns = f"h{uuid.uuid4().hex[:10]}"
    url = f"{request.getfixturevalue('redis_server').url}?namespace={ns}"
    if request.param == "redis-plain":
        # a namespace an earlier build created keeps the plain tags ``{ns:p}``
        r = redis.Redis.from_url(request.getfixturevalue("redis_server").url)
        r.hset(Keys(ns, 1).config(), mapping={"partitions": P, "deployment": "d" + ns})
        r.close()
    store = RedisMetadataStore(url, partitions=P)
    assert store.keys.layout == ("plain" if request.param == "redis-plain" else "spread1")
    yield World(store)
    store.close()


# ---- what a plain producer can write ----
_digits = st.one_of(st.integers(-5, 2 * P), st.integers(-(2**70), 2**70),
                    st.sampled_from([2**63 - 1, 2**63, 2**64, 10**19, 16384, 99, 0]))
_num = st.one_of(_digits.map(str), st.sampled_from(["", "01", "+1", " 1", "1 ", "1\n", "٣",
                                                    "1e3", "0x1", "1_0", "-0", "１"]),
                 st.text(max_size=6))
_writer = st.one_of(st.just(WINNER), st.just(""), st.text(max_size=12),
                    st.sampled_from(["w1\n", "w1 ", "w;1", "W1", "w1" * 150]))


@st.composite
def _txn_text(draw) -> str:
    prefix = draw(st.sampled_from(["v5", "v4", "V5", "v6", "", "v5:v5", "5"]))
    sep = draw(st.sampled_from([":", ":", ":", "::", ";", ",", "|", " "]))
    return f"{prefix}{sep}{draw(_num)}{sep}{draw(_num)}"


@st.composite
def hostile_props(draw, world_dep: str) -> dict:
    dep = draw(st.one_of(st.just(world_dep), st.text(max_size=12),
                         st.just(world_dep + "x"), st.just("")))
    writer, txn = draw(_writer), draw(st.one_of(_txn_text(), st.text(max_size=30)))
    form = draw(st.sampled_from(["one", "three", "raw", "mixed", "extra-seps"]))
    if form == "one":
        props = {PROP_TXN: f"{txn};{writer};{dep}"}
    elif form == "extra-seps":
        props = {PROP_TXN: ";".join(draw(st.lists(st.text(max_size=8), max_size=6)))}
    elif form == "three":
        props = {PROP_TXN: txn}
        if draw(st.booleans()):
            props[PROP_WRITER] = writer
        if draw(st.booleans()):
            props[PROP_DEPLOYMENT] = dep
    elif form == "mixed":  # both forms at once
        props = {PROP_TXN: f"{txn};{writer};{dep}", PROP_WRITER: writer,
                 PROP_DEPLOYMENT: dep}
    else:
        props = {PROP_TXN: draw(st.text(max_size=40))}
    props.update(draw(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=2)))
    return props


_SETTINGS = settings(max_examples=400, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@_SETTINGS
@given(data=st.data())
def test_any_property_value_is_classified_by_the_rule_or_skipped_and_never_raises(world, data):
    props = data.draw(hostile_props(world.store.deployment))
    verdict = world.verdict(props)
    if verdict is Verdict.DELIVER:
        assert world.legit(props), props


@pytest.mark.parametrize("value", [
    "v5:{P}:1;w1;{dep}", "v5:99:1;w1;{dep}", "v5:16384:1;w1;{dep}", "v5:9999:1;w1;{dep}",
    "v5:0:0;w1;{dep}", "v5:1:0;w1;{dep}", "v5:0:9223372036854775808;w1;{dep}",
    "v5:0:9999999999999999999;w1;{dep}", "v5:-1:1;w1;{dep}", "v5:0:-1;w1;{dep}",
    "v4:0:1;w1;{dep}", "v5:01:{seq};w1;{dep}", "v5:{part}:{seq}\n;w1;{dep}",
    "v5:{part}:{seq};;{dep}", "v5:{part}:{seq};w1", "v5:{part}:{seq};w1;{dep};x",
    "v5:{part}:{seq},w1,{dep}", "v5:٠:{seq};w1;{dep}",
])
def test_hostile_values_of_the_issue_are_skipped(world, value):
    c = world.committed
    props = {PROP_TXN: value.format(P=P, dep=world.store.deployment, part=c.partition,
                                    seq=c.seq)}
    assert world.verdict(props) is Verdict.SKIP


@pytest.mark.parametrize("three", [
    {PROP_TXN: "v5:99:1", PROP_WRITER: WINNER},
    {PROP_TXN: "{c}", PROP_WRITER: ""},
    {PROP_TXN: "{c};junk", PROP_WRITER: WINNER},
    {PROP_TXN: "{c}", PROP_WRITER: WINNER, PROP_DEPLOYMENT: "other"},
    {PROP_TXN: "{c}", PROP_WRITER: WINNER + "\n"},
    {PROP_TXN: "", PROP_WRITER: WINNER},
])
def test_hostile_three_property_forms_are_skipped(world, three):
    props = {k: v.format(c=world.committed) for k, v in three.items()}
    assert world.verdict(props) is Verdict.SKIP


def test_the_committed_winners_own_entries_are_still_delivered(world):
    c, dep = world.committed, world.store.deployment
    assert world.verdict({PROP_TXN: f"{c};{WINNER};{dep}"}) is Verdict.DELIVER
    assert world.verdict({PROP_TXN: str(c), PROP_WRITER: WINNER,
                          PROP_DEPLOYMENT: dep}) is Verdict.DELIVER
    assert world.verdict({"plain": "x"}) is Verdict.DELIVER
    assert world.verdict({PROP_TXN: f"{c};w2;{dep}"}) is Verdict.SKIP  # not a winner


@_SETTINGS
@given(p=st.integers(-(2**65), 2**65), seq=st.integers(-(2**65), 2**65))
def test_the_store_answers_unknown_for_ids_it_cannot_hold_and_never_raises(world, p, seq):
    """Whatever id reaches the store (TxnId is a plain dataclass): no header, never
    collected, never listed aborted; nothing raises."""
    t = TxnId(p, seq)
    s = world.store
    foreign = not 0 <= p < s.partitions
    assert s.get_headers([t])[t] is None or not foreign
    if foreign:
        assert s.get_header(t) is None
        assert s.collected([t]) == set()
        assert s.aborted_writers(SEGMENT, [(t, WINNER)]) == set()


@given(text=st.text(max_size=40))
def test_txn_id_parse_accepts_only_the_canonical_text(text):
    try:
        t = TxnId.parse(text)
    except InvalidTxnId:
        return
    assert str(t) == text and 0 <= t.partition and 0 <= t.seq < 2**63


@pytest.mark.parametrize("layout", ["plain", "spread1"])
@pytest.mark.parametrize("p", [-1, P, 99, 2**40])
def test_keys_of_a_partition_the_namespace_lacks_are_refused_not_aliased(layout, p):
    """A negative index would name another partition's keys in the spread layout's
    tuple (``tags[-1]``), a large one raise IndexError: both refused with a clear error."""
    keys = Keys("ns", P, layout=layout)
    with pytest.raises(ValueError, match="not one of namespace"):
        keys.header(p, 1)
