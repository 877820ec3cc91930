"""pulsar-txn's broker plugin (issue 28) as the harness installs it, the way an operator
would (docs/broker-plugin.md): built by Maven from the repository's ``broker-plugin/``
(cached by the hash of its sources), its jar on the broker's classpath, its NAR in an
entry-filter directory, and the broker settings it needs."""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
from dataclasses import dataclass

PROVIDER = "io.github.pulsartxn.broker.PtxnTransactionBufferProvider"
VERSION = "0.1.0"


def _digest(plugin_dir: pathlib.Path) -> str:
    h = hashlib.sha256()
    for f in sorted([plugin_dir / "pom.xml", *plugin_dir.joinpath("src").rglob("*")]):
        if f.is_file() and "/src/test/" not in f.as_posix():
            h.update(f.relative_to(plugin_dir).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def build(plugin_dir: pathlib.Path, settings: pathlib.Path | None = None,
          cache: pathlib.Path | None = None) -> tuple[pathlib.Path, pathlib.Path]:
    """The plugin's jar and NAR, built once per source change (``mvn package``)."""
    plugin_dir = pathlib.Path(plugin_dir).resolve()
    cache = cache or pathlib.Path(os.environ.get("XDG_CACHE_HOME",
                                                 pathlib.Path.home() / ".cache"))
    out = cache / "pulsar-txn" / "broker-plugin" / _digest(plugin_dir)
    jar, nar = out / f"pulsar-txn-broker-{VERSION}.jar", out / f"pulsar-txn-filter-{VERSION}.nar"
    if jar.exists() and nar.exists():
        return jar, nar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("building the broker plugin needs Maven (mvn) and Java 17")
    cmd = [mvn, "-B", "-q", "-DskipTests", "package"]
    if settings is not None:
        cmd[1:1] = ["-s", str(settings)]
    done = subprocess.run(cmd, cwd=plugin_dir, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"mvn package in {plugin_dir} failed:\n{tail}")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(plugin_dir / "target" / jar.name, jar)
    shutil.copy(plugin_dir / "target" / nar.name, nar)
    return jar, nar


@dataclass(frozen=True)
class Governing:
    """The harness's one switch for the plugin (``start_broker(..., plugin=...)``,
    ``Services(broker_plugin=...)``): which pulsar-txn namespace of which metastore
    governs which Pulsar namespaces, and where the plugin's sources are. ``delegate``:
    the transaction-buffer provider of the topics it does not govern (empty: the
    broker's disabled buffer; Pulsar's own, ``TOPIC_BUFFER``, lets Pulsar v4
    transactions run beside it)."""

    metastore_url: str
    metastore_namespace: str
    source: pathlib.Path
    governed: str = "public/default"
    delegate: str = ""
    maven_settings: pathlib.Path | None = None
    password_file: pathlib.Path | None = None  # ptxn.metastorePasswordFile: kept out of the URL

    TOPIC_BUFFER = "org.apache.pulsar.broker.transaction.buffer.impl.TopicTransactionBufferProvider"

    def install(self, workdir: pathlib.Path) -> tuple[tuple[pathlib.Path, ...], str]:
        """What the broker started in ``workdir`` needs: its extra classpath (the jar)
        and its extra configuration (the NAR copied where the filter loader scans)."""
        settings = self.maven_settings
        if settings is None:
            repo = pathlib.Path(self.source).resolve().parent
            guess = repo / "benchmarks" / "peer" / "maven-settings.xml"
            settings = guess if guess.exists() else None
        jar, nar = build(self.source, settings=settings)
        conf = broker_conf(workdir, nar, self.metastore_url, self.metastore_namespace,
                           self.governed)
        if self.delegate:
            conf += f"ptxn.delegateProvider={self.delegate}\n"
        if self.password_file:
            conf += f"ptxn.metastorePasswordFile={self.password_file}\n"
        return (jar,), conf


def broker_conf(workdir: pathlib.Path, nar: pathlib.Path, metastore_url: str,
                metastore_namespace: str, governed: str = "public/default") -> str:
    """The lines to add to the broker's configuration; the NAR goes into
    ``workdir/entry-filters`` (the directory the filter loader scans)."""
    filters = pathlib.Path(workdir).resolve() / "entry-filters"
    filters.mkdir(parents=True, exist_ok=True)
    shutil.copy(nar, filters / nar.name)
    return "\n".join([
        "transactionCoordinatorEnabled=true",
        f"transactionBufferProviderClassName={PROVIDER}",
        f"entryFiltersDirectory={filters}",
        f"narExtractionDirectory={filters / 'extracted'}",
        "entryFilterNames=ptxn",
        "allowOverrideEntryFilters=false",
        f"ptxn.metastoreUrl={metastore_url}",
        f"ptxn.metastoreNamespace={metastore_namespace}",
        f"ptxn.pulsarNamespaces={governed}",
    ]) + "\n"
