"""``stats``: watch throughput, latency and lag -- of a consumer group (lag per partition
from the committed offsets and the log ends), of a topic (its log ends), or of a client's
run (the JSON lines its ``stats_cb`` wrote) -- live on a terminal, as JSON lines with
``--json``, and drawn over time with ``--plot out.png`` (matplotlib: the ``plot`` extra).

Every sample is one dict: ``time`` (seconds since the first sample), ``client``
(``admin`` for the group and topic views, else the run's ``producer`` or ``consumer``),
``produced_per_s`` / ``consumed_per_s`` (records per second), ``latency_ms`` (the client's
``request-latency-avg``), ``lag`` (records behind the log ends) and, for a group or a topic,
``partitions`` (``topic``, ``partition``, ``end`` and, for a group, ``committed`` and
``lag``). A key is left out when the view has no such figure.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click
from rich.live import Live
from rich.table import Table

from kafkastate.cli._admin import _latest, admin_client, json_option
from kafkastate.cli._app import CONTEXT, CommandError, cluster_options
from kafkastate.cli._options import Connection
from kafkastate.cli._output import Output
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaAdminClient

__all__ = ["plot", "samples_of_run", "stats"]

Sample = dict[str, Any]

_SERIES = (
    ("produced_per_s", "records/s", "produced"),
    ("consumed_per_s", "records/s", "consumed"),
    ("latency_ms", "ms", "request latency"),
    ("lag", "records", "lag"),
)


@click.group(context_settings=CONTEXT)
def stats() -> None:
    """Throughput, latency and lag: of a group, a topic, or a client's run (--plot draws
    them over time)."""


def _options(command: Callable[..., Any]) -> Callable[..., Any]:
    for decorate in reversed(
        [
            click.option("-i", "--interval", type=click.FloatRange(min=0.05), default=1.0,
                         show_default=True, metavar="SECONDS", help="Time between samples."),
            click.option("-n", "--count", type=click.IntRange(min=1), metavar="N",
                         help="Stop after N samples [default: until Ctrl-C]."),
            click.option("--plot", "plot_to", type=click.Path(path_type=Path, dir_okay=False),
                         metavar="OUT.png", help="Draw the samples over time into OUT.png "
                         "at the end (needs matplotlib: the 'plot' extra)."),
        ]
    ):  # fmt: skip
        command = decorate(command)
    return command


# ------------------------------------------------------------------------ sampling


class _Sampler:
    """Reads the log ends (and a group's committed offsets) once per sample and turns two
    readings into rates."""

    def __init__(self, admin: KafkaAdminClient, group: str | None, topics: Sequence[str]) -> None:
        self._admin = admin
        self._group = group
        self._topics = list(topics)
        self._start: float | None = None
        self._last: tuple[float, int, int] | None = None  # time, sum of ends, of committed

    def _partitions(self) -> list[TopicPartition]:
        described = self._admin.describe_topics(self._topics)
        missing = [t["name"] for t in described if t["error_code"]]
        if missing:
            raise CommandError(f"topic(s) {', '.join(map(repr, missing))} do not exist")
        return sorted(
            TopicPartition(t["name"], p["partition_index"])
            for t in described
            for p in t["partitions"]
        )

    def sample(self) -> Sample:
        now = time.monotonic()
        if self._start is None:
            self._start = now
        committed: dict[TopicPartition, int] = {}
        if self._group is not None:
            found = self._admin.list_consumer_group_offsets(self._group)
            committed = {TopicPartition(tp[0], tp[1]): om.offset for tp, om in found.items()}
            tps = sorted(committed) if not self._topics else self._partitions()
        else:
            tps = self._partitions()
        ends = _latest(self._admin, tps)
        rows: list[dict[str, Any]] = []
        for tp in tps:
            row: dict[str, Any] = {"topic": tp.topic, "partition": tp.partition}
            end = ends.get(tp, -1)
            row["end"] = end
            if self._group is not None:
                offset = committed.get(tp, -1)
                row["committed"] = offset
                row["lag"] = max(end - offset, 0) if offset >= 0 else max(end, 0)
            rows.append(row)
        out: Sample = {"time": round(now - self._start, 3), "client": "admin"}
        total_end = sum(max(r["end"], 0) for r in rows)
        total_committed = sum(max(r.get("committed", 0), 0) for r in rows)
        if self._last is not None and now > self._last[0]:
            elapsed = now - self._last[0]
            out["produced_per_s"] = max(total_end - self._last[1], 0) / elapsed
            if self._group is not None:
                out["consumed_per_s"] = max(total_committed - self._last[2], 0) / elapsed
        self._last = (now, total_end, total_committed)
        latency = self._admin.metrics()["admin-client-metrics"]["request-latency-avg"]
        out["latency_ms"] = latency
        if self._group is not None:
            out["lag"] = sum(r["lag"] for r in rows)
        out["partitions"] = rows
        return out


def _table(title: str, sample: Sample) -> Table:
    table = Table(title=title, title_justify="left")
    rows = sample.get("partitions", [])
    columns = [
        c for c in ("topic", "partition", "committed", "end", "lag") if rows and c in rows[0]
    ]
    for column in columns:
        table.add_column(column, justify="left" if column == "topic" else "right")
    for row in rows:
        table.add_row(*(str(row[c]) for c in columns))
    figures = [f"{label} {sample[key]:.1f} {unit}" for key, unit, label in _SERIES if key in sample]
    table.caption = f"t={sample['time']:.1f}s  " + "  ".join(figures)
    return table


def _watch(
    out: Output, title: str, take: Callable[[], Sample], interval: float, count: int | None
) -> list[Sample]:
    """Take samples every ``interval`` s (``count`` of them, or until Ctrl-C): a live table
    on a terminal, a JSON line each with ``--json``, tab-separated rows when piped."""
    taken: list[Sample] = []
    live = (
        Live(console=out.console, auto_refresh=False) if out.terminal and not out.as_json else None
    )
    deadline = time.monotonic()
    try:
        if live is not None:
            live.start()
        while count is None or len(taken) < count:
            sample = take()
            taken.append(sample)
            if live is not None:
                live.update(_table(title, sample), refresh=True)
            elif out.as_json:
                out.json(sample)
            else:  # piped: a tab-separated line per partition, the sample's time first
                rows = sample.get("partitions", [])
                if rows:
                    columns = ("time", *rows[0])
                    out.table(title, columns, [(sample["time"], *r.values()) for r in rows])
            out.flush()
            if count is not None and len(taken) >= count:
                break
            deadline += interval
            time.sleep(max(deadline - time.monotonic(), 0.0))
    except KeyboardInterrupt:
        pass  # Ctrl-C ends the watch; what was sampled is plotted
    finally:
        if live is not None:
            live.stop()
    return taken


@stats.command("group")
@click.argument("group")
@click.option("-t", "--topic", "topics", multiple=True,
              help="Only this topic's partitions (repeatable; default: the group's).")  # fmt: skip
@_options
@json_option
@cluster_options
def stats_group(
    *, conn: Connection, group: str, topics: tuple[str, ...], as_json: bool, **watch: Any
) -> None:
    """A consumer group's lag per partition (committed offsets against the log ends), the
    rates its topics are written and committed, live."""
    _serve(conn, group, topics, title=f"group {group}", as_json=as_json, **watch)


@stats.command("topic")
@click.argument("topics", nargs=-1, required=True)
@_options
@json_option
@cluster_options
def stats_topic(*, conn: Connection, topics: tuple[str, ...], as_json: bool, **watch: Any) -> None:
    """Topics' log ends per partition and the rate they are written, live."""
    _serve(conn, None, topics, title=", ".join(topics), as_json=as_json, **watch)


def _serve(
    conn: Connection,
    group: str | None,
    topics: Sequence[str],
    *,
    title: str,
    as_json: bool,
    interval: float,
    count: int | None,
    plot_to: Path | None,
) -> None:
    """Sample a group or topics every ``interval`` s, ``count`` times (None: until
    Ctrl-C), then plot into ``plot_to`` if given."""
    out = Output(as_json=as_json)
    with admin_client(conn) as admin:
        sampler = _Sampler(admin, group, topics)
        taken = _watch(out, title, sampler.sample, interval, count)
    _finish(out, taken, plot_to, title)


def samples_of_run(lines: Iterable[str]) -> list[Sample]:
    """The samples in a client's statistics: one ``stats_cb`` report (a JSON object, as
    ``json.dumps(stats)`` writes it) per line; blank lines are skipped. Throughput is the
    records sent (``record-send-total``) or consumed (``records-consumed-total``) since the
    client's previous report, per second -- not the windowed ``-rate`` metrics, which
    smooth over a minute.

    Raises:
        CommandError: a line is not such a report.
    """
    out: list[Sample] = []
    start: float | None = None
    last: dict[str, tuple[float, float]] = {}  # client -> (time, records so far)

    def rate(kind: str, at: float, total: float) -> dict[str, float]:
        """Records per second since the client's previous report (none for its first)."""
        before = last.get(kind)
        last[kind] = (at, total)
        if before is None or at <= before[0]:
            return {}
        key = "produced_per_s" if kind == "producer" else "consumed_per_s"
        return {key: max(total - before[1], 0.0) / (at - before[0])}

    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            report = json.loads(line)
            kind, at, metrics = report["type"], float(report["time"]), report["metrics"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CommandError(f"line {number}: not a stats_cb report ({exc})") from exc
        if start is None:
            start = at
        sample: Sample = {"time": round(at - start, 3), "client": kind}
        if kind == "producer":
            group = metrics["producer-metrics"]
            sample |= rate(kind, at, group["record-send-total"])
            sample["latency_ms"] = group["request-latency-avg"]
        elif kind == "consumer":
            fetch = metrics["consumer-fetch-manager-metrics"]
            sample |= rate(kind, at, fetch["records-consumed-total"])
            sample["latency_ms"] = metrics["consumer-metrics"]["request-latency-avg"]
            sample["lag"] = sum(report.get("lag", {}).values())
        else:
            sample["latency_ms"] = metrics["admin-client-metrics"]["request-latency-avg"]
        out.append(sample)
    return out


@stats.command("run")
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--plot", "plot_to", type=click.Path(path_type=Path, dir_okay=False),
              metavar="OUT.png", help="Draw the run into OUT.png (the 'plot' extra).")  # fmt: skip
@json_option
def stats_run(path: Path, plot_to: Path | None, as_json: bool) -> None:
    """A client's run, from the JSON lines its stats_cb wrote (json.dumps(stats) per
    report): a summary per client (JSON lines with --json), drawn with --plot."""
    with path.open(encoding="utf-8") as lines:
        taken = samples_of_run(lines)
    if not taken:
        raise CommandError(f"{path}: no statistics in it")
    out = Output(as_json=as_json)
    if as_json:
        for sample in taken:
            out.json(sample)
    else:
        rows = []
        for client in dict.fromkeys(s["client"] for s in taken):
            mine = [s for s in taken if s["client"] == client]
            last = mine[-1]
            rows.append(
                (client, len(mine), f"{last['time']:.1f}",
                 *(_peak(mine, key) for key, _, _ in _SERIES))
            )  # fmt: skip
        columns = ("client", "reports", "seconds", *(f"max {key}" for key, _, _ in _SERIES))
        out.table(str(path), columns, rows)
    _finish(out, taken, plot_to, path.name)


def _peak(samples: Sequence[Sample], key: str) -> str:
    values = [s[key] for s in samples if key in s]
    return f"{max(values):.1f}" if values else ""


def _finish(out: Output, taken: list[Sample], plot_to: Path | None, title: str) -> None:
    if plot_to is None:
        return
    plot(taken, plot_to, title)
    out.note(f"% plotted {len(taken)} samples into {plot_to}")


# ---------------------------------------------------------------------------- plot


def _series(samples: Sequence[Sample], key: str) -> Iterator[tuple[str, list[float], list[float]]]:
    """``(client, times, values)`` per client that has ``key``."""
    for client in dict.fromkeys(s["client"] for s in samples):
        points = [(s["time"], s[key]) for s in samples if s["client"] == client and key in s]
        if points:
            yield client, [t for t, _ in points], [v for _, v in points]


def plot(samples: Sequence[Sample], path: Path, title: str) -> None:
    """Draw throughput, latency and lag over time into ``path`` (PNG): one panel each
    (a panel without data says so).

    Raises:
        CommandError: matplotlib is not installed.
    """
    try:
        import matplotlib  # noqa: PLC0415 -- optional (the plot extra)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as exc:
        raise CommandError("--plot needs matplotlib: pip install 'kafkastate[plot]'") from exc
    figure, axes = plt.subplots(3, 1, sharex=True, figsize=(8, 7), constrained_layout=True)
    panels = (
        ("throughput", "records/s", ("produced_per_s", "consumed_per_s")),
        ("request latency", "ms", ("latency_ms",)),
        ("lag", "records", ("lag",)),
    )
    for ax, (name, unit, keys) in zip(axes, panels, strict=True):
        drawn = 0
        for key in keys:
            for client, times, values in _series(samples, key):
                label = f"{client} {key.split('_')[0]}" if len(keys) > 1 else client
                ax.plot(times, values, marker=".", label=label)
                drawn += 1
        ax.set_ylabel(f"{name} ({unit})")
        ax.grid(True, alpha=0.3)
        if drawn:
            ax.legend(loc="upper right", fontsize="small")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    axes[0].set_title(f"kafkastate stats: {title}")
    axes[-1].set_xlabel("seconds")
    figure.savefig(path, format="png", dpi=100)
    plt.close(figure)
