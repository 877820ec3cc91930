"""Auto-registration: Spark looks up top-level ``pyspark_*`` modules with a DefaultSource."""

from pulsar_txn.spark.datasource import PulsarTxnDataSource as DefaultSource

__all__ = ["DefaultSource"]
