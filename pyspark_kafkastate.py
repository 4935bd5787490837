"""Static registration of kafkastate's PySpark data source (SPARK.md G20).

PySpark imports every top-level ``pyspark_*`` module it finds and registers its
``DefaultSource`` under ``DefaultSource.name()``, so with ``kafkastate[spark]`` installed
``spark.read.format("kafkastate")`` works without calling ``kafkastate.spark.register``.
"""

from kafkastate.spark import KafkaStateDataSource as DefaultSource

__all__ = ["DefaultSource"]
