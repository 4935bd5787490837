"""One committed transaction from a fresh transactional producer (kafkastate's blocking one)."""

from __future__ import annotations

from kafkastate.sync import KafkaProducer


def commit_one(bootstrap: str, tid: str, topic: str, value: bytes, *, partition: int = 0) -> None:
    """Start a producer with ``tid`` (InitProducerId: a new epoch, fencing any older one and
    aborting what it left open), commit one record in a transaction, close it."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value, partition=partition).get(timeout=30)
        producer.commit_transaction()
    finally:
        producer.close(timeout=30)
