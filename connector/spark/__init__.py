"""Spark data source ``pulsar-txn`` (the manual: ``help(PulsarTxnDataSource)``).

Modules, by role (imports point down this list):

- ``datasource``: ``PulsarTxnDataSource``, what Spark loads, and the user manual;
- ``source_reader``: the source's Spark readers, asked on the driver for offsets and
  partitions; ``planning``: which segments to read and how far (gates, scalable
  topics' DAG order, the optional subscription); ``partition_reader``: an executor
  reading one planned range; ``offsets``: the offsets' text form and how a range
  is cut into partitions;
- ``sink_commit``: the sink's Spark writers, whose driver-side commit decides each
  batch's transaction; ``sink_task``: an executor task writing its rows under it;
  ``faults``: the crash points the sink's tests inject;
- ``options``, ``resources``: parsed options; what a Python worker keeps; ``logs``:
  the wing's log lines in Spark's processes.

Why pyspark is imported lazily here, and only here: this package is also imported
without Spark (the CLI reads ``options`` to find a checkpoint's sink id;
``resources`` is tested alone), and ``import pyspark.sql`` costs about a second.
Every other module of the wing subclasses pyspark's data-source classes or builds
its partitions, so those import pyspark at the top.
"""

from __future__ import annotations

from .logs import configure_logging

__all__ = ["PulsarTxnDataSource", "configure_logging", "register"]


def register(spark) -> None:
    """Register the ``pulsar-txn`` format on a session explicitly (needed only when the
    package is not installed where Spark looks up data sources, e.g. an editable
    install)."""
    from .datasource import PulsarTxnDataSource  # pyspark: see the module docstring

    spark.dataSource.register(PulsarTxnDataSource)


def __getattr__(name: str):
    if name == "PulsarTxnDataSource":
        from .datasource import PulsarTxnDataSource  # pyspark: see the module docstring

        return PulsarTxnDataSource
    raise AttributeError(f"module 'pulsar_txn.spark' has no attribute {name!r}")
