"""The operator's commands: ``quotas``, ``users`` (SCRAM credentials), ``reassignments``,
``elect-leaders``, ``transactions`` (and their producers), and ``cluster --features`` /
``--quorum``'s tables -- :class:`kafkastate.sync.KafkaAdminClient` calls, each printed as a
table on a terminal, tab-separated rows when piped, JSON with ``--json``."""

from __future__ import annotations

import click

from kafkastate.cli._admin import _fail_on, _ids, _pairs, admin_client, json_option
from kafkastate.cli._app import CONTEXT, CommandError, cluster_options
from kafkastate.cli._options import Connection
from kafkastate.cli._output import Output
from kafkastate.errors import ElectionNotNeededError, KafkaError
from kafkastate.structs import TopicPartition
from kafkastate.sync import (
    AbortTransactionSpec,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ElectionType,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

__all__ = [
    "cluster_features",
    "cluster_quorum",
    "elect_leaders",
    "quotas",
    "reassignments",
    "transactions",
    "users",
]

_PARTITIONS = "TOPIC:PARTITION..."
_MECHANISMS = click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512"], case_sensitive=False)


def _partition(text: str) -> TopicPartition:
    """``topic:partition`` as a TopicPartition."""
    topic, sep, partition = text.rpartition(":")
    if not sep or not topic or not partition.isdigit():
        raise click.BadParameter(f"{text!r} is not topic:partition")
    return TopicPartition(topic, int(partition))


# ---------------------------------------------------------------------------- cluster


def cluster_features(conn: Connection, as_json: bool) -> None:
    """``kafkastate cluster --features``: finalized and supported feature levels."""
    with admin_client(conn) as admin:
        features = admin.describe_features()
    finalized = features["finalized_features"]
    supported = features["supported_features"]
    rows = [
        (name, *finalized.get(name, ("", "")), *supported.get(name, ("", "")))
        for name in sorted(set(finalized) | set(supported))
    ]
    columns = ("feature", "finalized min", "finalized max", "supported min", "supported max")
    Output(as_json=as_json).table("features", columns, rows)


def cluster_quorum(conn: Connection, as_json: bool) -> None:
    """``kafkastate cluster --quorum``: the KRaft quorum's voters and observers."""
    with admin_client(conn) as admin:
        quorum = admin.describe_metadata_quorum()
    (partition,) = quorum["topics"][0]["partitions"]
    rows = [
        (r["replica_id"], role, "yes" if r["replica_id"] == partition["leader_id"] else "",
         r["log_end_offset"], partition["high_watermark"])
        for role, key in (("voter", "current_voters"), ("observer", "observers"))
        for r in partition[key]
    ]  # fmt: skip
    columns = ("node", "role", "leader", "log end offset", "high watermark")
    Output(as_json=as_json).table("metadata quorum", columns, rows)


# ----------------------------------------------------------------------------- quotas


def _entity(client_id: str | None, user: str | None) -> dict[str, str]:
    entity = {k: v for k, v in (("user", user), ("client-id", client_id)) if v is not None}
    if not entity:
        raise click.UsageError("name the entity: --client-id and/or --user")
    return entity


@click.group(context_settings=CONTEXT)
def quotas() -> None:
    """List, set and remove client quotas (byte rates, request percentage...)."""


@quotas.command("list")
@click.option("--client-id", help="Only this client id's quotas.")
@click.option("--user", help="Only this user's quotas.")
@json_option
@cluster_options
def quotas_list(conn: Connection, client_id: str | None, user: str | None, as_json: bool) -> None:
    """List client quotas (default: all)."""
    components = [
        ClientQuotaFilterComponent(kind, name)
        for kind, name in (("client-id", client_id), ("user", user))
        if name is not None
    ]
    with admin_client(conn) as admin:
        found = admin.describe_client_quotas(components)
    rows = [
        (",".join(f"{kind}={name}" for kind, name in entity), quota, value)
        for entity, values in sorted(found.items(), key=lambda item: str(item[0]))
        for quota, value in sorted(values.items())
    ]
    Output(as_json=as_json).table("quotas", ("entity", "quota", "value"), rows)


@quotas.command("set")
@click.argument("settings", nargs=-1, required=True, metavar="QUOTA=VALUE...")
@click.option("--client-id", help="The client id the quotas are for.")
@click.option("--user", help="The user the quotas are for.")
@cluster_options
def quotas_set(
    conn: Connection, settings: tuple[str, ...], client_id: str | None, user: str | None
) -> None:
    """Set quotas, e.g. ``producer_byte_rate=1048576``."""
    ops: dict[str, float | None] = {}
    for name, value in _pairs(settings, "QUOTA=VALUE").items():
        try:
            ops[name] = float(value)
        except ValueError:
            raise click.BadParameter(f"{name}={value}: not a number") from None
    _alter_quotas(conn, _entity(client_id, user), ops)


@quotas.command("remove")
@click.argument("names", nargs=-1, required=True, metavar="QUOTA...")
@click.option("--client-id", help="The client id the quotas are for.")
@click.option("--user", help="The user the quotas are for.")
@cluster_options
def quotas_remove(
    conn: Connection, names: tuple[str, ...], client_id: str | None, user: str | None
) -> None:
    """Remove quotas (back to the defaults)."""
    _alter_quotas(conn, _entity(client_id, user), dict.fromkeys(names))


def _alter_quotas(conn: Connection, entity: dict[str, str], ops: dict[str, float | None]) -> None:
    with admin_client(conn) as admin:
        results = admin.alter_client_quotas([ClientQuotaAlteration(entity, ops)])
    _fail_on({str(k): v for k, v in results.items()}, "altering quotas")
    Output().note(f"% altered {len(ops)} quota(s)")


# -------------------------------------------------------------------------- users


@click.group(context_settings=CONTEXT)
def users() -> None:
    """List, set and delete users' SCRAM credentials."""


@users.command("list")
@click.argument("names", nargs=-1)
@json_option
@cluster_options
def users_list(conn: Connection, names: tuple[str, ...], as_json: bool) -> None:
    """List the SCRAM credentials of users (default: every user that has one)."""
    with admin_client(conn) as admin:
        found = admin.describe_user_scram_credentials(list(names) or None)
    rows = []
    for user, info in sorted(found.items()):
        if info["error"] is not None:
            raise CommandError(f"user {user}: {info['error']}")
        rows += [(user, c["mechanism"].name.replace("_", "-"), c["iterations"])
                 for c in info["credential_infos"]]  # fmt: skip
    Output(as_json=as_json).table("users", ("user", "mechanism", "iterations"), rows)


@users.command("set")
@click.argument("user")
@click.option("--mechanism", type=_MECHANISMS, default="SCRAM-SHA-256", show_default=True)
@click.option("--password", prompt=True, hide_input=True, help="[default: asked for]")
@click.option("--iterations", type=click.IntRange(4096, 16384), default=4096, show_default=True)
@cluster_options
def users_set(conn: Connection, user: str, mechanism: str, password: str, iterations: int) -> None:
    """Add or replace a user's SCRAM credential (only its salted form is sent)."""
    upsert = UserScramCredentialUpsertion(user, mechanism.upper(), password, iterations)
    with admin_client(conn) as admin:
        _fail_on(admin.alter_user_scram_credentials([upsert]), "setting the credential")
    Output().note(f"% set {mechanism.upper()} for {user}")


@users.command("delete")
@click.argument("user")
@click.option("--mechanism", type=_MECHANISMS, default="SCRAM-SHA-256", show_default=True)
@cluster_options
def users_delete(conn: Connection, user: str, mechanism: str) -> None:
    """Delete a user's SCRAM credential."""
    deletion = UserScramCredentialDeletion(user, mechanism.upper())
    with admin_client(conn) as admin:
        _fail_on(admin.alter_user_scram_credentials([deletion]), "deleting the credential")
    Output().note(f"% deleted {mechanism.upper()} of {user}")


# -------------------------------------------------------- reassignments and leaders


@click.group(context_settings=CONTEXT)
def reassignments() -> None:
    """List, start and cancel partition reassignments."""


@reassignments.command("list")
@json_option
@cluster_options
def reassignments_list(conn: Connection, as_json: bool) -> None:
    """List the reassignments in progress."""
    with admin_client(conn) as admin:
        ongoing = admin.list_partition_reassignments()
    rows = [
        (tp.topic, tp.partition, _ids(r["replicas"]), _ids(r["adding_replicas"]),
         _ids(r["removing_replicas"]))
        for tp, r in sorted(ongoing.items())
    ]  # fmt: skip
    columns = ("topic", "partition", "replicas", "adding", "removing")
    Output(as_json=as_json).table("reassignments", columns, rows)


@reassignments.command("start")
@click.argument("partition", type=_partition, metavar="TOPIC:PARTITION")
@click.argument("brokers", nargs=-1, required=True, type=int)
@cluster_options
def reassignments_start(
    conn: Connection, partition: TopicPartition, brokers: tuple[int, ...]
) -> None:
    """Move a partition's replicas to BROKERS (the first is the preferred leader)."""
    with admin_client(conn) as admin:
        results = admin.alter_partition_reassignments({partition: list(brokers)})
    _fail_on({str(k): v for k, v in results.items()}, "reassignment")
    Output().note(f"% reassigning {partition.topic}:{partition.partition} to {_ids(brokers)}")


@reassignments.command("cancel")
@click.argument(
    "partitions", nargs=-1, required=True, type=_partition, metavar="TOPIC:PARTITION..."
)
@cluster_options
def reassignments_cancel(conn: Connection, partitions: tuple[TopicPartition, ...]) -> None:
    """Cancel reassignments in progress."""
    with admin_client(conn) as admin:
        results = admin.alter_partition_reassignments(dict.fromkeys(partitions))
    _fail_on({str(k): v for k, v in results.items()}, "cancelling")
    Output().note(f"% cancelled {len(partitions)} reassignment(s)")


@click.command("elect-leaders", context_settings=CONTEXT)
@click.argument("partitions", nargs=-1, type=_partition, metavar="[TOPIC:PARTITION...]")
@click.option("--unclean", is_flag=True, help="An out-of-sync replica may lead (data loss).")
@json_option
@cluster_options
def elect_leaders(
    conn: Connection, partitions: tuple[TopicPartition, ...], unclean: bool, as_json: bool
) -> None:
    """Elect the preferred (or, --unclean, any) leader of partitions (default: all)."""
    kind = ElectionType.UNCLEAN if unclean else ElectionType.PREFERRED
    with admin_client(conn) as admin:
        results = admin.elect_leaders(kind, list(partitions) or None, raise_errors=False)
    rows = []
    for tp, error in sorted(results.items()):
        if isinstance(error, KafkaError) and not isinstance(error, ElectionNotNeededError):
            raise CommandError(f"election of {tp.topic}:{tp.partition}: {error}")
        rows.append((tp.topic, tp.partition, "not needed" if error is not None else "elected"))
    Output(as_json=as_json).table("elections", ("topic", "partition", "result"), rows)


# --------------------------------------------------------------------- transactions


@click.group(context_settings=CONTEXT)
def transactions() -> None:
    """List, describe, find hanging and abort transactions; list partitions' producers."""


@transactions.command("list")
@json_option
@cluster_options
def transactions_list(conn: Connection, as_json: bool) -> None:
    """List the transactional ids every coordinator knows."""
    with admin_client(conn) as admin:
        listed = admin.list_transactions()
    rows = sorted(
        (t.transactional_id, t.producer_id, t.state, broker)
        for broker, found in listed.items()
        for t in found
    )
    columns = ("transactional id", "producer id", "state", "coordinator")
    Output(as_json=as_json).table("transactions", columns, rows)


@transactions.command("describe")
@click.argument("ids", nargs=-1, required=True, metavar="TRANSACTIONAL_ID...")
@json_option
@cluster_options
def transactions_describe(conn: Connection, ids: tuple[str, ...], as_json: bool) -> None:
    """Describe transactions at their coordinators."""
    with admin_client(conn) as admin:
        described = admin.describe_transactions(ids)
    rows = [
        (tid, d.state, d.producer_id, d.producer_epoch, d.transaction_start_time_ms,
         ",".join(f"{tp.topic}:{tp.partition}" for tp in sorted(d.topic_partitions)))
        for tid, d in described.items()
    ]  # fmt: skip
    columns = ("transactional id", "state", "producer id", "epoch", "started (ms)", "partitions")
    Output(as_json=as_json).table("transactions", columns, rows)


@transactions.command("find-hanging")
@click.option(
    "--older-than-ms",
    type=click.IntRange(min=0),
    default=900000,
    show_default=True,
    help="Open longer than this (the broker's transaction.max.timeout.ms).",
)
@json_option
@cluster_options
def transactions_find_hanging(conn: Connection, older_than_ms: int, as_json: bool) -> None:
    """List open transactions older than --older-than-ms."""
    with admin_client(conn) as admin:
        hanging = admin.find_hanging_transactions(max_transaction_timeout_ms=older_than_ms)
    rows = [
        (h["transactional_id"], h["state"], h["producer_id"], h["producer_epoch"], h["age_ms"],
         ",".join(f"{tp.topic}:{tp.partition}" for tp in h["topic_partitions"]))
        for h in hanging
    ]  # fmt: skip
    columns = ("transactional id", "state", "producer id", "epoch", "age (ms)", "partitions")
    Output(as_json=as_json).table("hanging transactions", columns, rows)


@transactions.command("producers")
@click.argument(
    "partitions", nargs=-1, required=True, type=_partition, metavar="TOPIC:PARTITION..."
)
@json_option
@cluster_options
def transactions_producers(
    conn: Connection, partitions: tuple[TopicPartition, ...], as_json: bool
) -> None:
    """List the active producers of partitions (what ``abort`` needs)."""
    with admin_client(conn) as admin:
        found = admin.describe_producers(partitions)
    rows = [
        (tp.topic, tp.partition, p.producer_id, p.producer_epoch, p.coordinator_epoch,
         p.current_transaction_start_offset)
        for tp, state in sorted(found.items())
        for p in state.active_producers
    ]  # fmt: skip
    columns = ("topic", "partition", "producer id", "epoch", "coordinator epoch", "txn start")
    Output(as_json=as_json).table("producers", columns, rows)


@transactions.command("abort")
@click.argument("partition", type=_partition, metavar="TOPIC:PARTITION")
@click.option("--producer-id", type=int, required=True)
@click.option("--producer-epoch", type=int, required=True)
@click.option("--coordinator-epoch", type=int, default=-1, show_default=True)
@cluster_options
def transactions_abort(
    conn: Connection,
    partition: TopicPartition,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
) -> None:
    """Abort a hanging transaction on one partition (an abort marker at its leader)."""
    spec = AbortTransactionSpec(partition, producer_id, producer_epoch, coordinator_epoch)
    with admin_client(conn) as admin:
        admin.abort_transaction(spec)
    Output().note(
        f"% aborted producer {producer_id}'s transaction on {partition.topic}:{partition.partition}"
    )
