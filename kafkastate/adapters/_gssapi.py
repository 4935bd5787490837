"""The Kerberos half of SASL/GSSAPI: security contexts from the ``gssapi`` package.

The core's :class:`~kafkastate.core.sasl.GssapiMechanism` sequences the exchange; this
module makes the GSS-API calls it asks for. They are blocking library calls: with a ticket
in the credentials cache they only compute, but the first context for a service may ask the
KDC for a service ticket (and, with ``KRB5_CLIENT_KTNAME``, for the initial ticket), so they
take as long as the KDC takes to answer -- on loopback or a LAN, milliseconds.

Which principal and cache are used is MIT Kerberos's business: ``KRB5CCNAME`` (after
``kinit``), ``KRB5_CLIENT_KTNAME`` (a client keytab), ``KRB5_CONFIG`` (the realm).
Imported only when a client uses GSSAPI (``kafkastate[gssapi]``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import gssapi
from gssapi.raw.misc import GSSError

from kafkastate.errors import AuthenticationFailedError, KafkaConfigurationError

__all__ = ["GssapiSecurityContext"]


@contextlib.contextmanager
def _failing_closed(what: str) -> Iterator[None]:
    # Every GSS-API failure ends the authentication: no retry can fix missing credentials.
    try:
        yield
    except GSSError as exc:
        raise AuthenticationFailedError(f"{what}: {exc}") from exc


class GssapiSecurityContext:
    """One Kerberos initiator context for the broker's Kerberos name, the shape of
    :class:`kafkastate.core.sasl.GssapiContext` (its factory is the class itself).

    Args:
        name: ``"service@host"``, e.g. ``"kafka@broker1.example.com"``; with
            ``principal``, ``"kafka/broker1.example.com@REALM"``; or a ``gssapi.Name``.
        principal: ``name`` is a Kerberos principal name, not a host-based service.

    Raises:
        AuthenticationFailedError: the name cannot be imported.
        KafkaConfigurationError: ``name`` is neither a str nor a ``gssapi.Name``.
    """

    def __init__(self, name: str | gssapi.Name, /, *, principal: bool = False) -> None:
        self._service = str(name)
        with _failing_closed(f"GSSAPI: cannot name the service {self._service!r}"):
            if isinstance(name, gssapi.Name):
                target = name
            elif isinstance(name, str):
                kind = (
                    gssapi.NameType.kerberos_principal
                    if principal
                    else gssapi.NameType.hostbased_service
                )
                target = gssapi.Name(name, name_type=kind)
            else:
                raise KafkaConfigurationError(
                    f"sasl_kerberos_name must be a str or a gssapi.Name, got {name!r}"
                )
            flags = gssapi.RequirementFlag.mutual_authentication | gssapi.RequirementFlag.integrity
            self._context = gssapi.SecurityContext(
                name=target, usage="initiate", mech=gssapi.MechType.kerberos, flags=flags
            )

    def __repr__(self) -> str:
        return f"<GssapiSecurityContext {self._service}>"

    def step(self, token: bytes | None) -> bytes | None:
        with _failing_closed(f"GSSAPI security context for {self._service} failed"):
            out = self._context.step(token)
        return None if out is None else bytes(out)

    @property
    def complete(self) -> bool:
        return bool(self._context.complete)

    def unwrap(self, message: bytes) -> bytes:
        with _failing_closed(f"GSSAPI ({self._service}): bad security layer offer"):
            return bytes(self._context.unwrap(message).message)

    def wrap(self, message: bytes) -> bytes:
        with _failing_closed(f"GSSAPI ({self._service}): cannot wrap the layer choice"):
            return bytes(self._context.wrap(message, False).message)
