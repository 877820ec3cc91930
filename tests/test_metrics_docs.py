"""The metric names operators read are the ones exported, and they are ours alone.

Every metric name in docs/*.md, README.md and the Grafana dashboard's queries is a
family the collector exports; no family takes Apache Pulsar's ``pulsar_txn_*`` names
(its transaction coordinator exports those into the same Prometheus); the dashboard
works both imported and provisioned, with ``$__rate_interval`` windows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pulsar_txn.metastore import MemoryMetadataStore
from pulsar_txn.metrics import StoreCollector
from pulsar_txn.records import Position

ROOT = Path(__file__).parent.parent
DASHBOARD = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
RENAMED = re.compile(r"^\| `pulsar_txn_\w+` \| `ptxn_\w+` \|$", re.M)
OUR_NAME = re.compile(r"(?<![\w.])ptxn_[a-z0-9_]*[a-z0-9]")
# Apache Pulsar's transaction metrics (coordinator, buffer, pending ack), as its
# broker exports them (PrometheusMetricsGenerator / TransactionAggregator) and docs list
APACHE_PULSAR = {
    "pulsar_txn_active_count", "pulsar_txn_created_count", "pulsar_txn_created_total",
    "pulsar_txn_committed_count", "pulsar_txn_committed_total",
    "pulsar_txn_aborted_count", "pulsar_txn_aborted_total",
    "pulsar_txn_timeout_count", "pulsar_txn_timeout_total",
    "pulsar_txn_append_log_count", "pulsar_txn_append_log_total",
    "pulsar_txn_execution_latency_le_10", "pulsar_txn_tb_active_total",
    "pulsar_txn_tb_aborted_total", "pulsar_txn_tb_committed_total",
    "pulsar_txn_tp_committed_count_total", "pulsar_txn_tp_aborted_count_total",
}


def _exported() -> set[str]:
    """Family and sample names of a collector with something in every labelled family."""
    store = MemoryMetadataStore(partitions=2)
    try:
        t = store.create_txn(store.next_txn_id("", None), 600_000, "").txn_id
        store.register_write(t, "seg", "w")
        store.record_write(t, "seg", "w", Position(1, 3), None)
        store.bind_sink("sink-1", "q")
        collector = StoreCollector(store, lambda segment: (1, 7), probe_budget_s=2.0)
        names = set()
        for family in collector.collect():
            names.add(family.name)
            names.update(s.name for s in family.samples)
        return names
    finally:
        store.close()


EXPORTED = _exported()


def _exprs() -> list[str]:
    return [t["expr"] for p in DASHBOARD["panels"] for t in p.get("targets", [])]


def test_no_family_takes_an_apache_pulsar_transaction_metric_name():
    assert not [n for n in EXPORTED if n.startswith("pulsar_txn_")]
    assert not EXPORTED & APACHE_PULSAR
    assert all(n.startswith("ptxn_") for n in EXPORTED), sorted(EXPORTED)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_metric_name_in_the_docs_is_exported(doc):
    text = doc.read_text()
    missing = sorted(set(OUR_NAME.findall(text)) - EXPORTED)
    assert not missing, f"{doc.name} names metrics the collector does not export: {missing}"
    text = RENAMED.sub("", text)  # metrics.md's table of the names before the rename
    old = [m[1] for m in re.finditer(r"(?<![\w.])(pulsar_txn_[a-z0-9_]+)(\*)?", text)
           if not m[2] and m[1] not in APACHE_PULSAR]  # Pulsar's own, or a prefix_*
    assert not old, f"{doc.name}: {old} (our families are ptxn_*; pulsar_txn_* is Pulsar's)"


def test_every_metric_in_the_dashboard_is_exported():
    named = {n for e in _exprs() for n in OUR_NAME.findall(e)}
    assert named and not named - EXPORTED, sorted(named - EXPORTED)
    assert not [e for e in _exprs() if "pulsar_txn_" in e]


def test_the_dashboard_uses_rate_interval_windows_only():
    for expr in _exprs():
        windows = re.findall(r"\[([^\]]+)\]", expr)
        assert all(w == "$__rate_interval" for w in windows), expr
        if re.search(r"\b(rate|increase|irate)\(", expr):
            assert "[$__rate_interval]" in expr, expr


def test_the_dashboard_has_a_datasource_variable_for_import_and_provisioning():
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    ds = variables["datasource"]
    assert (ds["type"], ds["query"]) == ("datasource", "prometheus")
    # provisioning ignores __inputs, so nothing may depend on them
    assert "__inputs" not in DASHBOARD
    assert "DS_PROMETHEUS" not in json.dumps(DASHBOARD)
    for panel in DASHBOARD["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    for name in ("job", "namespace"):
        assert variables[name]["datasource"]["uid"] == "${datasource}"


def test_every_dashboard_query_selects_the_job_and_the_namespace():
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["job"]["type"] == variables["namespace"]["type"] == "query"
    assert "$job" in variables["namespace"]["query"]  # namespaces of the chosen jobs
    for expr in _exprs():
        assert 'job=~"$job"' in expr, expr
        assert 'metastore_namespace=~"$namespace"' in expr, expr


def test_each_dashboard_panel_has_one_unit():
    for panel in DASHBOARD["panels"]:
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults.get("unit"), panel["title"]
        assert not panel["fieldConfig"].get("overrides"), panel["title"]
        units = {_unit(e) for e in (t["expr"] for t in panel["targets"])}
        assert len(units) == 1, (panel["title"], units)
        assert units == {defaults["unit"]}, (panel["title"], units)


def _unit(expr: str) -> str:
    """The unit a query's values are in, from its metric's name and function."""
    (name,) = set(OUR_NAME.findall(expr)) - {"ptxn_info"}
    if re.search(r"\b(rate|irate)\(", expr):
        return "ops"
    if name.endswith("_seconds"):
        return "s"
    return "short"
