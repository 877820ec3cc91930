"""Apache Pulsar standalone in a testcontainer, where a Docker engine exists."""

from __future__ import annotations

from pathlib import Path

from pulsar_txn.admin import admin_terminate

IMAGE = "apachepulsar/pulsar:4.0.8"


def docker_available() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


class PulsarContainer:
    kind = "container"

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self._c = None
        self.service_url = ""
        self.admin_url = ""

    def start(self, timeout: float = 240.0) -> None:
        if not docker_available():
            raise RuntimeError("broker 'container' needs a running Docker engine")
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.waiting_utils import wait_for_logs

        self._c = (DockerContainer(IMAGE)
                   .with_command("bin/pulsar standalone --no-functions-worker -nss")
                   .with_exposed_ports(6650, 8080))
        self._c.start()
        wait_for_logs(self._c, "messaging service is ready", timeout=timeout)
        host = self._c.get_container_host_ip()
        self.service_url = f"pulsar://{host}:{self._c.get_exposed_port(6650)}"
        self.admin_url = f"http://{host}:{self._c.get_exposed_port(8080)}"

    def stop(self) -> None:
        if self._c is not None:
            self._c.stop()
            self._c = None

    def terminate_topic(self, topic: str) -> bool:
        admin_terminate(self.admin_url, topic)
        return True
