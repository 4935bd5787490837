"""Requests whose body was encoded ahead: :class:`EncodedRequest` and its per-version
subclasses (:func:`encoded_request_type`), re-exported by
:mod:`kafkastate.core.protocol.framing`.

In a module of their own so that ``framing`` can be compiled with mypyc
(``tools/build_mypyc.py``): :func:`encoded_request_type` makes subclasses at run time with
``type()``, which a compiled (native) class does not allow; this module stays interpreted.
"""

from __future__ import annotations

import functools
from typing import ClassVar, Final

__all__ = ["EncodedRequest", "encoded_request_type"]


class EncodedRequest:
    """A request whose body was encoded ahead, by a hand-written encoder for a hot
    request (Produce): :func:`~kafkastate.core.protocol.framing.encode_request` writes
    :attr:`body` as it is.

    Like a kio entity class, each subclass names its API key, version and flexibility
    (:func:`encoded_request_type`), so connections treat both alike.

    Args:
        body: the encoded body.
    """

    __slots__ = ("body",)
    __api_key__: ClassVar[int]
    __version__: ClassVar[int]
    __flexible__: ClassVar[bool]

    def __init__(self, body: bytes) -> None:
        self.body: Final = body
        """The encoded request body."""

    def __repr__(self) -> str:
        cls = type(self)
        return f"<EncodedRequest api_key={cls.__api_key__} v{cls.__version__} {len(self.body)} B>"


@functools.cache
def encoded_request_type(api_key: int, version: int, *, flexible: bool) -> type[EncodedRequest]:
    """The :class:`EncodedRequest` subclass for one API key and version.

    Args:
        api_key: the API key.
        version: the request version.
        flexible: whether that version is flexible (KIP-482).

    Returns:
        The class (one per arguments).
    """
    namespace = {
        "__slots__": (),
        "__api_key__": api_key,
        "__version__": version,
        "__flexible__": flexible,
    }
    return type(f"EncodedRequest{api_key}v{version}", (EncodedRequest,), namespace)
