"""The README's examples run as printed, against ``pulsar-txn dev`` (issue 30: a
newcomer pastes the export lines and runs each block). The Python and shell blocks of
"Try it" and the scalable-topic block run in the default suite (a Valkey/Redis server
and pulsar-lite, a few seconds); the Spark block in the slow suite."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pulsar_lite") is None,
                                reason="pulsar-lite is not installed")


def _blocks(lang: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, re.S | re.M)


def _section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 3)
    return README[start:end if end > 0 else None]


@pytest.fixture(scope="module")
def dev_env():
    """``pulsar-txn dev`` running, and the environment its export lines give."""
    proc = subprocess.Popen([sys.executable, "-m", "pulsar_txn.cli", "dev"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(120, proc.kill)  # a dev that never gets ready fails here
    watchdog.start()
    env = dict(os.environ)
    try:
        for line in proc.stdout:
            if line.startswith("export "):
                key, _, value = line[len("export "):].strip().partition("=")
                env[key] = value
            if "Ctrl-C" in line:
                break
        watchdog.cancel()
        assert {"PULSAR_TXN_METASTORE", "PULSAR_TXN_SERVICE_URL"} <= set(env), env
        yield env
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _python(code: str, env: dict, timeout: float = 120) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, code + "\n" + done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_the_readme_starts_with_the_two_commands():
    first = _blocks("bash")[0].strip().splitlines()
    assert README.startswith("# pulsar-txn\n\n```bash\n")
    assert first == ["pip install '.[embedded,spark]' && python examples/quickstart.py",
                     "pip install '.[test]' && python -m pytest"]


def test_try_it_runs_as_printed_against_pulsar_txn_dev(dev_env):
    section = _section("Try it")
    dev, cli = _blocks("bash", section)
    assert dev.splitlines()[0] == "pulsar-txn dev"
    for line in dev.splitlines()[1:]:  # the lines dev prints, with the ports elided
        assert line.startswith("# export ") and line[2:].split("=")[0] in {
            f"export {k}" for k in ("PULSAR_TXN_METASTORE", "PULSAR_TXN_SERVICE_URL")}
    read, ctp = _blocks("python", section)
    out = _python(read, dev_env)
    assert "before commit: []" in out and "after commit: [b'order-1']" in out, out
    _python(ctp, dev_env)
    outputs = []
    for command in cli.strip().splitlines():
        command = command.split("  #")[0].strip()
        done = subprocess.run(command, shell=True, cwd=ROOT, env=dev_env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        outputs.append(done.stdout)
    finalized = [ln for ln in outputs[0].splitlines() if "COMMITTED" in ln]
    assert len(finalized) == 2, outputs[0]  # the two transactions above, as the comment says
    assert "ACTIVE" in outputs[3], outputs[3]


def test_the_scalable_topic_block_runs_as_printed(dev_env):
    (block,) = [b for b in _blocks("python", _section("What it is")) if "scalable" in b]
    assert _python(block, dev_env).strip() == "[b'o-1', b'o-2']"


@pytest.mark.slow
@pytest.mark.spark
def test_the_spark_block_runs_as_printed(dev_env, tmp_path):
    (block,) = [b for b in _blocks("python", _section("What it is")) if "SparkSession" in b]
    _python(_blocks("python", _section("Try it"))[0], dev_env)  # the 'orders' it reads
    ckpt = "/tmp/pulsar-txn-readme-ckpt"
    subprocess.run(["rm", "-rf", ckpt], check=True)
    env = {**dev_env, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    _python(block, env, timeout=300)
    check = ("import os\nfrom pulsar_txn.client import PulsarTxnClient, read_all\n"
             "with PulsarTxnClient(os.environ['PULSAR_TXN_SERVICE_URL'], "
             "os.environ['PULSAR_TXN_METASTORE']) as c:\n"
             "    print(sorted(m.value() for m in read_all(c.create_reader('orders-upper'))))")
    assert b"ORDER-1" in _python(check, env).encode()
