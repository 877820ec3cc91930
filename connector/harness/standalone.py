"""Apache Pulsar standalone - the reference broker - in a child JVM on loopback.

pulsar-lite is quick but is not Pulsar; the integration suite also runs against
the real broker so that behaviour we rely on (terminate, replay from retained
ledgers, message ids) is checked against the reference implementation. No
Docker: the broker's jars come from Maven Central once (resolved by Maven,
cached under ``$PULSAR_TXN_CACHE``) and ``org.apache.pulsar.PulsarStandaloneStarter``
runs in a child JVM with broker + one bookie + a RocksDB metadata store, all
on free 127.0.0.1 ports, so parallel CI jobs and other services on the box do
not collide with it.

    python -m pulsar_txn.harness.standalone provision   # prints the lib dir
    python -m pulsar_txn.harness.standalone run DIR     # start, print URLs, wait
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import pathlib
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import weakref
from importlib import resources
from typing import IO

from pulsar_txn.admin import (  # noqa: F401  (re-exported for the harness's users)
    admin_last_message_id,
    admin_request,
    admin_terminate,
    admin_topic_path,
)
from pulsar_txn.harness.ports import free_ports
from pulsar_txn.harness.tls import make_ca

MAIN_CLASS = "org.apache.pulsar.PulsarStandaloneStarter"
LIB_ENV = "PULSAR_TXN_STANDALONE_LIB"
JVM_OPTS_ENV = "PULSAR_TXN_STANDALONE_JVM_OPTS"  # extra JVM flags, appended last
VERSION_ENV = "PULSAR_TXN_PULSAR_VERSION"  # 4.0 (default, the reference) or 5.0
# One pom per release line; each pins the newest version of its line that resolves
# whole from Maven Central (the reasons are in the poms).
POMS = {"4.0": "standalone-pom.xml", "5.0": "standalone-pom-5.0.xml"}
READY_TOPIC = "persistent://public/default/__pulsar_txn_ready"

# What bin/pulsar passes on Java 17, minus what only ZooKeeper/functions need:
# Netty and BookKeeper reach into JDK internals (direct buffers, CRC32C,
# fadvise) and quietly fall back to slower paths - or log stack traces -
# without these opens.
JAVA17_FLAGS = (
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/sun.net=ALL-UNNAMED",
    "--add-opens", "java.management/sun.management=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.platform=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
)
# Small-box JVM: one GC thread instead of G1's concurrent workers, a capped
# direct-memory pool (bookie caches + entry cache + Netty), and a fast crash
# instead of a wedged broker if a test ever exhausts memory.
JVM_FLAGS = (
    "-XX:+UseSerialGC",
    # C1 only: on 2 cores the C2 compiler threads fight the broker's own start-up;
    # measured ready time drops from ~12 s to ~6.5 s. Peak throughput is lower,
    # so append -XX:TieredStopAtLevel=4 via $PULSAR_TXN_STANDALONE_JVM_OPTS for
    # benchmarks.
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.net.preferIPv4Stack=true",
    # Pulsar's own shutdown hook logs while closing, then stops log4j itself.
    "-Dlog4j.shutdownHookEnabled=false",
    "-Dlog4j2.formatMsgNoLookups=true",
    # Let BookKeeper find its metadata drivers on Pulsar's metadata store.
    "-Dbookkeeper.metadata.bookie.drivers="
    "org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver",
    "-Dbookkeeper.metadata.client.drivers="
    "org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver",
)
# The jars carry BookKeeper's log4j2.xml (INFO, with costly caller locations);
# ours is cheaper and sends everything to standalone.log via stdout.
LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{{ISO8601}} %-5p [%t] %c{{1.}} - %m%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
logger.jetty.name = org.eclipse.jetty
logger.jetty.level = warn
"""

_LIVE: weakref.WeakSet[PulsarStandalone] = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    """A crashed test session must not leave a 1 GB JVM behind on a shared box."""
    for broker in list(_LIVE):
        with contextlib.suppress(Exception):
            broker.stop()


def cache_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("PULSAR_TXN_CACHE",
                                       pathlib.Path.home() / ".cache" / "pulsar-txn"))


def _resource(name: str) -> str:
    return resources.files("pulsar_txn.harness").joinpath(name).read_text()


def release_line(version: str | None = None) -> str:
    """``4.0`` or ``5.0``: the argument, else ``$PULSAR_TXN_PULSAR_VERSION``, else 4.0."""
    line = (version or os.environ.get(VERSION_ENV) or "4.0").strip()
    line = ".".join(line.split(".")[:2])
    if line not in POMS:
        raise ValueError(f"${VERSION_ENV}={version or os.environ.get(VERSION_ENV)!r}: "
                         f"supported Apache Pulsar release lines are {', '.join(POMS)}")
    return line


def provision(quiet: bool = True, version: str | None = None) -> pathlib.Path:
    """Return a directory holding the broker's jars, resolving them once.

    ``$PULSAR_TXN_STANDALONE_LIB`` wins (a pre-built classpath, e.g. a CI cache
    or an unpacked Pulsar distribution's lib/). Otherwise Maven resolves the
    pom shipped in this package into the cache, keyed by the pom's content, so
    an edited pom fetches afresh and an unchanged one costs nothing.
    """
    explicit = os.environ.get(LIB_ENV)
    if explicit:
        lib = pathlib.Path(explicit)
        if not any(lib.glob("pulsar-broker-*.jar")):
            raise RuntimeError(f"${LIB_ENV}={explicit} holds no pulsar-broker-*.jar")
        return lib
    pom = _resource(POMS[release_line(version)])
    settings = _resource("standalone-settings.xml")
    key = hashlib.sha256((pom + settings).encode()).hexdigest()[:12]
    version = re.search(r"<pulsar.version>([^<]+)<", pom).group(1)
    home = cache_dir() / f"pulsar-{version}-{key}"
    lib, marker = home / "lib", home / ".complete"
    if marker.exists():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Apache Pulsar standalone needs Maven (and Java 17) to fetch its jars "
                           "once: apt-get install maven openjdk-17-jre-headless")
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        (pathlib.Path(tmp) / "pom.xml").write_text(pom)
        (pathlib.Path(tmp) / "settings.xml").write_text(settings)
        staging = home / "lib.partial"
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [mvn, "-B", *(["-q"] if quiet else []), "-s", f"{tmp}/settings.xml", "-f",
               f"{tmp}/pom.xml", "dependency:copy-dependencies",
               f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"resolving Apache Pulsar {version} from Maven Central failed:"
                               f"\n{(res.stdout + res.stderr)[-3000:]}")
        shutil.rmtree(lib, ignore_errors=True)
        staging.rename(lib)
    marker.write_text(f"{version}\n")
    return lib


def broker_version(lib: pathlib.Path) -> str:
    """The Pulsar version of a classpath directory (from its pulsar-broker jar)."""
    for jar in lib.glob("pulsar-broker-*.jar"):
        m = re.fullmatch(r"pulsar-broker-(\d[\w.-]*)\.jar", jar.name)
        if m:
            return m.group(1)
    raise RuntimeError(f"{lib} holds no pulsar-broker-<version>.jar")


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.25):
        return True
    return False


_admin = admin_request  # the harness's own admin calls (delete) share the client code


class PulsarStandalone:
    """Apache Pulsar standalone (reference broker) in a child JVM on loopback."""

    kind = "standalone"

    def __init__(self, workdir: pathlib.Path, java: str = "java", heap: str = "768m",
                 direct_memory: str = "256m", extra_conf: str = "",
                 client_token: str | None = None, tls: bool = False,
                 release: str | None = None, extra_classpath: tuple = ()) -> None:
        """``extra_conf``: lines appended to standalone.conf (e.g. authentication);
        ``client_token``: the token the readiness check connects with; ``tls``: also
        listen with TLS (``service_url_tls``, ``admin_url_tls``) under a CA made
        here (``self.ca``: CA, server and client certificates); ``release``: 4.0 or
        5.0 (default ``$PULSAR_TXN_PULSAR_VERSION``, else 4.0); ``extra_classpath``:
        jars after the broker's own (a broker plugin, ``harness.broker_plugin``)."""
        self.release = release_line(release)
        self.version = ""  # the exact version, known once started
        self.extra_conf = extra_conf
        self.extra_classpath = tuple(str(pathlib.Path(j).resolve()) for j in extra_classpath)
        self.tls = tls
        self.ca = None
        self.service_url_tls = self.admin_url_tls = ""
        self.broker_tls_port = self.web_tls_port = 0
        self.client_token = client_token
        self.workdir = pathlib.Path(workdir).resolve()
        self.java = java
        self.heap = heap
        self.direct_memory = direct_memory
        self.service_url = ""
        self.admin_url = ""
        self.broker_port = self.web_port = self.bookie_port = 0
        self.log_path = self.workdir / "standalone.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # ----------------------------------------------------------------- start
    def start(self, timeout: float = 240.0) -> None:
        """Start the JVM and return once a real client can produce and consume.

        An open TCP port is not enough: the broker listens before it has
        created public/default, and the bookie may still be registering.
        Raises RuntimeError with the log tail if the JVM dies or time runs out.
        """
        if self._proc is not None:
            raise RuntimeError("already started")
        deadline = time.monotonic() + timeout
        lib = provision(version=self.release)
        self.version = broker_version(lib)
        data_dir = self.workdir / "data"
        fresh = not data_dir.exists()
        attempts = 3 if fresh else 1
        for attempt in range(1, attempts + 1):
            self._spawn(lib, data_dir)
            try:
                self._wait_ready(deadline)
                return
            except RuntimeError as e:
                tail = self.log_tail()
                self.stop()
                if attempt < attempts and "Address already in use" in tail:
                    # A port was taken between free_ports() and the JVM's bind.
                    # The bookie cookie pins its port, so start from a clean dir.
                    shutil.rmtree(data_dir, ignore_errors=True)
                    self.broker_port = 0
                    continue
                raise RuntimeError(
                    f"Apache Pulsar standalone failed to start: {e}\n"
                    f"--- {self.log_path} (tail) ---\n{tail}"
                ) from None

    def _spawn(self, lib: pathlib.Path, data_dir: pathlib.Path) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.broker_port:  # a restart keeps its ports: clients reconnect to them
            (self.broker_port, self.web_port, self.bookie_port,
             self.broker_tls_port, self.web_tls_port) = free_ports(5)
        conf = self.workdir / "standalone.conf"
        conf.write_text(_resource("standalone.conf").format(
            broker_port=self.broker_port, web_port=self.web_port,
            bookie_port=self.bookie_port, data_dir=data_dir,
        ) + "\n" + self._tls_conf() + self.extra_conf + "\n")
        log4j = self.workdir / "log4j2.properties"
        level = os.environ.get("PULSAR_TXN_STANDALONE_LOG_LEVEL", "info")
        log4j.write_text(LOG4J2_PROPERTIES.format(level=level))
        cmd = [
            self.java, f"-Xmx{self.heap}", f"-XX:MaxDirectMemorySize={self.direct_memory}",
            *JVM_FLAGS, *JAVA17_FLAGS, f"-Dlog4j2.configurationFile={log4j}",
            *shlex.split(os.environ.get(JVM_OPTS_ENV, "")),
            "-cp", os.pathsep.join([f"{lib}{os.sep}*", *self.extra_classpath]), MAIN_CLASS,
            "--config", str(conf),
            "--no-functions-worker", "--no-stream-storage",
            "--advertised-address", "127.0.0.1",
            # RocksDB metadata (no ZooKeeper) and the bookie, all under data/.
            "--metadata-dir", str(data_dir / "metadata"),
            "--bookkeeper-dir", str(data_dir / "bookkeeper"),
        ]
        if broker_version(lib).startswith("4."):
            # 5.0 dropped both flags (bookiePort in the conf is enough there).
            cmd += ["--bookkeeper-port", str(self.bookie_port),
                    # Only consulted to decide "ZooKeeper mode": must never exist.
                    "--zookeeper-dir", str(data_dir / "zookeeper")]
        env = dict(os.environ)
        env.pop("PULSAR_STANDALONE_USE_ZOOKEEPER", None)  # would force ZooKeeper mode
        self._log = open(self.log_path, "ab")  # closed by stop(): lives as long as the JVM
        self._log.write(f"\n=== {time.strftime('%F %T')} {' '.join(cmd)}\n".encode())
        self._log.flush()
        self._proc = subprocess.Popen(
            cmd, cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        _LIVE.add(self)
        self.service_url = f"pulsar://127.0.0.1:{self.broker_port}"
        self.admin_url = f"http://127.0.0.1:{self.web_port}"
        if self.tls:
            self.service_url_tls = f"pulsar+ssl://127.0.0.1:{self.broker_tls_port}"
            self.admin_url_tls = f"https://127.0.0.1:{self.web_tls_port}"

    def _tls_conf(self) -> str:
        """TLS listeners next to the plain ones; client certificates are asked for
        (TLS authentication) but not required, so token clients connect too."""
        if not self.tls:
            return ""

        self.ca = make_ca(self.workdir / "tls")
        return "\n".join([
            f"brokerServicePortTls={self.broker_tls_port}",
            f"webServicePortTls={self.web_tls_port}",
            f"tlsCertificateFilePath={self.ca.server_cert}",
            f"tlsKeyFilePath={self.ca.server_key}",
            f"tlsTrustCertsFilePath={self.ca.ca_file}",
            "tlsAllowInsecureConnection=false",
            "tlsRequireTrustedClientCertOnConnect=false",
        ]) + "\n"

    def _wait_ready(self, deadline: float) -> None:
        """Poll until a producer on public/default round-trips one message."""
        import pulsar

        last: str = "broker port never opened"
        payload = uuid.uuid4().hex.encode()
        client_log = str(self.workdir / "readiness-client.log")
        while True:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise RuntimeError(f"JVM exited with code {code}")
            if time.monotonic() >= deadline:
                raise RuntimeError(f"not ready in time; last error: {last}")
            if not _port_open(self.broker_port):
                time.sleep(0.25)
                continue
            auth = ({"authentication": pulsar.AuthenticationToken(self.client_token)}
                    if self.client_token else {})
            client = pulsar.Client(
                self.service_url, operation_timeout_seconds=10, connection_timeout_ms=3000,
                logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, client_log), **auth,
            )
            try:
                producer = client.create_producer(READY_TOPIC, send_timeout_millis=10_000)
                producer.send(payload)
                reader = client.create_reader(READY_TOPIC, pulsar.MessageId.earliest)
                while True:  # earlier starts of this workdir left messages too
                    if reader.read_next(timeout_millis=10_000).data() == payload:
                        return
            except Exception as e:  # namespace not created yet, bookie not up...
                last = f"{type(e).__name__}: {e}"
            finally:
                client.close()
            time.sleep(0.5)

    # ------------------------------------------------------------------ stop
    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the JVM's process group, then SIGKILL it; safe to call twice.

        SIGTERM runs Pulsar's shutdown hook (close topics, bookie, metadata
        store) so a later start() on the same workdir recovers cleanly.
        """
        proc, self._proc = self._proc, None
        _LIVE.discard(self)
        try:
            if proc is not None:
                if proc.poll() is None:
                    self._killpg(proc, signal.SIGTERM)
                    try:
                        proc.wait(timeout)
                    except subprocess.TimeoutExpired:
                        pass
                # The JVM is the group leader; anything it forked shares the group.
                self._killpg(proc, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None

    def restart(self, timeout: float = 240.0) -> None:
        """Stop (shutdown hook) and start again on the same data and ports, as an
        operator's broker restart: clients and producers reconnect by themselves."""
        self.stop()
        self.start(timeout)

    @staticmethod
    def _killpg(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def __enter__(self) -> PulsarStandalone:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- admin
    def delete_topic(self, topic: str) -> bool:
        """Delete a topic and its data (force: even with producers/subscriptions)."""
        _admin(self.admin_url, "DELETE", admin_topic_path(topic) + "?force=true")
        return True

    def terminate_topic(self, topic: str) -> bool:
        """Terminate via REST admin; True = supported (pulsar-lite returns False)."""
        admin_terminate(self.admin_url, topic)
        return True

    def last_message_id(self, topic: str) -> tuple[int, int]:
        """(ledgerId, entryId) of the topic's last message; entryId -1 if empty."""
        return admin_last_message_id(self.admin_url, topic)

    def log_tail(self, chars: int = 6000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - chars))
                return f.read().decode(errors="replace")
        except OSError:
            return "(no log)"


def _main(argv: list[str]) -> int:
    if argv[:1] == ["provision"] and len(argv) <= 2:
        print(provision(quiet=False, version=(argv[1:] or [None])[0]))
        return 0
    if len(argv) == 2 and argv[0] == "run":
        # SIGTERM/^C leave through the with-block, so the JVM is stopped too.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        with PulsarStandalone(pathlib.Path(argv[1])) as broker:
            print(broker.service_url, broker.admin_url, flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
        return 0
    print("usage: python -m pulsar_txn.harness.standalone provision [4.0|5.0] | run WORKDIR\n"
          f"(run: the release line in ${VERSION_ENV}, default 4.0)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
