"""Metadata writes per transaction do not grow with the number of messages."""

from __future__ import annotations

import time

from helpers import CommandCounter


def _txn_cost(client, counter, topic, n):
    p = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                               block_if_queue_full=True, max_pending_messages=5000)
    before = counter.snapshot()
    txn = client.new_transaction()
    for _i in range(n):
        p.send_async(b"x" * 16, txn=txn)
    txn.commit()
    deadline = time.monotonic() + 10
    while client.store.unmaterialized_txns() and time.monotonic() < deadline:
        time.sleep(0.01)  # materialization runs after the decision, in the background
    writes, total, per_cmd = counter.delta(before)
    return writes, per_cmd


def test_metastore_writes_independent_of_message_count(make_client, redis_server, topic_name):
    client = make_client(sweeper=False)
    counter = CommandCounter(redis_server.url)
    _txn_cost(client, counter, topic_name(), 1)  # warm up: loads the scripts into Redis
    for p in range(client.store.partitions):  # and holds an id block of every partition
        client.store.next_txn_id(partition=p)
    small, small_cmds = _txn_cost(client, counter, topic_name(), 10)
    large, large_cmds = _txn_cost(client, counter, topic_name(), 100_000)
    print(f"\nmetastore writes: 10 messages -> {small} ({small_cmds}); "
          f"100000 messages -> {large} ({large_cmds})")
    assert small == large
    # scripts: create + register + record first position + end + materialize (one each)
    assert small_cmds["evalsha"] == large_cmds["evalsha"] == 5
