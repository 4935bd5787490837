"""kafka-python 3.0's serializers (``kafka.serializer``), for the producer's
``key_serializer`` / ``value_serializer`` and the consumer's ``key_deserializer`` /
``value_deserializer`` on every face.

An option takes either a plain callable ``f(data)`` or one of these objects, called as
``serialize(topic, headers, data)`` / ``deserialize(topic, headers, data)``;
:func:`kafkastate.core.config.serializer_of` decides which, once for every runtime. A face
calls ``close()`` on the objects when it closes.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "DefaultSerializer",
    "DeserializeWrapper",
    "Deserializer",
    "JsonSerializer",
    "SerializeWrapper",
    "Serializer",
]

Headers = Sequence[tuple[str, Any]]


class Serializer(abc.ABC):
    """Turns a key or value into bytes (kafka-python's ``Serializer``)."""

    @abc.abstractmethod
    def serialize(self, topic: str, headers: Headers, data: Any) -> bytes | None:
        """Args:
            topic: the record's topic.
            headers: the record's ``(str, bytes)`` headers.
            data: the key or value.

        Returns:
            Its bytes, or None for a null key or value.
        """

    def close(self) -> None:  # noqa: B027 -- optional to override, as in kafka-python
        """Called when the producer closes."""


class Deserializer(abc.ABC):
    """Turns a key's or value's bytes into an object (kafka-python's ``Deserializer``)."""

    @abc.abstractmethod
    def deserialize(self, topic: str, headers: Headers, data: bytes | None) -> Any:
        """Args:
            topic: the record's topic.
            headers: the record's headers.
            data: the key or value bytes, None for a null one.

        Returns:
            The key or value.
        """

    def close(self) -> None:  # noqa: B027 -- optional to override, as in kafka-python
        """Called when the consumer closes."""


class DefaultSerializer(Serializer, Deserializer):
    """Text in ``encoding`` (bytes-like data and None pass through as they are).

    Args:
        encoding: the text encoding (UTF-8).
    """

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding
        """The text encoding."""

    def serialize(self, topic: str, headers: Headers, data: Any) -> Any:
        """Returns:
        ``data`` encoded, or as it is if bytes-like or None."""
        if data is None or isinstance(data, bytes | bytearray | memoryview):
            return data
        return data.encode(self.encoding)

    def deserialize(self, topic: str, headers: Headers, data: bytes | None) -> Any:
        """Returns:
        ``data`` decoded, or None."""
        return None if data is None else bytes(data).decode(self.encoding)


class JsonSerializer(DefaultSerializer):
    """JSON text in ``encoding``; None stays None."""

    def serialize(self, topic: str, headers: Headers, data: Any) -> Any:
        """Returns:
        ``data`` as JSON bytes, or None."""
        return None if data is None else super().serialize(topic, headers, json.dumps(data))

    def deserialize(self, topic: str, headers: Headers, data: bytes | None) -> Any:
        """Returns:
        The decoded JSON, or None."""
        return None if data is None else json.loads(super().deserialize(topic, headers, data))


class SerializeWrapper(Serializer):
    """A plain ``f(data)`` as a :class:`Serializer` (None: data passes through).

    Args:
        fn: the function.
    """

    def __init__(self, fn: Callable[[Any], Any] | None) -> None:
        self.fn = fn
        """The function."""

    def serialize(self, topic: str, headers: Headers, data: Any) -> Any:
        """Returns:
        ``fn(data)``."""
        return data if self.fn is None else self.fn(data)


class DeserializeWrapper(Deserializer):
    """A plain ``f(data)`` as a :class:`Deserializer` (None: data passes through).

    Args:
        fn: the function.
    """

    def __init__(self, fn: Callable[[Any], Any] | None) -> None:
        self.fn = fn
        """The function."""

    def deserialize(self, topic: str, headers: Headers, data: bytes | None) -> Any:
        """Returns:
        ``fn(data)``."""
        return data if self.fn is None else self.fn(data)
