"""Spark data source ``pulsar-txn`` (imported lazily: pyspark is heavy)."""


def register(spark) -> None:
    """Register the ``pulsar-txn`` format on a session explicitly."""
    from .datasource import PulsarTxnDataSource

    spark.dataSource.register(PulsarTxnDataSource)
