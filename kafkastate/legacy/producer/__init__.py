"""kafka-python 0.9.5's producers."""

from kafkastate.legacy.producer.keyed import KeyedProducer
from kafkastate.legacy.producer.simple import SimpleProducer

__all__ = ["KeyedProducer", "SimpleProducer"]
