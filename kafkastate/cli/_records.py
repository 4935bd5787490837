"""``produce`` and ``consume``: kcat's ``-P`` and ``-C`` on :mod:`kafkastate.sync`.

``consume`` with ``-G`` commits, after each batch it wrote and when it stops, exactly the
offsets after the records it wrote: a Ctrl-C (or ``-c``) in the middle of a batch leaves
the rest of it for the group's next reader.
"""

from __future__ import annotations

import base64
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import IO, Any

import attrs
import click

from kafkastate.cli._app import CONTEXT, CommandError, cluster_options, refusal
from kafkastate.cli._options import Connection
from kafkastate.cli._output import Output
from kafkastate.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition
from kafkastate.sync import KafkaAdminClient, KafkaConsumer, KafkaProducer, OffsetSpec

__all__ = ["StartAt", "compile_format", "consume", "parse_start", "partitions_of", "produce"]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": "\0"}


def unescape(text: str) -> str:
    r"""``\n``, ``\t``, ``\r``, ``\0`` and ``\\`` in a delimiter or format, as kcat reads
    them."""
    out: list[str] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            nxt = next(chars, "\\")
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
        else:
            out.append(char)
    return "".join(out)


def partitions_of(conn: Connection, topic: str) -> list[int]:
    """The partition ids of ``topic``, asked of the cluster.

    Raises:
        CommandError: the topic does not exist (or the broker refused to describe it).
    """
    with KafkaAdminClient(**conn.client_options("admin")) as admin:
        (found,) = admin.describe_topics([topic])
    if found["error_code"] == 3:  # UNKNOWN_TOPIC_OR_PARTITION
        raise CommandError(f"topic {topic!r} does not exist")
    if found["error_code"]:
        raise CommandError(f"topic {topic!r}: {refusal(found['error_code'])}")
    return sorted(p["partition_index"] for p in found["partitions"])


def _check_partition(topic: str, partition: int | None, partitions: Sequence[int]) -> None:
    if partition is not None and partition not in partitions:
        raise CommandError(
            f"topic {topic!r} has no partition {partition} (it has {len(partitions)})"
        )


class _Interrupt:
    """Ctrl-C (and SIGTERM) as a flag checked between records, so that a consume stops
    between two records and commits what it wrote; the handlers are put back on exit."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._previous: list[tuple[int, Any]] = []

    def __enter__(self) -> _Interrupt:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous.append((sig, signal.signal(sig, self._handle)))
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous:
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.event.set()

    def __bool__(self) -> bool:
        return self.event.is_set()


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f} records/s" if seconds > 0 else ""


# ---------------------------------------------------------------------------- produce


def _header(text: str) -> tuple[str, bytes]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise click.BadParameter(f"{text!r}: expected NAME=VALUE", param_hint="'-H'")
    return name, value.encode()


def _lines(files: Sequence[IO[bytes]]) -> Iterator[bytes]:
    for stream in files or (sys.stdin.buffer,):
        for line in stream:
            yield line[:-1] if line.endswith(b"\n") else line


@attrs.define
class _Delivery:
    """Acknowledgements and failures, counted by the producer's IO thread."""

    sent: int = 0
    size: int = 0
    acked: dict[int, int] = attrs.Factory(dict)
    failed: int = 0
    first_error: BaseException | None = None

    def ack(self, metadata: Any) -> None:
        self.acked[metadata.partition] = self.acked.get(metadata.partition, 0) + 1

    def fail(self, error: BaseException) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = error


@click.command(context_settings=CONTEXT)
@click.option("-t", "--topic", required=True, help="The topic.")
@click.option("-p", "--partition", type=click.IntRange(min=0), help="Only this partition.")
@click.option(
    "-K", "--key-delimiter", metavar="DELIM", help="Split each line into key DELIM value."
)
@click.option(
    "-H",
    "--header",
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    help="A header for every record (repeatable).",
)
@click.option(
    "-z",
    "--compression",
    type=click.Choice(CODECS),
    default="none",
    show_default=True,
    help="Compression codec.",
)
@click.option("--json", "as_json", is_flag=True, help="The summary as JSON on stdout.")
@click.argument("files", nargs=-1, type=click.File("rb"))
@cluster_options
def produce(
    *,
    conn: Connection,
    topic: str,
    partition: int | None,
    key_delimiter: str | None,
    headers: tuple[str, ...],
    compression: str,
    as_json: bool,
    files: tuple[IO[bytes], ...],
) -> int:
    """Produce each line of FILES (default stdin) as one record, then print a summary."""
    out = Output(as_json=as_json)
    header_list = [_header(h) for h in headers]
    delimiter = None if key_delimiter is None else unescape(key_delimiter).encode()
    _check_partition(topic, partition, partitions_of(conn, topic))
    options = conn.client_options(
        "producer",
        compression_type=None if compression == "none" else compression,
        max_block_ms=conn.timeout_ms,
        allow_auto_create_topics=False,
    )
    delivery = _Delivery()
    started = shown = time.monotonic()
    interrupted = False
    with KafkaProducer(**options) as producer:
        try:
            with out.progress(f"producing to {topic}") as bar:
                for line in _lines(files):
                    key: bytes | None = None
                    value = line
                    if delimiter is not None and delimiter in line:
                        key, _, value = line.partition(delimiter)
                    future = producer.send(
                        topic, value=value, key=key, headers=list(header_list),
                        partition=partition,
                    )  # fmt: skip
                    future.add_callback(delivery.ack).add_errback(delivery.fail)
                    delivery.sent += 1
                    delivery.size += len(value) + len(key or b"")
                    now = time.monotonic()
                    if bar is not None and now - shown >= 0.1:  # a redraw costs more than a send
                        shown = now
                        rate = _rate(delivery.sent, now - started)
                        bar.update(bar.task_ids[0], completed=delivery.sent, rate=rate)
        except KeyboardInterrupt:
            interrupted = True  # deliver what was sent, and say so
        producer.flush()
    seconds = time.monotonic() - started
    acked = sum(delivery.acked.values())
    per_partition = ", ".join(f"{p}: {n}" for p, n in sorted(delivery.acked.items()))
    out.done(
        f"% produced {acked} records ({delivery.size} bytes) to {topic} "
        f"[{per_partition or 'none'}] in {seconds:.2f} s ({_rate(acked, seconds) or '-'})",
        {
            "topic": topic,
            "records": acked,
            "failed": delivery.failed,
            "bytes": delivery.size,
            "partitions": delivery.acked,
            "seconds": round(seconds, 3),
        },
    )
    if delivery.failed:
        raise CommandError(
            f"{delivery.failed} of {delivery.sent} records failed: {delivery.first_error}"
        )
    return 130 if interrupted else 0


# ---------------------------------------------------------------------------- consume


@attrs.frozen
class StartAt:
    """Where ``-o`` starts reading: ``beginning``, ``end``, ``offset`` (``value``),
    ``relative`` (``value`` records before the end) or ``timestamp`` (ms)."""

    kind: str
    value: int = 0


def parse_start(ctx: click.Context, param: click.Parameter, text: str | None) -> StartAt | None:
    """``-o beginning|end|OFFSET|-N|s@TIMESTAMP_MS`` (a click callback)."""
    if text is None:
        return None
    word = text.strip().lower()
    if word in ("beginning", "earliest"):
        return StartAt("beginning")
    if word in ("end", "latest"):
        return StartAt("end")
    try:
        if word.startswith("s@"):
            ms = int(word[2:])
            if ms >= 0:
                return StartAt("timestamp", ms)
        else:
            offset = int(word)
            return StartAt("offset", offset) if offset >= 0 else StartAt("relative", -offset)
    except ValueError:
        pass
    raise click.BadParameter(
        f"{text!r}: expected beginning, end, an offset, -N (N before the end) or s@TIMESTAMP_MS",
        ctx,
        param,
    )


_FIELDS = "tpoksKSTh"


def _text(value: bytes | None) -> bytes:
    return b"" if value is None else value


def _length(value: bytes | None) -> bytes:
    return b"-1" if value is None else str(len(value)).encode()


def _field(char: str) -> Callable[[ConsumerRecord], bytes]:
    return {
        "t": lambda r: r.topic.encode(),
        "p": lambda r: str(r.partition).encode(),
        "o": lambda r: str(r.offset).encode(),
        "k": lambda r: _text(r.key),
        "K": lambda r: _length(r.key),
        "s": lambda r: _text(r.value),
        "S": lambda r: _length(r.value),
        "T": lambda r: str(r.timestamp).encode(),
        "h": lambda r: b",".join(n.encode() + b"=" + _text(v) for n, v in r.headers),
    }[char]


def compile_format(fmt: str) -> Callable[[ConsumerRecord], bytes]:
    """kcat's ``-f``: ``%t`` topic, ``%p`` partition, ``%o`` offset, ``%k``/``%K`` key and
    its length, ``%s``/``%S`` value and its length, ``%T`` timestamp (ms), ``%h`` headers
    (``name=value,...``), ``%%``; ``\\n``, ``\\t``, ``\\r``, ``\\\\`` escapes.

    Raises:
        click.BadParameter: an unknown ``%`` field.
    """
    pieces: list[bytes | Callable[[ConsumerRecord], bytes]] = []
    text = unescape(fmt)
    literal: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "%":
            literal.append(char)
            i += 1
            continue
        field = text[i + 1 : i + 2]
        i += 2
        if field == "%":
            literal.append("%")
            continue
        if not field or field not in _FIELDS:
            raise click.BadParameter(
                f"unknown field %{field} in {fmt!r} (known: %t %p %o %k %K %s %S %T %h %%)",
                param_hint="'-f'",
            )
        if literal:
            pieces.append("".join(literal).encode())
            literal = []
        pieces.append(_field(field))
    if literal:
        pieces.append("".join(literal).encode())

    def render(record: ConsumerRecord) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(record) for p in pieces)

    return render


def _json_bytes(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def record_json(record: ConsumerRecord) -> dict[str, Any]:
    """One record as ``--json`` writes it (bytes that are not UTF-8: ``{"base64": ...}``)."""
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": _json_bytes(record.key),
        "value": _json_bytes(record.value),
        "headers": [[name, _json_bytes(value)] for name, value in record.headers],
    }


def _seek(consumer: KafkaConsumer, partitions: list[TopicPartition], start: StartAt) -> None:
    if start.kind == "beginning":
        consumer.seek_to_beginning(*partitions)
    elif start.kind == "end":
        consumer.seek_to_end(*partitions)
    elif start.kind == "offset":
        for tp in partitions:
            consumer.seek(tp, start.value)
    elif start.kind == "relative":
        ends = consumer.end_offsets(partitions)
        begins = consumer.beginning_offsets(partitions)
        for tp in partitions:
            consumer.seek(tp, max(begins[tp], ends[tp] - start.value))
    else:
        found = consumer.offsets_for_times(dict.fromkeys(partitions, start.value))
        for tp in partitions:
            at = found.get(tp)
            if at is None:
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, at.offset)


@attrs.define(kw_only=True)
class _Reader:
    """The consume loop: poll, write, commit what was written, stop at the end (``-e``),
    after ``-c`` records or on Ctrl-C."""

    consumer: KafkaConsumer
    out: Output
    render: Callable[[ConsumerRecord], bytes] | None
    """Renders a record (None: ``--json``)."""
    commit: bool
    """Commit what was written (``-G``)."""
    count: int | None
    """Stop after this many records (``-c``)."""
    ends: Callable[[list[TopicPartition]], dict[TopicPartition, int]] | None
    """Looks up partitions' end offsets, with ``-e``."""
    written: int = attrs.field(init=False, default=0)
    _ends: dict[TopicPartition, int] = attrs.field(init=False, factory=dict)
    _uncommitted: dict[TopicPartition, int] = attrs.field(init=False, factory=dict)

    def at_end(self) -> bool:
        """Every assigned partition's position reached its end offset (``-e``), the end
        as it was when the partition was first seen. The ends come from an admin client:
        the consumer only polls between two checks."""
        assert self.ends is not None
        assigned = self.consumer.assignment()
        new = [tp for tp in assigned if tp not in self._ends]
        if new:
            self._ends.update(self.ends(new))
        return bool(assigned) and all(
            self.consumer.position(tp) >= self._ends[tp] for tp in assigned
        )

    def run(self, interrupt: _Interrupt, bar: Any) -> None:
        started = time.monotonic()
        try:
            while not interrupt and not self.done:
                if self.ends is not None and self.at_end():
                    return
                batch = self.consumer.poll(timeout_ms=200)
                for tp, records in batch.items():
                    for record in records:
                        if interrupt or self.done:
                            break
                        self.write(record)
                        self._uncommitted[tp] = record.offset + 1
                self.out.flush()
                self.flush_commits()
                if bar is not None and batch:
                    rate = _rate(self.written, time.monotonic() - started)
                    bar.update(bar.task_ids[0], completed=self.written, rate=rate)
        finally:
            self.out.flush()
            self.flush_commits()

    @property
    def done(self) -> bool:
        return self.count is not None and self.written >= self.count

    def write(self, record: ConsumerRecord) -> None:
        if self.render is None:
            self.out.json(record_json(record))
        else:
            self.out.data(self.render(record))
        self.written += 1

    def flush_commits(self) -> None:
        if self.commit and self._uncommitted:
            offsets: dict[tuple[str, int], Any] = {
                tp: OffsetAndMetadata(o, "", -1) for tp, o in self._uncommitted.items()
            }
            self._uncommitted.clear()
            self.consumer.commit(offsets)


@click.command(context_settings=CONTEXT)
@click.option("-t", "--topic", required=True, help="The topic.")
@click.option("-p", "--partition", type=click.IntRange(min=0), help="Only this partition.")
@click.option(
    "-o",
    "--offset",
    "start",
    callback=parse_start,
    metavar="OFFSET",
    help="beginning | end | N | -N (N before the end) | s@TIMESTAMP_MS "
    "[default: beginning; with -G: the group's offset, else beginning].",
)
@click.option(
    "-e",
    "--exit",
    "exit_at_end",
    is_flag=True,
    help="Exit once every partition is read to its end.",
)
@click.option(
    "-G", "--group", metavar="GROUP", help="Join this consumer group and commit what was written."
)
@click.option("-c", "--count", type=click.IntRange(min=1), help="Exit after this many records.")
@click.option(
    "-f",
    "--format",
    "fmt",
    metavar="FORMAT",
    help="kcat's format: %t %p %o %k %K %s %S %T %h %% (default '%s\\n').",
)
@click.option("-K", "--key-delimiter", metavar="DELIM", help="Write key DELIM value (without -f).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record.")
@click.option(
    "--isolation",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
    help="read_committed hides aborted and open transactions' records.",
)
@cluster_options
def consume(
    *,
    conn: Connection,
    topic: str,
    partition: int | None,
    start: StartAt | None,
    exit_at_end: bool,
    group: str | None,
    count: int | None,
    fmt: str | None,
    key_delimiter: str | None,
    as_json: bool,
    isolation: str,
) -> int:
    """Consume TOPIC and write each record (its value and a newline by default)."""
    if as_json and (fmt is not None or key_delimiter is not None):
        raise click.UsageError("--json goes with neither -f nor -K")
    subscribe = group is not None and partition is None
    if subscribe and start is not None and start.kind not in ("beginning", "end"):
        raise click.UsageError(
            "-o with -G takes beginning or end (where the group has no committed offset); "
            "add -p to read one partition from an offset"
        )
    render = None
    if not as_json:
        if fmt is None:
            fmt = "%s\\n" if key_delimiter is None else f"%k{key_delimiter}%s\\n"
        render = compile_format(fmt)
    out = Output(as_json=as_json)
    partitions = partitions_of(conn, topic)
    _check_partition(topic, partition, partitions)
    options = conn.client_options(
        "consumer",
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="latest" if start is not None and start.kind == "end" else "earliest",
        isolation_level=isolation,
        allow_auto_create_topics=False,
    )
    consumer = KafkaConsumer(**options)
    stack = contextlib.ExitStack()
    try:
        ends = None
        if exit_at_end:
            admin = stack.enter_context(KafkaAdminClient(**conn.client_options("admin")))
            level = 1 if isolation == "read_committed" else 0

            def ends(tps: list[TopicPartition]) -> dict[TopicPartition, int]:
                found = admin.list_offsets(dict.fromkeys(tps, OffsetSpec.LATEST), level)
                return {tp: o.offset for tp, o in found.items()}

        if subscribe:
            consumer.subscribe([topic])
        else:
            chosen = partitions if partition is None else [partition]
            tps = [TopicPartition(topic, p) for p in chosen]
            consumer.assign(tps)
            if start is not None or group is None:
                _seek(consumer, tps, start or StartAt("beginning"))
        reader = _Reader(
            consumer=consumer, out=out, render=render, commit=group is not None, count=count,
            ends=ends,
        )  # fmt: skip
        with _Interrupt() as interrupt, out.progress(f"consuming {topic}") as bar:
            reader.run(interrupt, bar)
    finally:
        consumer.close(autocommit=False)
        stack.close()
    out.note(f"% consumed {reader.written} records from {topic}")
    return 0
