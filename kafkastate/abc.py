"""Interfaces an application implements: rebalance listeners and partition assignors.

``from kafkastate.abc import ConsumerRebalanceListener`` replaces aiokafka's
``from aiokafka.abc import ConsumerRebalanceListener`` (kafka-python's class of the same
name is :class:`kafkastate.sync.ConsumerRebalanceListener`, the same class). kafka-python
3.0's ``kafka.consumer.subscription_state`` listeners live here too
(:class:`AsyncConsumerRebalanceListener`). aiokafka's OAUTHBEARER token provider interface
is :class:`AbstractTokenProvider` (kafka-python's, with a plain ``token()``, is accepted by
duck typing).
"""

from __future__ import annotations

import abc
from typing import Any

from kafkastate.core.consumer.assignors import (
    Assignment,
    Assignor,
    RebalanceProtocol,
    Subscription,
)
from kafkastate.structs import TopicPartition

__all__ = [
    "AbstractTokenProvider",
    "Assignment",
    "Assignor",
    "AsyncConsumerRebalanceListener",
    "ConsumerRebalanceListener",
    "RebalanceProtocol",
    "Subscription",
]


class ConsumerRebalanceListener:
    """Callbacks the consumer runs when the group moves partitions (aiokafka's and
    kafka-python's interface, plus Java's ``on_partitions_lost``).

    Give it to ``subscribe(topics, listener=...)``. Each method may be a plain function or
    a coroutine function (the asyncio, trio and anyio consumers await it; the blocking
    consumer needs plain ones). The consumer runs one callback at a time and waits for it:
    a revoke finishes before the member rejoins, so with the classic protocol every member's
    revoke completes before any member is assigned the partitions (commit in
    ``on_partitions_revoked`` and no other member reads them twice).

    Where callbacks run: the asyncio/trio/anyio consumers run them in their own task while
    the application keeps calling ``getmany`` (which returns nothing from partitions being
    revoked); the blocking consumer runs them inside ``poll()``, as kafka-python and Java do.

    A callback that raises does not stop the rebalance: the partitions are revoked or
    assigned as the group decided, and the next ``getmany``/``getone``/``poll`` raises
    :class:`~kafkastate.errors.RebalanceListenerError` with the callback's exception as its
    ``__cause__``.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        """Partitions are taken away (a rebalance, or the consumer leaving the group on
        close). Commit what was processed here when auto-commit is off. With auto-commit on,
        the consumer has already committed the revoked partitions' positions.

        Args:
            revoked: the partitions (eager protocol: everything owned; cooperative: only the
                ones that move).
        """

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        """Partitions were added. Their positions are being looked up (committed offset,
        else ``auto_offset_reset``); seek here to start elsewhere.

        Args:
            assigned: the partitions this rebalance added (eager protocol: the whole
                assignment).
        """

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        """Partitions were lost without a revoke: the member fell out of the group (session
        or poll timeout, fenced) and another member may own them already, so committing is
        pointless. The default calls :meth:`on_partitions_revoked`, as Java's does.

        Args:
            lost: the partitions.
        """
        return self.on_partitions_revoked(lost)


class AsyncConsumerRebalanceListener:
    """kafka-python 3.0's listener with coroutine methods
    (``kafka.consumer.subscription_state.AsyncConsumerRebalanceListener``): for the asyncio,
    trio and anyio consumers, which await a listener's coroutine methods (the blocking
    consumer runs plain ones: use :class:`ConsumerRebalanceListener` there). The defaults
    do nothing; ``on_partitions_lost`` calls ``on_partitions_revoked``."""

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Partitions are taken away (see :meth:`ConsumerRebalanceListener.on_partitions_revoked`).

        Args:
            revoked: the partitions.
        """

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Partitions were added (see :meth:`ConsumerRebalanceListener.on_partitions_assigned`).

        Args:
            assigned: the partitions.
        """

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """Partitions were lost without a revoke; calls :meth:`on_partitions_revoked`.

        Args:
            lost: the partitions.
        """
        await self.on_partitions_revoked(lost)


class AbstractTokenProvider(abc.ABC):
    """Where OAUTHBEARER tokens come from (aiokafka's ``aiokafka.abc.AbstractTokenProvider``).

    Give an instance as ``sasl_oauth_token_provider`` with ``sasl_mechanism="OAUTHBEARER"``.
    The client asks for a token at every authentication and every re-authentication
    (KIP-368), so a provider that caches must hand out a token that is still valid for a
    while -- :class:`kafkastate.oauth.OIDCTokenProvider` refreshes before expiry.
    The asyncio, trio and anyio clients await :meth:`token`; a blocking client
    (``kafkastate.sync``) runs it on an event loop of its own. kafka-python's providers,
    whose ``token()`` is a plain method, work with every client too (the async clients call
    it in a worker thread).
    """

    def __init__(self, **config: Any) -> None:
        del config  # aiokafka's signature

    @abc.abstractmethod
    async def token(self) -> str:
        """The bearer token (a compact-serialized JWT, usually).

        Raises:
            Exception: the token cannot be had; the connection fails with it (a
                KafkaError as is, anything else inside an AuthenticationFailedError).
        """

    def extensions(self) -> dict[str, str]:
        """SASL extensions (KIP-342) sent with the token, e.g. ``{"logicalCluster": ...}``;
        none by default."""
        return {}
