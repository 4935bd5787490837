"""The producer machine's own exception, in a module of its own.

It lives apart from :mod:`kafkastate.core.producer.producer` (which re-exports it) so that
module can be compiled with mypyc (``tools/build_mypyc.py``): mypyc cannot compile a class
that inherits from a class it does not compile, such as :class:`~kafkastate.errors.KafkaError`;
this module stays interpreted.
"""

from __future__ import annotations

from kafkastate.errors import KafkaError

__all__ = ["MetadataPendingError"]


class MetadataPendingError(KafkaError):
    """No metadata for the topic yet. Raised by ``send`` when nothing may wait (no
    ``max_block``; nothing was appended), else the cause of the ``KafkaTimeoutError`` of a
    send held until ``max_block`` passed.

    Retriable: the topic was added to the metadata of interest; wait for the next
    :class:`~kafkastate.core.client.MetadataUpdated` and send again.
    """

    retriable = True

    def __init__(self, topic: str) -> None:
        super().__init__(f"no metadata for topic {topic!r} yet; a refresh was requested")
        self.topic = topic
        """The topic."""
