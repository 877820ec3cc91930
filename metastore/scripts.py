"""The protocol's Lua scripts (``lua/<name>.lua``), called by name:
``store.scripts.end_txn(keys=[...], args=[...])``.

Why files and not inline strings (redis-py's habit): each script is one atomic
step of the protocol, and its header (KEYS, ARGV, replies) is the contract the
store's Python side is read against.

Why once per process: the texts and their SHA1s are the same for every store, and
a process may open many (a Spark worker reopens one per job, tests open dozens).
Each store only binds the shared scripts to its own client.

Why our own NOSCRIPT retry: a server restart empties its script cache, and
redis-py reloads a missing script only once; when the reload races the restart
that is not enough (the second EVALSHA can meet the emptied cache again).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import redis
from redis.client import Pipeline
from redis.commands.core import Script

PRELUDE = "--#include "  # '--#include <name>' inlines lua/_<name>.lua


def load_lua(name: str) -> str:
    """A script's text, with shared preludes inlined."""
    lua = resources.files("pulsar_txn.metastore").joinpath("lua")
    text = lua.joinpath(f"{name}.lua").read_text()
    for line in [ln for ln in text.splitlines() if ln.startswith(PRELUDE)]:
        text = text.replace(line, lua.joinpath(f"_{line.split()[1]}.lua").read_text())
    return text


class BoundScript:
    """One shared script on one store's client."""

    __slots__ = ("_script", "_client")

    def __init__(self, script: Script, client: redis.Redis) -> None:
        self._script = script
        self._client = client

    def __call__(self, keys: list, args: list, pipeline: Pipeline | None = None,
                 client: redis.Redis | None = None):
        """``client``: another connection to run on (one pinned for WAITAOF)."""
        if pipeline is not None:  # queued: the pipeline loads missing scripts itself
            return self._script(keys=keys, args=args, client=pipeline)
        for attempt in range(3):
            try:
                return self._script(keys=keys, args=args, client=client or self._client)
            except redis.exceptions.NoScriptError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


class Scripts:
    """Every script of ``lua/``, bound to one client. The annotations are the list
    (tests/test_scripts.py checks it against the files)."""

    alloc_ids: BoundScript
    bind_sink: BoundScript
    change_layout: BoundScript
    claim_acks: BoundScript
    create_topic: BoundScript
    create_txn: BoundScript
    end_txn: BoundScript
    gc_txn: BoundScript
    init_namespace: BoundScript
    mark_acks_applied: BoundScript
    mark_fsynced: BoundScript
    materialize_txn: BoundScript
    record_acks: BoundScript
    record_write: BoundScript
    register_write: BoundScript
    release_acks: BoundScript
    seal_end: BoundScript
    trim_acks: BoundScript
    withdraw_write: BoundScript

    def __init__(self, client: redis.Redis) -> None:
        for name, script in shared().items():
            setattr(self, name, BoundScript(script, client))


@cache
def shared() -> dict[str, Script]:
    """The scripts of this process, read and hashed on first use. A Script with no
    client of its own: its text is bytes, so no client's encoder is needed for the
    SHA, and every call names the client it runs on. Two threads racing here at
    most read the files twice; the SHAs are the same."""
    return {name: Script(None, load_lua(name).encode()) for name in Scripts.__annotations__}
