"""The sans-IO admin client: :class:`AdminMachine` (request routing and per-resource
results; see ``machine.py``).

The values its commands take and its results hold live in this package's modules
(``types``, ``acls``, ``quotas``, ``replicas``, ``transactions``); their one public list is
:mod:`kafkastate.admin`, which every face re-exports."""

from kafkastate.core.admin.machine import (
    AdminConfig,
    AdminEvent,
    AdminMachine,
    AdminOperationCompleted,
    OpId,
)

__all__ = ["AdminConfig", "AdminEvent", "AdminMachine", "AdminOperationCompleted", "OpId"]
