"""Operator metrics: scraped over HTTP while transactions commit, abort and time out."""

from __future__ import annotations

import time
import urllib.request

import pytest

from pulsar_txn.errors import PulsarTxnError, TxnTimedOut
from pulsar_txn.harness.ports import free_port
from pulsar_txn.records import SinkBatch, sink_owner


def _scrape(port: int) -> dict[str, float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_metrics_count_commits_aborts_timeouts_and_show_what_holds_readers(
        make_client, broker, redis_server, namespace, topic_name):
    import pulsar

    from pulsar_txn.client import quiet_logger
    from pulsar_txn.metrics import serve

    client = make_client(sweeper=False)
    port = free_port()
    probe = pulsar.Client(broker.service_url, logger=quiet_logger())
    server, _ = serve(redis_server.url, namespace, port, addr="127.0.0.1", client=probe)
    try:
        base = _scrape(port)
        assert base["ptxn_transactions_created_total"] == 0
        t = topic_name()
        p = client.create_producer(t)
        for _ in range(3):
            with client.transaction() as txn:
                p.send(b"c", txn=txn)
        for _ in range(2):
            txn = client.new_transaction()
            p.send(b"a", txn=txn)
            txn.abort()
        expired = client.new_transaction(timeout_ms=100)
        held = client.new_transaction()
        p.send(b"held", txn=held)
        p.send(b"after-1")
        p.send(b"after-2")
        owner = sink_owner("query-m", "qid-m", 7)
        sink_txn = client.coordinator.new_transaction(owner=owner)
        client.store.bind_sink("query-m", "qid-m")
        client.coordinator.commit(sink_txn.txn_id, sink=SinkBatch("query-m", "qid-m", 7))
        late = client.new_transaction(timeout_ms=100)
        client.coordinator.commit(sink_txn.txn_id, sink=SinkBatch("query-m", "qid-m", 7))
        while client.store.server_time_ms() <= late.header.deadline_ms:
            time.sleep(0.02)
        with pytest.raises(TxnTimedOut):  # a commit past the deadline: aborted, timed out
            client.coordinator.commit(late.id)
        with pytest.raises(PulsarTxnError):  # asked again: refused, counted once
            client.coordinator.commit(late.id)
        assert client.coordinator.sweep_timeouts() == [expired.id]
        client.coordinator.sweep_materialize()
        m = _scrape(port)
        assert m["ptxn_transactions_created_total"] == 3 + 2 + 1 + 1 + 1 + 1
        assert m["ptxn_transactions_committed_total"] == 3 + 1  # the repeated commit not twice
        assert m["ptxn_transactions_aborted_total"] == 2 + 1 + 1
        assert m["ptxn_transactions_timed_out_total"] == 1 + 1
        assert m["ptxn_transactions_open"] == 1
        assert m["ptxn_oldest_open_transaction_age_seconds"] > 0
        assert m["ptxn_transactions_unmaterialized"] == 0
        assert m["ptxn_transactions_gc_backlog"] == 3 + 2 + 1 + 1 + 1
        seg = f'segment="{p.segment}"'
        assert m[f"ptxn_segment_open_writes{{{seg}}}"] == 1
        assert m[f"ptxn_segment_gate_lag_entries{{{seg}}}"] == 3  # held, after-1, -2
        assert m['ptxn_sink_last_committed_batch{sink_id="query-m"}'] == 7
        held.commit()
        client.coordinator.sweep_materialize()
        m = _scrape(port)
        assert m["ptxn_transactions_open"] == 0
        assert f"ptxn_segment_open_writes{{{seg}}}" not in m
    finally:
        server.shutdown()
        probe.close()


def test_metrics_serve_cli_answers_a_scrape(make_client, redis_server, namespace):
    import subprocess
    import sys

    make_client(sweeper=False).new_transaction().commit()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pulsar_txn.cli", "metrics", "serve",
                             "--port", str(port), "--addr", "127.0.0.1",
                             "--metastore", redis_server.url, "--namespace", namespace],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert "serving Prometheus metrics" in proc.stdout.readline()
        assert _scrape(port)["ptxn_transactions_committed_total"] == 1
    finally:
        proc.terminate()
        proc.wait(10)
