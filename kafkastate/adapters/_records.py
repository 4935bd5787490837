"""Records as the application gets them, shared by the consumer adapters: the machine's
runs of :class:`~kafkastate.structs.ConsumerRecord` tuples (decoded as such by the core),
grouped per partition, with the user's deserializers run here (user code). A deserializer
that raises loses nothing: the record it failed on and every record after it go back to the
machine (:meth:`~kafkastate.core.consumer.consumer.ConsumerMachine.give_back`); what was
deserialized before it is returned, and the next read raises on that record again until
the application seeks past it (Java's behaviour)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafkastate.core.config import Deserialize
from kafkastate.core.consumer.consumer import ConsumerMachine, Run
from kafkastate.structs import ConsumerRecord, TopicPartition
from kafkastate.tracing import Tracing

__all__ = ["Deserializer", "one_consumer_record", "to_consumer_records"]

Deserializer = Deserialize
"""``(topic, headers, data) -> value``, as :func:`kafkastate.core.config.deserializer_of`
makes of an option."""


def _deserialized(
    record: ConsumerRecord, keys: Deserializer | None, values: Deserializer | None
) -> ConsumerRecord:
    """``record`` with its key and value (fields 6 and 7) deserialized."""
    key = record.key if keys is None else keys(record.topic, record.headers, record.key)
    value = record.value if values is None else values(record.topic, record.headers, record.value)
    fields: tuple[Any, ...] = (*record[:6], key, value, *record[8:])
    made: ConsumerRecord = tuple.__new__(ConsumerRecord, fields)
    return made


def to_consumer_records(
    runs: Sequence[Run],
    machine: ConsumerMachine,
    key_deserializer: Deserializer | None,
    value_deserializer: Deserializer | None,
    tracing: Tracing | None = None,
) -> dict[TopicPartition, list[ConsumerRecord]]:
    """The machine's record runs as :class:`ConsumerRecord` lists per partition (each
    traced by ``tracing``, when on).

    Raises:
        Exception: what a deserializer raised on the first record handed out (the records
            from it on went back to ``machine``).
    """
    out: dict[TopicPartition, list[ConsumerRecord]] = {}
    convert = key_deserializer is not None or value_deserializer is not None
    for i, ((topic, partition), records, epoch) in enumerate(runs):
        tp = TopicPartition(topic, partition)
        made = records
        if tracing is not None:
            tracing.received(made)
        if convert:
            done: list[ConsumerRecord] = []
            try:
                for record in made:
                    done.append(_deserialized(record, key_deserializer, value_deserializer))
            except Exception:
                machine.give_back(
                    [((topic, partition), records[len(done) :], epoch), *runs[i + 1 :]]
                )
                if done:
                    out.setdefault(tp, []).extend(done)
                if out:
                    return out  # the error comes with the next read, at the failed record
                raise
            made = done
        bucket = out.get(tp)
        if bucket is None:
            out[tp] = made
        else:
            bucket.extend(made)
    return out


def one_consumer_record(
    run: Run,
    machine: ConsumerMachine,
    key_deserializer: Deserializer | None,
    value_deserializer: Deserializer | None,
    tracing: Tracing | None = None,
) -> ConsumerRecord:
    """The one record of a :meth:`ConsumerMachine.take_one` run (traced by ``tracing``,
    when on).

    Raises:
        Exception: what a deserializer raised (the record went back to ``machine``).
    """
    record = run[1][0]
    if tracing is not None:
        tracing.received((record,))
    if key_deserializer is None and value_deserializer is None:
        return record
    try:
        return _deserialized(record, key_deserializer, value_deserializer)
    except Exception:
        machine.give_back([run])
        raise
