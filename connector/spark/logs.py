"""The Spark wing's log lines, shown in the processes Spark runs it in."""

from __future__ import annotations

import logging


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
        log.setLevel(logging.INFO)
