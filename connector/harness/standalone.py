"""Apache Pulsar standalone — the reference broker — in a child JVM on loopback.

The broker's classpath is resolved once from Maven Central (``mvn
dependency:copy-dependencies`` on a pom that depends on ``pulsar-broker``) into
``$PULSAR_TXN_CACHE`` (default ``~/.cache/pulsar-txn``); later starts reuse it.

    python -m pulsar_txn.harness.standalone provision   # prints the lib dir
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib import resources
from pathlib import Path

from .ports import free_port, wait_tcp

PULSAR_VERSION = "4.0.7"
MAIN = "org.apache.pulsar.PulsarStandaloneStarter"
JVM_FLAGS = [
    "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dlog4j2.formatMsgNoLookups=true",
    "-Dpulsar.log.level=warn", "-Dpulsar.log.root.level=warn",
    # Java 17: Pulsar reads container and GC metrics through internal packages
    "--add-opens", "java.base/jdk.internal.platform=ALL-UNNAMED",
    "--add-opens", "java.management/sun.management=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/sun.net=ALL-UNNAMED",
]


def cache_dir() -> Path:
    return Path(os.environ.get("PULSAR_TXN_CACHE", Path.home() / ".cache" / "pulsar-txn"))


def provision(quiet: bool = True) -> Path:
    """Resolve the broker's jars into the cache (idempotent); return the lib dir."""
    explicit = os.environ.get("PULSAR_TXN_STANDALONE_LIB")
    if explicit:
        return Path(explicit)
    lib = cache_dir() / f"pulsar-{PULSAR_VERSION}" / "lib"
    marker = lib.parent / ".complete"
    if marker.exists():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("the reference broker needs Maven to fetch its jars once: "
                           "apt-get install maven (and Java 17)")
    pkg = resources.files("pulsar_txn.harness")
    with tempfile.TemporaryDirectory() as tmp:
        pom, settings = Path(tmp) / "pom.xml", Path(tmp) / "settings.xml"
        pom.write_text(pkg.joinpath("standalone-pom.xml").read_text())
        settings.write_text(pkg.joinpath("standalone-settings.xml").read_text())
        staging = lib.parent / "lib.partial"
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [mvn, "-B", "-s", str(settings), "-f", str(pom), "dependency:copy-dependencies",
               f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
        if quiet:
            cmd.insert(2, "-q")
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"resolving Apache Pulsar {PULSAR_VERSION} from Maven Central "
                               f"failed:\n{(res.stdout + res.stderr)[-3000:]}")
        shutil.rmtree(lib, ignore_errors=True)
        staging.rename(lib)
    marker.write_text(f"{PULSAR_VERSION}\n")
    return lib


def _admin_path(topic: str) -> str:
    scheme, rest = topic.split("://", 1)
    return f"/admin/v2/{scheme}/{rest}"


def admin_terminate(admin_url: str, topic: str) -> None:
    req = urllib.request.Request(admin_url + _admin_path(topic) + "/terminate", method="POST",
                                 data=b"", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()


class PulsarStandalone:
    """The reference broker (Apache Pulsar standalone) on free loopback ports."""

    kind = "standalone"

    def __init__(self, workdir: Path, java: str = "java", heap: str = "768m") -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.java = java
        self.heap = heap
        self.proc: subprocess.Popen | None = None
        self.service_url = ""
        self.admin_url = ""

    def start(self, timeout: float = 240.0) -> None:
        lib = provision()
        broker, web, bookie, zk = (free_port() for _ in range(4))
        data = self.workdir / "data"
        conf = self.workdir / "standalone.conf"
        template = resources.files("pulsar_txn.harness").joinpath("standalone.conf").read_text()
        conf.write_text(template.format(broker_port=broker, web_port=web, data_dir=data))
        log = open(self.workdir / "standalone.log", "ab")
        self.proc = subprocess.Popen(
            [self.java, f"-Xmx{self.heap}", *JVM_FLAGS, "-cp", f"{lib}/*", MAIN,
             "--config", str(conf), "--no-functions-worker", "--no-stream-storage",
             "--metadata-dir", str(data / "metadata"), "--bookkeeper-dir",
             str(data / "bookkeeper"), "--bookkeeper-port", str(bookie),
             "--zookeeper-port", str(zk), "--advertised-address", "127.0.0.1"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, start_new_session=True)
        log.close()
        self.service_url = f"pulsar://127.0.0.1:{broker}"
        self.admin_url = f"http://127.0.0.1:{web}"
        try:
            wait_tcp(broker, timeout, self.proc, "pulsar standalone")
            self._wait_ready(timeout)
        except BaseException:
            tail = (self.workdir / "standalone.log").read_text(errors="replace")[-4000:]
            self.stop()
            raise RuntimeError(f"Apache Pulsar standalone did not start:\n{tail}") from None

    def _wait_ready(self, timeout: float) -> None:
        """Ready = a real client can produce and read back on public/default."""
        import pulsar

        from pulsar_txn.client import quiet_logger

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            client = pulsar.Client(self.service_url, logger=quiet_logger(),
                                   operation_timeout_seconds=10)
            try:
                topic = "persistent://public/default/__pulsar_txn_ready"
                client.create_producer(topic).send(b"ready")
                client.create_reader(topic, pulsar.MessageId.earliest).read_next(10_000)
                return
            except Exception as e:  # broker still loading namespaces
                last = e
                time.sleep(0.5)
            finally:
                client.close()
        raise RuntimeError(f"standalone not ready within {timeout:.0f}s: {last}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def terminate_topic(self, topic: str) -> bool:
        admin_terminate(self.admin_url, topic)
        return True

    def last_message_id(self, topic: str) -> tuple[int, int]:
        with urllib.request.urlopen(self.admin_url + _admin_path(topic) + "/lastMessageId",
                                    timeout=30) as r:
            body = json.loads(r.read())
        return body["ledgerId"], body["entryId"]


if __name__ == "__main__":
    if sys.argv[1:] == ["provision"]:
        print(provision(quiet=False))
    else:
        print("usage: python -m pulsar_txn.harness.standalone provision", file=sys.stderr)
        sys.exit(2)
