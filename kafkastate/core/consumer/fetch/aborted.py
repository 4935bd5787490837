"""read_committed: skipping the batches of aborted transactions (KIP-98).

Theory of operation
-------------------
With ``isolation_level=read_committed`` the broker sends data only up to the last stable
offset and, with each partition, the aborted transactions that overlap it: ``(producer id,
first offset)`` pairs (Fetch v4+, ``aborted_transactions``). Walking the batches in offset
order, a producer becomes *aborted* once a transactional batch of it reaches its aborted
transaction's first offset, and stays so until its ABORT control batch: its transactional
batches in between are skipped. A COMMIT marker changes nothing; control batches themselves
never reach the application (the decoder moves the position past them). This is the Java
``CompletedFetch`` rule; the list and the set live on the partition's fetched data
(:class:`~kafkastate.core.consumer.fetch.decode._Completed`).
"""

from __future__ import annotations

from typing import Any

from kafkastate.core.protocol.records import Batch, ControlRecordType

__all__ = ["aborted_transactions", "is_aborted", "marker_seen"]


def aborted_transactions(part: Any) -> list[tuple[int, int]]:
    """A Fetch response partition's aborted transactions as ``(first_offset,
    producer_id)``, sorted (none for read_uncommitted or before Fetch v4)."""
    return sorted(
        (int(a.first_offset), int(a.producer_id))
        for a in (getattr(part, "aborted_transactions", None) or ())
    )


def marker_seen(batch: Batch, aborted_producers: set[int]) -> None:
    """A control batch: an ABORT marker ends its producer's aborted transaction."""
    marker = batch.marker
    if marker is not None and marker.type is ControlRecordType.ABORT:
        aborted_producers.discard(batch.producer_id)


def is_aborted(batch: Batch, aborted: list[tuple[int, int]], aborted_producers: set[int]) -> bool:
    """Whether a transactional ``batch`` belongs to an aborted transaction.

    Args:
        batch: a transactional data batch, in offset order after the ones before.
        aborted: the aborted transactions not reached yet, sorted; those the batch reaches
            are taken from its head.
        aborted_producers: producers inside an aborted transaction; grows here.
    """
    while aborted and aborted[0][0] <= batch.last_offset:
        aborted_producers.add(aborted.pop(0)[1])
    return batch.producer_id in aborted_producers
