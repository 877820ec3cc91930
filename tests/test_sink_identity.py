"""Hole 1: the default sink id follows Spark's query identity (the checkpoint's
``metadata`` file), so every spelling of one checkpoint gives one id and a new
checkpoint at the same path gives a new one."""

from __future__ import annotations

import json
import os

import pytest

from pulsar_txn.errors import ConfigError
from pulsar_txn.spark.options import sink_id_for_checkpoint


def _checkpoint(path, query_id: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "metadata").write_text(json.dumps({"id": query_id}) + "\n")


def test_every_spelling_of_one_checkpoint_maps_to_one_sink_id(tmp_path, monkeypatch):
    ck = tmp_path / "a" / "ckpt"
    _checkpoint(ck, "0b6c1f7e-1111-4c2a-9d55-3f0a3b5e8c01")
    monkeypatch.chdir(tmp_path / "a")
    spellings = [str(ck), f"file://{ck}", f"file:{ck}", f"{ck}/", str(ck).replace("/a/", "/a//"),
                 "ckpt", "./ckpt", f"{tmp_path}/a/../a/ckpt"]
    ids = {s: sink_id_for_checkpoint(s) for s in spellings}
    assert set(ids.values()) == {"query-0b6c1f7e-1111-4c2a-9d55-3f0a3b5e8c01"}, ids


def test_a_new_checkpoint_at_the_same_path_is_a_new_sink_id(tmp_path):
    ck = tmp_path / "ckpt"
    _checkpoint(ck, "11111111-1111-4111-8111-111111111111")
    first = sink_id_for_checkpoint(str(ck))
    for f in ck.iterdir():
        os.remove(f)
    _checkpoint(ck, "22222222-2222-4222-8222-222222222222")
    assert sink_id_for_checkpoint(str(ck)) != first


def test_a_checkpoint_without_query_metadata_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match="metadata"):
        sink_id_for_checkpoint(str(tmp_path / "never-started"))
