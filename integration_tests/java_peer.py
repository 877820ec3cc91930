"""The Java peers of benchmarks/peer (v4: Pulsar's own Java client 4.0.7) as tests run
them: built by Maven when a source is newer than the jar."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PEER = Path(__file__).resolve().parent.parent / "benchmarks" / "peer"
JAR = PEER / "v4" / "target" / "peer-v4.jar"


def peer_classpath() -> str:
    """The v4 peer's classpath, built first if needed (fails the test without Java 17
    and Maven, which CI has)."""
    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.fail("the Java peer tests need Java 17 and Maven (as benchmarks/peer does)")
    sources = [p for p in PEER.rglob("*") if p.suffix in (".java", ".xml")
               and "target" not in p.parts]
    if not JAR.exists() or max(p.stat().st_mtime for p in sources) > JAR.stat().st_mtime:
        done = subprocess.run(["mvn", "-B", "-q", "-s", str(PEER / "maven-settings.xml"),
                               "package"], cwd=PEER, capture_output=True, text=True)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return f"{JAR}:{JAR.parent / 'lib'}/*"


def java_cmd(main_class: str, *args: str) -> list[str]:
    return ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "--add-opens", "java.base/java.nio=ALL-UNNAMED", "-cp", peer_classpath(),
            f"io.github.pulsartxn.peer.v4.{main_class}", *args]
