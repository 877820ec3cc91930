"""The Spark wing's log lines, shown in the processes Spark runs it in."""

from __future__ import annotations

import logging
import os


def configure_logging() -> None:
    """Show the wing's log lines (sink commits, source progress, warnings) in the
    process Spark runs it in: Spark keeps a Python worker's stderr in the driver's or
    executor's log, and the worker has no logging set up of its own. Called where
    Spark loads the source or runs a task, never at import, so importing the package
    leaves an application's own logging alone."""
    log = logging.getLogger("pulsar_txn.spark")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(level())


def level() -> int:
    """``PULSAR_TXN_LOG_LEVEL`` (``DEBUG`` shows a line per batch and per trigger;
    default ``INFO``: warnings and rare events only). Spark passes the driver's
    environment to its Python workers; executors take ``spark.executorEnv.*``."""
    name = os.environ.get("PULSAR_TXN_LOG_LEVEL", "INFO").strip().upper()
    value = logging.getLevelName(name)
    return value if isinstance(value, int) else logging.INFO
