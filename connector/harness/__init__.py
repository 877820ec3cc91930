"""Real services on loopback for tests, the quick start and benchmarks.

Nothing here is a mock: a Redis-compatible server process and a Pulsar broker
process (pulsar-lite, Apache Pulsar standalone, or a testcontainer).
"""

from .services import Services, broker_kind, start_broker

__all__ = ["Services", "broker_kind", "start_broker"]
