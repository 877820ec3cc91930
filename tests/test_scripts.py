"""The script registry: every Lua file is callable by name, read once per process."""

from importlib import resources

import redis

from pulsar_txn.metastore import scripts
from pulsar_txn.metastore.scripts import PRELUDE, Scripts


def test_the_registry_names_every_script_file():
    lua = resources.files("pulsar_txn.metastore").joinpath("lua")
    files = {f.name[:-4] for f in lua.iterdir() if f.name.endswith(".lua") and f.name[0] != "_"}
    assert set(Scripts.__annotations__) == files


def test_preludes_are_inlined():
    for name in Scripts.__annotations__:
        lines = scripts.load_lua(name).splitlines()
        assert not [ln for ln in lines if ln.startswith(PRELUDE)], name


def test_stores_share_the_process_scripts_and_bind_their_own_client():
    a = Scripts(redis.Redis(host="localhost", port=1))  # no connection is made here
    b = Scripts(redis.Redis(host="localhost", port=2))
    for name in Scripts.__annotations__:
        sa, sb = getattr(a, name), getattr(b, name)
        assert sa._script is sb._script is scripts.shared()[name]
        assert sa._client is not sb._client
