"""kafka-python 0.9.5's consumers."""

from kafkastate.legacy.consumer.kafka import KafkaConsumer
from kafkastate.legacy.consumer.multiprocess import MultiProcessConsumer
from kafkastate.legacy.consumer.simple import SimpleConsumer

__all__ = ["KafkaConsumer", "MultiProcessConsumer", "SimpleConsumer"]
