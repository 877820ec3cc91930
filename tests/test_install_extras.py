"""Install only what you use: the client API, the CLI and the metastore never import
Spark, pyarrow or pandas (~740 MB, the ``spark`` extra), and the extras say so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
SPARK_ONLY = ("pyspark", "py4j", "pyarrow", "pandas")

# Run with the Spark packages made unimportable, as on a machine without the extra.
_BLOCKED = """
import sys
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (spark extra absent)")
sys.meta_path.insert(0, _Absent())
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _BLOCKED.format(blocked=SPARK_ONLY) + code],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_client_api_and_the_cli_work_without_the_spark_extra():
    done = _run("""
import pulsar_txn
from pulsar_txn import PulsarTxnClient, TxnMessage, TxnId, Position, TransactionCoordinator
from pulsar_txn.metastore import open_store
from pulsar_txn.cli import main
store = open_store("memory://", "extras")
try:
    main(["--version"])
except SystemExit as e:
    assert e.code == 0
print("ok")
""")
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


def test_spark_packages_are_an_extra_not_a_dependency():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip().lower()
             for d in meta["dependencies"]}
    assert not names & set(SPARK_ONLY), names
    spark = " ".join(meta["optional-dependencies"]["spark"])
    assert all(p in spark for p in SPARK_ONLY), spark
    # the README's commands install what they run: the quick start is a Spark query
    readme = (ROOT / "README.md").read_text().split("```")[1]
    assert "spark" in readme.splitlines()[1] and "test" in readme.splitlines()[2], readme
