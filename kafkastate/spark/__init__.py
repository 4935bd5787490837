"""Kafka for PySpark, on kafkastate's client: the data source ``kafkastate``.

Batch and streaming reads and writes with the options and schema of Spark's own Kafka
source and sink (see docs/spark.md)::

    spark.read.format("kafkastate")
        .option("kafka.bootstrap.servers", "localhost:9092")
        .option("subscribe", "events")
        .load()

Installed with the ``spark`` extra (``pip install kafkastate[spark]``: pyspark >= 4.2 and
pyarrow). The format is found automatically through the top-level module
``pyspark_kafkastate``; :func:`register` adds it to one session explicitly (for example when
kafkastate is importable on the workers but not installed in their site-packages).
"""

from __future__ import annotations

from typing import Any

try:
    import pyarrow  # noqa: F401
    import pyspark.sql.datasource  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"kafkastate.spark needs pyspark >= 4.2 and pyarrow ({exc}): "
        "pip install 'kafkastate[spark]'"
    ) from exc

from kafkastate.spark._kafka import SinkSchemaError
from kafkastate.spark._offsets import DataLossError
from kafkastate.spark._source import (
    KafkaStateDataSource,
    KafkaStateReader,
    KafkaStateStreamReader,
    KafkaStateStreamWriter,
    KafkaStateWriter,
    RangePartition,
    WriteResult,
    kafka_schema,
)

__all__ = [
    "DataLossError",
    "KafkaStateDataSource",
    "KafkaStateReader",
    "KafkaStateStreamReader",
    "KafkaStateStreamWriter",
    "KafkaStateWriter",
    "RangePartition",
    "SinkSchemaError",
    "WriteResult",
    "kafka_schema",
    "register",
]


def register(spark: Any) -> None:
    """Register the ``kafkastate`` format with a SparkSession.

    Args:
        spark: the ``pyspark.sql.SparkSession``.
    """
    spark.dataSource.register(KafkaStateDataSource)
