"""``topics``, ``groups``, ``configs``, ``cluster`` and ``acls``: the admin client
(:class:`kafkastate.sync.KafkaAdminClient`) as commands. Each prints a table on a terminal,
tab-separated rows when piped, JSON with ``--json``."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from kafkastate.cli._app import CONTEXT, CommandError, cluster_options, refusal
from kafkastate.cli._options import Connection
from kafkastate.cli._output import Output
from kafkastate.core.admin.types import reset_offset
from kafkastate.core.consumer.assignors import Assignment
from kafkastate.errors import KafkaError
from kafkastate.structs import OffsetAndMetadata, TopicPartition
from kafkastate.sync import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

__all__ = ["acls", "cluster", "configs", "groups", "topics"]

_F = TypeVar("_F", bound=Callable[..., Any])

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
CONFIG_SOURCES = {
    0: "unknown",
    1: "topic",
    2: "dynamic broker",
    3: "dynamic default broker",
    4: "static broker",
    5: "default",
    6: "dynamic broker logger",
    7: "client metrics",
    8: "group",
}


@contextmanager
def admin_client(conn: Connection) -> Iterator[KafkaAdminClient]:
    """An admin client for the command's cluster."""
    with KafkaAdminClient(**conn.client_options("admin")) as admin:
        yield admin


def _pairs(values: Sequence[str], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for text in values:
        name, sep, value = text.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{text!r}: expected NAME=VALUE", param_hint=option)
        out[name] = value
    return out


def _fail_on(results: dict[str, Any], what: str) -> None:
    """One line for the resources that failed, if any."""
    failed = [f"{name}: {error}" for name, error in results.items() if error is not None]
    if failed:
        raise CommandError(f"{what} failed for {'; '.join(failed)}")


def config_changes(command: _F) -> _F:
    """``-s``/``-c NAME=VALUE`` (set) and ``-d NAME`` (back to the default) options, as one
    ``changes`` argument: name -> value, None to delete."""

    @functools.wraps(command)
    def wrapper(configs: tuple[str, ...], deletions: tuple[str, ...], **kwargs: Any) -> Any:
        changes: dict[str, str | None] = dict(_pairs(configs, "'-s'"))
        changes |= dict.fromkeys(deletions)
        return command(changes=changes, **kwargs)

    deletions = click.option(
        "-d",
        "--delete",
        "--delete-config",
        "deletions",
        multiple=True,
        metavar="NAME",
        help="Reset a config to its default (repeatable).",
    )
    settings = click.option("-s", "-c", "--set", "--config", "configs", multiple=True,
                            metavar="NAME=VALUE", help="Set a config (repeatable).")  # fmt: skip
    return settings(deletions(wrapper))  # type: ignore[return-value]


# ----------------------------------------------------------------------------- topics


@click.group(context_settings=CONTEXT)
def topics() -> None:
    """List, describe, create, delete and alter topics."""


@topics.command("list")
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets).")
@json_option
@cluster_options
def topics_list(conn: Connection, internal: bool, as_json: bool) -> None:
    """List topics: name, partitions, replication factor."""
    with admin_client(conn) as admin:
        described = admin.describe_topics()
    rows = [
        (t["name"], len(t["partitions"]), _replication(t))
        for t in sorted(described, key=lambda t: t["name"])
        if internal or not t["is_internal"]
    ]
    Output(as_json=as_json).table("topics", ("topic", "partitions", "replication"), rows)


def _replication(topic: dict[str, Any]) -> int:
    return max((len(p["replica_nodes"]) for p in topic["partitions"]), default=0)


@topics.command("describe")
@click.argument("names", nargs=-1, required=True)
@json_option
@cluster_options
def topics_describe(conn: Connection, names: tuple[str, ...], as_json: bool) -> None:
    """Describe topics: each partition's leader, replicas and in-sync replicas."""
    with admin_client(conn) as admin:
        described = admin.describe_topics(list(names))
    missing = [t["name"] for t in described if t["error_code"] == 3]
    if missing:
        raise CommandError(f"topic(s) {', '.join(map(repr, missing))} do not exist")
    failed = [f"{t['name']}: {refusal(t['error_code'])}" for t in described if t["error_code"]]
    if failed:
        raise CommandError("; ".join(failed))
    out = Output(as_json=as_json)
    if as_json:
        out.json(described)
        return
    rows = [
        (t["name"], p["partition_index"], p["leader_id"], _ids(p["replica_nodes"]),
         _ids(p["isr_nodes"]), str(t["topic_id"]))
        for t in described
        for p in sorted(t["partitions"], key=lambda p: p["partition_index"])
    ]  # fmt: skip
    out.table("partitions", ("topic", "partition", "leader", "replicas", "isr", "topic id"), rows)


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


@topics.command("create")
@click.argument("names", nargs=-1, required=True)
@click.option("-p", "--partitions", type=click.IntRange(min=1), help="[default: the broker's]")
@click.option(
    "-r", "--replication-factor", type=click.IntRange(min=1), help="[default: the broker's]"
)
@click.option(
    "-c",
    "--config",
    "configs",
    multiple=True,
    metavar="NAME=VALUE",
    help="A topic config (repeatable).",
)
@click.option("--if-not-exists", is_flag=True, help="An existing topic is not an error.")
@cluster_options
def topics_create(
    *,
    conn: Connection,
    names: tuple[str, ...],
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    if_not_exists: bool,
) -> None:
    """Create topics."""
    settings = _pairs(configs, "'-c'")
    new = [
        NewTopic(name, partitions or -1, replication_factor or -1, topic_configs=settings)
        for name in names
    ]
    with admin_client(conn) as admin:
        answer = admin.create_topics(new, timeout_ms=conn.timeout_ms, raise_errors=False)
    results = {}
    for topic in answer["topics"]:
        code = topic["error_code"]
        ok = code == 0 or (code == 36 and if_not_exists)  # TOPIC_ALREADY_EXISTS
        results[topic["name"]] = None if ok else topic["error_message"]
    _fail_on(results, "create")
    Output().note(f"% created {', '.join(names)}")


@topics.command("delete")
@click.argument("names", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="A missing topic is not an error.")
@cluster_options
def topics_delete(conn: Connection, names: tuple[str, ...], if_exists: bool) -> None:
    """Delete topics."""
    with admin_client(conn) as admin:
        answer = admin.delete_topics(names, timeout_ms=conn.timeout_ms, raise_errors=False)
    results = {}
    for topic in answer["topics"]:
        code = topic["error_code"]
        ok = code == 0 or (code == 3 and if_exists)
        results[topic["name"]] = None if ok else topic["error_message"]
    _fail_on(results, "delete")
    Output().note(f"% deleted {', '.join(names)}")


@topics.command("alter")
@click.argument("name")
@click.option(
    "-p", "--partitions", type=click.IntRange(min=1), help="Grow the topic to this many partitions."
)
@config_changes
@cluster_options
def topics_alter(
    conn: Connection, name: str, partitions: int | None, changes: dict[str, str | None]
) -> None:
    """Grow a topic's partitions and change its configs."""
    if partitions is None and not changes:
        raise click.UsageError("nothing to alter: give -p, -c or -d")
    with admin_client(conn) as admin:
        if partitions is not None:
            grown = admin.create_partitions(
                {name: NewPartitions(partitions)}, timeout_ms=conn.timeout_ms,
                raise_errors=False,
            )  # fmt: skip
            _fail_on({r["name"]: r["error_message"] for r in grown["results"]}, "alter")
        if changes:
            resource = ConfigResource(ConfigResourceType.TOPIC, name, changes)
            admin.alter_configs([resource], incremental=True)
    Output().note(f"% altered {name}")


# ---------------------------------------------------------------------------- configs


_RESOURCE_TYPES = {"topic": ConfigResourceType.TOPIC, "broker": ConfigResourceType.BROKER}


@click.group(context_settings=CONTEXT)
def configs() -> None:
    """Describe and alter topic and broker configs."""


@configs.command("describe")
@click.argument("kind", type=click.Choice(sorted(_RESOURCE_TYPES)))
@click.argument("name")
@click.option("-a", "--all", "show_all", is_flag=True, help="Include defaults.")
@json_option
@cluster_options
def configs_describe(conn: Connection, kind: str, name: str, show_all: bool, as_json: bool) -> None:
    """Describe the configs of a topic or a broker (its id): those set, or --all."""
    with admin_client(conn) as admin:
        described = admin.describe_configs([ConfigResource(_RESOURCE_TYPES[kind], name)])
    entries = described.get(kind, {}).get(name, {})
    rows = [
        (key, "(sensitive)" if c["is_sensitive"] else c["value"],
         CONFIG_SOURCES.get(c["source"], str(c["source"])), c["read_only"])
        for key, c in sorted(entries.items())
        if show_all or c["source"] not in (0, 5)
    ]  # fmt: skip
    Output(as_json=as_json).table(
        f"{kind} {name}", ("config", "value", "source", "read only"), rows
    )


@configs.command("alter")
@click.argument("kind", type=click.Choice(sorted(_RESOURCE_TYPES)))
@click.argument("name")
@config_changes
@click.option("--validate-only", is_flag=True, help="Ask the broker, change nothing.")
@cluster_options
def configs_alter(
    conn: Connection, kind: str, name: str, changes: dict[str, str | None], validate_only: bool
) -> None:
    """Change single configs of a topic or a broker (its id)."""
    if not changes:
        raise click.UsageError("nothing to alter: give -s or -d")
    resource = ConfigResource(_RESOURCE_TYPES[kind], name, changes)
    with admin_client(conn) as admin:
        admin.alter_configs([resource], validate_only=validate_only, incremental=True)
    Output().note(f"% {'validated' if validate_only else 'altered'} {kind} {name}")


# ---------------------------------------------------------------------------- cluster


@click.command(context_settings=CONTEXT)
@click.option("--features", is_flag=True, help="Show the feature levels instead.")
@click.option("--quorum", is_flag=True, help="Show the KRaft metadata quorum instead.")
@json_option
@cluster_options
def cluster(conn: Connection, features: bool, quorum: bool, as_json: bool) -> None:
    """The cluster's id, its controller and its brokers; or its finalized and supported
    feature levels (--features), or its metadata quorum (--quorum)."""
    if features or quorum:
        from kafkastate.cli import _operate  # noqa: PLC0415 -- it builds on this module

        (_operate.cluster_features if features else _operate.cluster_quorum)(conn, as_json)
        return
    with admin_client(conn) as admin:
        described = admin.describe_cluster()
    out = Output(as_json=as_json)
    if as_json:
        out.json(described)
        return
    controller = described["controller_id"]
    rows = [
        (b["broker_id"], b["host"], b["port"], b["rack"] or "",
         "yes" if b["broker_id"] == controller else "", described["cluster_id"])
        for b in sorted(described["brokers"], key=lambda b: b["broker_id"])
    ]  # fmt: skip
    out.table("brokers", ("broker", "host", "port", "rack", "controller", "cluster id"), rows)


# ----------------------------------------------------------------------------- groups


@click.group(context_settings=CONTEXT)
def groups() -> None:
    """List, describe, reset offsets of, and delete consumer groups."""


@groups.command("list")
@json_option
@cluster_options
def groups_list(conn: Connection, as_json: bool) -> None:
    """List consumer groups: id and protocol type."""
    with admin_client(conn) as admin:
        listed = admin.list_consumer_groups()
    Output(as_json=as_json).table("groups", ("group", "protocol type"), listed)


def _latest(admin: KafkaAdminClient, partitions: Sequence[TopicPartition]) -> dict[Any, int]:
    if not partitions:
        return {}
    found = admin.list_offsets(dict.fromkeys(partitions, OffsetSpec.LATEST))
    return {tp: o.offset for tp, o in found.items()}


@groups.command("describe")
@click.argument("group")
@json_option
@cluster_options
def groups_describe(conn: Connection, group: str, as_json: bool) -> None:
    """A group's state, members, committed offsets and lag."""
    with admin_client(conn) as admin:
        (info,) = admin.describe_consumer_groups([group])
        committed = admin.list_consumer_group_offsets(group)
        ends = _latest(admin, sorted(committed))
    owner: dict[tuple[str, int], str] = {}
    for member in info.members:
        assignment = member.member_assignment  # None: not a consumer's, or undecodable
        for tp in assignment.partitions if isinstance(assignment, Assignment) else ():
            owner[(tp[0], tp[1])] = member.member_id
    rows = [
        (tp.topic, tp.partition, om.offset, ends.get(tp, -1),
         max(ends.get(tp, om.offset) - om.offset, 0), owner.get((tp.topic, tp.partition), ""))
        for tp, om in sorted(committed.items())
    ]  # fmt: skip
    out = Output(as_json=as_json)
    columns = ("topic", "partition", "committed", "end", "lag", "member")
    if as_json:
        out.json({
            "group": info.group,
            "state": info.state,
            "protocol_type": info.protocol_type,
            "protocol": info.protocol,
            "members": [
                {"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host}
                for m in info.members
            ],
            "offsets": [dict(zip(columns, row, strict=True)) for row in rows],
        })  # fmt: skip
        return
    out.note(f"% group {info.group}: {info.state or 'unknown'}, {len(info.members)} member(s), "
             f"protocol {info.protocol or '-'}")  # fmt: skip
    out.table(f"group {group}", columns, rows)


def _datetime_ms(text: str) -> int:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError as exc:
        raise click.BadParameter(
            f"{text!r}: expected ISO 8601 such as 2026-01-31T12:00:00 (UTC unless it has "
            "an offset)",
            param_hint="'--to-datetime'",
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def _partitions(
    admin: KafkaAdminClient, group: str, names: Sequence[str], committed: dict[Any, Any]
) -> list[TopicPartition]:
    if not names:  # the topics the group has offsets for
        return sorted(committed)
    described = admin.describe_topics(list(names))
    missing = [t["name"] for t in described if t["error_code"]]
    if missing:
        raise CommandError(f"topic(s) {', '.join(map(repr, missing))} do not exist")
    return sorted(
        TopicPartition(t["name"], p["partition_index"]) for t in described for p in t["partitions"]
    )


@groups.command("reset-offsets")
@click.argument("group")
@click.option(
    "-t",
    "--topic",
    "names",
    multiple=True,
    help="Reset this topic's partitions (repeatable; default: the group's topics).",
)
@click.option("--to-earliest", "target", flag_value="earliest", help="To each log's start.")
@click.option("--to-latest", "target", flag_value="latest", help="To each log's end.")
@click.option("--to-offset", type=click.IntRange(min=0), help="To this offset (clamped).")
@click.option("--to-datetime", metavar="ISO8601", help="To the first record at or after it.")
@click.option(
    "--dry-run/--execute",
    default=True,
    show_default=True,
    help="Only show the new offsets, or commit them.",
)
@json_option
@cluster_options
def groups_reset_offsets(
    *,
    conn: Connection,
    group: str,
    names: tuple[str, ...],
    target: str | None,
    to_offset: int | None,
    to_datetime: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Move a group's committed offsets (the group must have no members). A dry run by
    default: --execute commits."""
    chosen = [t for t in (target, to_offset, to_datetime) if t is not None]
    if len(chosen) != 1:
        raise click.UsageError("give one of --to-earliest, --to-latest, --to-offset, --to-datetime")
    timestamp = None if to_datetime is None else _datetime_ms(to_datetime)
    with admin_client(conn) as admin:
        committed = admin.list_consumer_group_offsets(group)
        tps = _partitions(admin, group, names, committed)
        if not tps:
            raise CommandError(f"group {group!r} has no offsets: name the topics with -t")
        earliest = {tp: o.offset for tp, o in admin.list_offsets(
            dict.fromkeys(tps, OffsetSpec.EARLIEST)).items()}  # fmt: skip
        latest = _latest(admin, tps)
        if timestamp is not None:
            found = admin.list_offsets(dict.fromkeys(tps, timestamp))
            new = {tp: reset_offset(o.offset, earliest[tp], latest[tp]) for tp, o in found.items()}
        elif target == "earliest":
            new = earliest
        elif target == "latest":
            new = latest
        else:
            assert to_offset is not None
            new = {tp: reset_offset(to_offset, earliest[tp], latest[tp]) for tp in tps}
        if not dry_run:
            errors = admin.alter_consumer_group_offsets(
                group, {tp: OffsetAndMetadata(new[tp], "", -1) for tp in tps}
            )
            _fail_on({str(tp): e for tp, e in errors.items()}, "reset-offsets")
    rows = [
        (tp.topic, tp.partition, committed[tp].offset if tp in committed else None, new[tp])
        for tp in tps
    ]
    Output(as_json=as_json).table(
        f"group {group}", ("topic", "partition", "committed", "new"), rows
    )
    Output().note("% dry run: nothing changed (add --execute)" if dry_run else f"% reset {group}")


@groups.command("delete")
@click.argument("names", nargs=-1, required=True)
@cluster_options
def groups_delete(conn: Connection, names: tuple[str, ...]) -> None:
    """Delete consumer groups (they must have no members)."""
    with admin_client(conn) as admin:
        results = admin.delete_consumer_groups(names)
    _fail_on(dict(results), "delete")
    Output().note(f"% deleted {', '.join(names)}")


# ------------------------------------------------------------------------------- ACLs


def acl_filter_options(command: _F) -> _F:
    """The options that name ACLs: resource, principal, host, operation, permission."""
    decorators = [
        click.option("--topic", help="ACLs of this topic."),
        click.option("--group", help="ACLs of this consumer group."),
        click.option("--transactional-id", help="ACLs of this transactional id."),
        click.option("--cluster", "on_cluster", is_flag=True, help="ACLs of the cluster."),
        click.option("--pattern", type=click.Choice(["literal", "prefixed", "any", "match"]),
                     help="How the resource name matches [default: literal; any to list]."),
        click.option("--principal", help="User:NAME"),
        click.option("--host", help="An address, or * (any)."),
        click.option("--operation", type=click.Choice(
            [o.name.lower() for o in ACLOperation if o.name != "UNKNOWN"]),
            help="read, write, describe, all..."),
        click.option("--allow", "permission", flag_value="allow", help="An ALLOW rule."),
        click.option("--deny", "permission", flag_value="deny", help="A DENY rule."),
    ]  # fmt: skip
    for decorate in reversed(decorators):
        command = decorate(command)
    return command


def _resource(
    topic: str | None,
    group: str | None,
    transactional_id: str | None,
    on_cluster: bool,
    pattern: str | None,
    *,
    exact: bool,
) -> ResourcePatternFilter:
    named = [(ResourceType.TOPIC, topic), (ResourceType.GROUP, group),
             (ResourceType.TRANSACTIONAL_ID, transactional_id)]  # fmt: skip
    chosen = [(kind, name) for kind, name in named if name is not None]
    if on_cluster:
        chosen.append((ResourceType.CLUSTER, "kafka-cluster"))
    if len(chosen) > 1:
        raise click.UsageError(
            "name one resource: --topic, --group, --transactional-id or --cluster"
        )
    default = "literal" if exact else "any"
    pattern_type = ACLResourcePatternType[(pattern or default).upper()]
    if not chosen:
        if exact:
            raise click.UsageError(
                "name the resource: --topic, --group, --transactional-id or --cluster"
            )
        return ResourcePatternFilter(ResourceType.ANY, None, pattern_type)
    kind, name = chosen[0]
    if exact:
        return ResourcePattern(kind, name, pattern_type)
    return ResourcePatternFilter(kind, name, pattern_type)


def _acl_rows(found: Sequence[ACL]) -> list[tuple[Any, ...]]:
    return [
        (a.principal, a.host, a.operation.name.lower(), a.permission_type.name.lower(),
         a.resource_pattern.resource_type.name.lower(), a.resource_pattern.resource_name,
         a.resource_pattern.pattern_type.name.lower())
        for a in found
    ]  # fmt: skip


_ACL_COLUMNS = ("principal", "host", "operation", "permission", "resource", "name", "pattern")


@click.group(context_settings=CONTEXT)
def acls() -> None:
    """List, create and delete ACLs (the cluster needs an authorizer)."""


@acls.command("list")
@acl_filter_options
@json_option
@cluster_options
def acls_list(conn: Connection, as_json: bool, **named: Any) -> None:
    """List the ACLs that match (default: all)."""
    acl_filter = _filter(named, exact=False)
    with admin_client(conn) as admin:
        found, _ = admin.describe_acls(acl_filter)
    Output(as_json=as_json).table("ACLs", _ACL_COLUMNS, _acl_rows(found))


def _filter(named: dict[str, Any], *, exact: bool) -> Any:
    resource = _resource(
        named["topic"], named["group"], named["transactional_id"], named["on_cluster"],
        named["pattern"], exact=exact,
    )  # fmt: skip
    operation = named["operation"]
    permission = named["permission"]
    if exact:
        if named["principal"] is None or operation is None or permission is None:
            raise click.UsageError("an ACL needs --principal, --operation and --allow or --deny")
        return ACL(named["principal"], named["host"] or "*", ACLOperation[operation.upper()],
                   ACLPermissionType[permission.upper()], resource)  # fmt: skip
    return ACLFilter(
        named["principal"],
        named["host"],
        ACLOperation[operation.upper()] if operation else ACLOperation.ANY,
        ACLPermissionType[permission.upper()] if permission else ACLPermissionType.ANY,
        resource,
    )


@acls.command("create")
@acl_filter_options
@cluster_options
def acls_create(conn: Connection, **named: Any) -> None:
    """Create one ACL: --principal may (--allow) or may not (--deny) do --operation on the
    resource."""
    acl = _filter(named, exact=True)
    with admin_client(conn) as admin:
        result = admin.create_acls([acl])
    for _, error in result["failed"]:
        raise error if isinstance(error, KafkaError) else CommandError(str(error))
    Output().note("% created 1 ACL")


@acls.command("delete")
@acl_filter_options
@json_option
@cluster_options
def acls_delete(conn: Connection, as_json: bool, **named: Any) -> None:
    """Delete the ACLs that match, and list them."""
    acl_filter = _filter(named, exact=False)
    if acl_filter.resource_pattern.resource_type == ResourceType.ANY and not any(
        named[k] for k in ("principal", "operation", "permission")
    ):
        raise click.UsageError("refusing to delete every ACL: name a resource or a principal")
    with admin_client(conn) as admin:
        ((_, matched, error),) = admin.delete_acls([acl_filter])
    if error is not None:
        raise error
    Output(as_json=as_json).table("deleted ACLs", _ACL_COLUMNS, _acl_rows([a for a, _ in matched]))
