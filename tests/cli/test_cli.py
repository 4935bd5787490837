"""The ``kafkastate`` console script, run in a subprocess against a real broker.

One broker for the module (PLAINTEXT, SASL and SSL listeners, Kafka's StandardAuthorizer with
the PLAINTEXT and SSL clients and ``alice`` as super users, so that ``bob`` can witness the
ACL commands). What the command line did is checked by an independent client where one
exists: kafka-python reads back what ``produce`` wrote and its admin client sees the topics
``topics`` made; a kafkastate consumer reads the offsets ``consume -G`` and ``groups
reset-offsets`` committed; bob's SASL producer meets the ACLs ``acls`` made.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import kafka
import pytest

from kafkastate.sync import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafkastate.testing import KafkaCluster, PrerequisiteError, ProbeError, metadata
from kafkastate.testing.pytest_plugin import unavailable
from tests._support import readback

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs" / "cli.md"
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS;User:alice",
}


def command() -> list[str]:
    """The installed console script; in a checkout that was not reinstalled since the
    script was declared, ``python -m kafkastate.cli`` (CI installs it: there it must be)."""
    script = Path(sys.executable).with_name("kafkastate")
    if script.exists():
        return [str(script)]
    if os.environ.get("CI"):
        pytest.fail(f"the kafkastate console script is not installed next to {sys.executable}")
    return [sys.executable, "-m", "kafkastate.cli"]


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKASTATE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env | extra


def kafkastate(
    *args: str, input: bytes | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    """Run the command line; its output is captured (so it is "piped")."""
    return subprocess.run(
        [*command(), *args],
        input=input,
        capture_output=True,
        env=environment() if env is None else env,
        timeout=timeout,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def one_error_line(result: subprocess.CompletedProcess[bytes], status: int, *words: str) -> str:
    """A failed run: exit ``status``, exactly one line on stderr, naming ``words``."""
    err = result.stderr.decode()
    assert result.returncode == status, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kafkastate: error: "), err
    for word in words:
        assert word in lines[0], err
    return lines[0]


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    try:
        started = KafkaCluster.start(sasl=True, ssl=True, config_overrides=AUTHORIZER)
    except PrerequisiteError as exc:
        unavailable(exc)
    with started:
        yield started


@pytest.fixture
def b(cluster: KafkaCluster) -> list[str]:
    return ["-b", cluster.bootstrap]


def new_topic(b: Sequence[str], partitions: int = 1) -> str:
    name = f"cli-{uuid.uuid4().hex[:10]}"
    ok(kafkastate("topics", "create", name, "-p", str(partitions), *b))
    return name


def produce(b: Sequence[str], topic: str, lines: Sequence[str], *args: str) -> dict[str, object]:
    data = "".join(f"{line}\n" for line in lines).encode()
    summary: dict[str, object] = json.loads(ok(kafkastate("produce", "-t", topic, *args, *b,
                                                          input=data)))  # fmt: skip
    return summary


def consume(b: Sequence[str], topic: str, *args: str) -> list[str]:
    return ok(kafkastate("consume", "-t", topic, *args, *b)).splitlines()


# ------------------------------------------------------------------- produce / consume


def test_round_trip_keys_headers_partition_seen_by_another_client(
    cluster: KafkaCluster, b: list[str]
) -> None:
    topic = new_topic(b, partitions=3)
    summary = produce(b, topic, ["k1:v1", "k2:v2", "novalue"], "-K", ":", "-H", "app=cli",
                      "-H", "n=1", "-p", "2")  # fmt: skip
    assert summary["records"] == 3
    assert summary["partitions"] == {"2": 3}
    records = readback.consume(cluster.bootstrap, topic, 3)
    assert [(r.partition, r.key, r.value) for r in records] == [
        (2, b"k1", b"v1"),
        (2, b"k2", b"v2"),
        (2, None, b"novalue"),  # no delimiter: no key
    ]
    assert all(r.headers == [("app", b"cli"), ("n", b"1")] for r in records)
    assert consume(b, topic, "-e", "-K", "=") == ["k1=v1", "k2=v2", "=novalue"]


def test_format_and_json(b: list[str]) -> None:
    topic = new_topic(b)
    produce(b, topic, ["k:hello"], "-K", ":", "-H", "h=x")
    (line,) = consume(b, topic, "-e", "-f", r"%t|%p|%o|%k|%K|%s|%S|%T|%h|100%%\n")
    fields = line.split("|")
    assert fields[:7] == [topic, "0", "0", "k", "1", "hello", "5"]
    assert abs(int(fields[7]) - time.time() * 1000) < 120_000
    assert fields[8:] == ["h=x", "100%"]
    (doc,) = consume(b, topic, "-e", "--json")
    record = json.loads(doc)
    assert {k: record[k] for k in ("topic", "partition", "offset", "key", "value", "headers")} == {
        "topic": topic, "partition": 0, "offset": 0, "key": "k", "value": "hello",
        "headers": [["h", "x"]],
    }  # fmt: skip


def test_offsets_exit_and_count(b: list[str]) -> None:
    topic = new_topic(b)
    produce(b, topic, [str(i) for i in range(6)])
    time.sleep(0.05)
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    produce(b, topic, [str(i) for i in range(6, 10)])
    every = [str(i) for i in range(10)]
    assert consume(b, topic, "-e") == every  # default: from the beginning
    assert consume(b, topic, "-o", "beginning", "-e") == every
    assert consume(b, topic, "-o", "4", "-e") == every[4:]
    assert consume(b, topic, "-o", "-3", "-e") == every[-3:]
    assert consume(b, topic, "-o", f"s@{boundary}", "-e") == every[6:]
    assert consume(b, topic, "-o", "end", "-e") == []
    assert consume(b, topic, "-c", "2") == every[:2]  # -c stops without -e
    assert consume(b, topic, "-o", "3", "-c", "1") == ["3"]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_codec(cluster: KafkaCluster, b: list[str], codec: str) -> None:
    topic = new_topic(b)
    lines = [f"{i:04d}" + "a" * 2000 for i in range(50)]
    assert produce(b, topic, lines, "-z", codec)["records"] == 50
    assert consume(b, topic, "-e") == lines
    # the witness that -z was used: the broker keeps batches as produced
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        (broker,) = admin.describe_log_dirs([TopicPartition(topic, 0)])
    size = sum(r.size for d in broker["log_dirs"] for tp, r in d.replicas.items()
               if tp[0] == topic)  # fmt: skip
    assert (size > 100_000) if codec == "none" else (size < 20_000), size


def test_read_committed(cluster: KafkaCluster, b: list[str]) -> None:
    topic = new_topic(b)
    with KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=topic) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"aborted", partition=0)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"committed", partition=0)
        producer.commit_transaction()
    assert consume(b, topic, "-e") == ["aborted", "committed"]
    assert consume(b, topic, "-e", "--isolation", "read_committed") == ["committed"]


ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def on_a_terminal(*args: str, stdin: Path, timeout: float = 60) -> tuple[int, str]:
    """Run the command line with stdout and stderr on a pseudo-terminal (200 columns, an
    xterm), stdin from a file: its exit status and what the terminal showed, escape
    sequences removed."""
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = environment(TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    with stdin.open("rb") as source:
        proc = subprocess.Popen([*command(), *args], stdin=source, stdout=secondary,
                                stderr=secondary, env=env)  # fmt: skip
    os.close(secondary)
    shown = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"still running after {timeout} s: {shown.decode()[-500:]}"
            if not select.select([primary], [], [], left)[0]:
                continue
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        status = proc.wait(timeout=10)
    finally:
        os.close(primary)
        if proc.poll() is None:
            proc.kill()
    assert ANSI.search(shown), "no escape sequence: rich did not take it for a terminal"
    return status, ANSI.sub(b"", bytes(shown)).decode()


Running = subprocess.Popen[bytes]


def ctrl_c(
    args: Sequence[str], status: int, until: Callable[[Running], object], **popen: Any
) -> bytes:
    """Start the command line (stdout and stderr piped, unbuffered: no read-ahead), let
    ``until`` wait for it to get somewhere, then press Ctrl-C. It must exit ``status``
    with no traceback; returns what it wrote on stdout that ``until`` did not read."""
    proc = subprocess.Popen([*command(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=environment(), bufsize=0, **popen)  # fmt: skip
    try:
        until(proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, err.decode()
    assert b"Traceback" not in err
    return out


def test_a_terminal_shows_progress_and_rates_a_pipe_gets_plain_lines(
    cluster: KafkaCluster, b: list[str], tmp_path: Path
) -> None:
    topic = new_topic(b)
    n = 100_000
    lines = tmp_path / "lines.txt"  # produce reads the files it is given
    lines.write_bytes(b"".join(b"line-%06d\n" % i for i in range(n)))
    status, shown = on_a_terminal("produce", "-t", topic, str(lines), *b, stdin=Path(os.devnull))
    assert status == 0, shown
    # the live line: what, how many so far and the rate; then one sentence, no JSON
    assert re.search(rf"producing to {topic}\s+\d+ records\s+[\d,]+ records/s", shown), shown
    assert f"% produced {n} records" in shown and "{" not in shown, shown

    # (a terminal draws each record above the live line: slower than a pipe, so fewer)
    status, shown = on_a_terminal("consume", "-t", topic, "-c", "5000", *b,
                                  stdin=Path(os.devnull))  # fmt: skip
    assert status == 0, shown[-2000:]
    assert re.search(rf"consuming {topic}\s+\d+ records\s+[\d,]+ records/s", shown), shown
    assert "line-000000" in shown and "line-004999" in shown and "line-005000" not in shown

    # piped: the records as they are and the summary as one JSON line, nothing else
    piped = kafkastate("produce", "-t", topic, str(lines), *b)
    assert json.loads(ok(piped))["records"] == n and piped.stderr == b""
    consumed = kafkastate("consume", "-t", topic, "-e", *b)
    assert ok(consumed).splitlines() == [f"line-{i % n:06d}" for i in range(2 * n)]
    assert b"\x1b" not in consumed.stdout and consumed.stderr == b""


def test_ctrl_c_stops_a_produce_after_delivering_what_was_read(
    cluster: KafkaCluster, b: list[str]
) -> None:
    topic = new_topic(b)

    def five_lines_delivered(proc: Running) -> None:
        assert proc.stdin is not None
        proc.stdin.write(b"".join(b"%d\n" % i for i in range(5)))  # stdin stays open
        deadline = time.monotonic() + 30
        while len(readback.consume(cluster.bootstrap, topic, 5, timeout=1)) < 5:
            assert time.monotonic() < deadline, "the 5 lines never reached the broker"

    out = ctrl_c(["produce", "-t", topic, *b], 130, five_lines_delivered, stdin=subprocess.PIPE)
    summary = json.loads(out)
    assert (summary["records"], summary["failed"]) == (5, 0)
    # the witness: exactly what was read was written, once
    assert [r.value for r in readback.consume(cluster.bootstrap, topic, 6, timeout=2)] == [
        b"%d" % i for i in range(5)
    ]


# ---------------------------------------------------------------------------- groups


def committed(cluster: KafkaCluster, group: str, topic: str) -> int | None:
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group) as consumer:
        offset: int | None = consumer.committed(TopicPartition(topic, 0))
        return offset


def test_group_commits_and_reset_dry_run_then_execute(cluster: KafkaCluster, b: list[str]) -> None:
    topic = new_topic(b)
    group = f"g-{topic}"
    produce(b, topic, [str(i) for i in range(8)])
    assert consume(b, topic, "-G", group, "-c", "3") == ["0", "1", "2"]
    assert committed(cluster, group, topic) == 3  # exactly what was written
    assert consume(b, topic, "-G", group, "-e") == [str(i) for i in range(3, 8)]
    assert committed(cluster, group, topic) == 8

    plan = ok(kafkastate("groups", "reset-offsets", group, "-t", topic, "--to-offset", "2", *b))
    assert plan.splitlines() == [f"{topic}\t0\t8\t2"]
    assert committed(cluster, group, topic) == 8  # a dry run changes nothing
    ok(kafkastate("groups", "reset-offsets", group, "-t", topic, "--to-offset", "2",
                  "--execute", *b))  # fmt: skip
    assert committed(cluster, group, topic) == 2
    assert consume(b, topic, "-G", group, "-e") == [str(i) for i in range(2, 8)]

    ok(kafkastate("groups", "reset-offsets", group, "--to-earliest", "--execute", *b))
    assert committed(cluster, group, topic) == 0
    ok(kafkastate("groups", "reset-offsets", group, "--to-latest", "--execute", "--json", *b))
    assert committed(cluster, group, topic) == 8

    listed = ok(kafkastate("groups", "list", *b)).splitlines()
    assert f"{group}\tconsumer" in listed
    described = json.loads(ok(kafkastate("groups", "describe", group, "--json", *b)))
    assert described["state"] == "Empty"
    assert described["offsets"] == [
        {"topic": topic, "partition": 0, "committed": 8, "end": 8, "lag": 0, "member": ""}
    ]
    ok(kafkastate("groups", "delete", group, *b))
    assert f"{group}\tconsumer" not in ok(kafkastate("groups", "list", *b)).splitlines()


def test_ctrl_c_stops_a_consume_cleanly_and_commits_what_was_written(
    cluster: KafkaCluster, b: list[str]
) -> None:
    topic = new_topic(b)
    group = f"g-{topic}"
    produce(b, topic, [str(i) for i in range(5)])

    def five_lines_read(proc: Running) -> None:
        assert proc.stdout is not None
        seen = [proc.stdout.readline() for _ in range(5)]
        assert seen == [f"{i}\n".encode() for i in range(5)]

    assert ctrl_c(["consume", "-t", topic, "-G", group, *b], 0, five_lines_read) == b""
    assert committed(cluster, group, topic) == 5


def test_ctrl_c_in_the_middle_of_a_batch_commits_only_the_records_written(
    cluster: KafkaCluster, b: list[str]
) -> None:
    topic = new_topic(b)
    group = f"g-{topic}"
    n = 2000
    with KafkaProducer(bootstrap_servers=cluster.bootstrap) as producer:
        for i in range(n):
            producer.send(topic, b"%04d" % i + b"x" * 996, partition=0)
        producer.flush()
    first: list[bytes] = []

    def blocked_in_a_batch(proc: Running) -> None:
        assert proc.stdout is not None
        first.append(proc.stdout.readline())
        time.sleep(1)  # ~64 KiB fill the pipe: it is blocked writing a record of its batch

    rest = ctrl_c(["consume", "-t", topic, "-G", group, *b], 0, blocked_in_a_batch)
    lines = (first[0] + rest).splitlines()
    assert [line[:4] for line in lines] == [b"%04d" % i for i in range(len(lines))]
    assert 0 < len(lines) < n // 4, len(lines)  # stopped well inside the first batches
    # nothing half-done: the group resumes right after the last record written
    assert committed(cluster, group, topic) == len(lines)


# ---------------------------------------------------------------------------- topics


def seen_partitions(cluster: KafkaCluster, topic: str) -> int:
    """How many partitions kafka-python's admin client sees ``topic`` with (0: none)."""
    admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        return sum(len(t["partitions"]) for t in admin.describe_topics()
                   if t["name"] == topic)  # fmt: skip
    finally:
        admin.close()


def test_topics_create_describe_alter_delete_seen_by_another_client(
    cluster: KafkaCluster, b: list[str]
) -> None:
    name = f"cli-{uuid.uuid4().hex[:10]}"
    ok(kafkastate("topics", "create", name, "-p", "2", "-r", "1", "-c", "retention.ms=60000", *b))
    assert seen_partitions(cluster, name) == 2
    assert [line.split("\t") for line in ok(kafkastate("topics", "list", *b)).splitlines()
            if line.startswith(name)] == [[name, "2", "1"]]  # fmt: skip
    rows = ok(kafkastate("topics", "describe", name, *b)).splitlines()
    assert [row.split("\t")[:5] for row in rows] == [[name, "0", "1", "1", "1"],
                                                      [name, "1", "1", "1", "1"]]  # fmt: skip
    one_error_line(kafkastate("topics", "create", name, *b), 1, name)
    ok(kafkastate("topics", "create", name, "--if-not-exists", *b))

    ok(kafkastate("topics", "alter", name, "-p", "3", "-c", "retention.ms=120000", *b))
    deadline = time.monotonic() + 15
    while seen_partitions(cluster, name) != 3:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    configs = _topic_configs(b, name, deadline)
    assert configs["retention.ms"] == "120000"

    ok(kafkastate("topics", "delete", name, *b))
    while seen_partitions(cluster, name):
        assert time.monotonic() < deadline + 15
        time.sleep(0.1)
    one_error_line(kafkastate("topics", "delete", name, *b), 1, name)
    ok(kafkastate("topics", "delete", name, "--if-exists", *b))


def _topic_configs(b: Sequence[str], name: str, deadline: float) -> dict[str, str]:
    while True:  # the broker applies a change a moment after the controller commits it
        rows = json.loads(ok(kafkastate("configs", "describe", "topic", name, "--json", *b)))
        configs = {row["config"]: row["value"] for row in rows}
        if configs.get("retention.ms") == "120000" or time.monotonic() > deadline:
            return configs
        time.sleep(0.1)


def test_configs_alter_and_describe(b: list[str]) -> None:
    topic = new_topic(b)
    ok(kafkastate("configs", "alter", "topic", topic, "-s", "retention.ms=120000",
                  "-s", "max.message.bytes=200000", *b))  # fmt: skip
    assert _topic_configs(b, topic, time.monotonic() + 15)["max.message.bytes"] == "200000"
    ok(kafkastate("configs", "alter", "topic", topic, "-d", "max.message.bytes", *b))
    deadline = time.monotonic() + 15
    while True:
        rows = json.loads(ok(kafkastate("configs", "describe", "topic", topic, "--json", *b)))
        if "max.message.bytes" not in {row["config"] for row in rows}:
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    every = json.loads(ok(kafkastate("configs", "describe", "topic", topic, "-a", "--json", *b)))
    assert any(r["config"] == "max.message.bytes" and r["source"] == "default" for r in every)
    broker = json.loads(ok(kafkastate("configs", "describe", "broker", "1", "-a", "--json", *b)))
    assert any(r["config"] == "broker.id" and r["value"] == "1" for r in broker)


def test_cluster(cluster: KafkaCluster, b: list[str]) -> None:
    described = json.loads(ok(kafkastate("cluster", "--json", *b)))
    host, port = cluster.bootstrap.rsplit(":", 1)
    assert described["brokers"] == [{"broker_id": 1, "host": host, "port": int(port),
                                     "rack": None}]  # fmt: skip
    assert described["controller_id"] == 1
    (row,) = ok(kafkastate("cluster", *b)).splitlines()
    assert row.split("\t")[:5] == ["1", host, port, "", "yes"]
    assert row.split("\t")[5] == described["cluster_id"]


# --------------------------------------------------------------------- security, ACLs


def test_sasl_with_librdkafka_names_and_ssl_with_a_properties_file(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    assert cluster.sasl is not None and cluster.sasl_bootstrap and cluster.ssl_bootstrap
    sasl = ["-b", cluster.sasl_bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
            "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", f"sasl.username={cluster.sasl.username}",
            "-X", f"sasl.password={cluster.sasl.password}"]  # fmt: skip
    topic = new_topic(sasl)
    produce(sasl, topic, ["over sasl"])
    props = tmp_path / "ssl.properties"
    props.write_text(
        f"# python names work too\nsecurity_protocol=SSL\nssl_cafile={cluster.ca_file}\n"
    )
    ssl = ["-b", cluster.ssl_bootstrap, "-F", str(props)]
    assert consume(ssl, topic, "-e") == ["over sasl"]
    wrong = [*sasl, "-X", "sasl.password=wrong"]
    one_error_line(kafkastate("topics", "list", *wrong), 1)


def test_acls_let_a_user_in_and_out(cluster: KafkaCluster, b: list[str]) -> None:
    assert cluster.sasl is not None and cluster.sasl_bootstrap
    topic = new_topic(b)
    bob = ["-b", cluster.sasl_bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
           "-X", "sasl.mechanism=PLAIN", "-X", f"sasl.username={cluster.sasl.plain_only_username}",
           "-X", f"sasl.password={cluster.sasl.plain_only_password}", "--timeout", "5"]  # fmt: skip
    one_error_line(kafkastate("produce", "-t", topic, *bob, input=b"x\n"), 1)
    who = ["--principal", f"User:{cluster.sasl.plain_only_username}", "--allow", "--topic", topic]
    for operation in ("describe", "write"):
        ok(kafkastate("acls", "create", *who, "--operation", operation, *b))
    rows = [
        r.split("\t") for r in ok(kafkastate("acls", "list", "--topic", topic, *b)).splitlines()
    ]
    assert sorted(r[2] for r in rows) == ["describe", "write"]
    deadline = time.monotonic() + 15
    while (result := kafkastate("produce", "-t", topic, *bob, input=b"x\n")).returncode:
        assert time.monotonic() < deadline, result.stderr.decode()
        time.sleep(0.2)
    deleted = ok(kafkastate("acls", "delete", "--topic", topic, *b)).splitlines()
    assert len(deleted) == 2
    assert ok(kafkastate("acls", "list", "--topic", topic, *b)) == ""
    one_error_line(kafkastate("acls", "delete", *b), 2, "every ACL")


# ---------------------------------------------------------------------------- errors


def test_unreachable_broker_is_one_line_within_the_timeout() -> None:
    for args in (["topics", "list"], ["consume", "-t", "x"], ["produce", "-t", "x"]):
        started = time.monotonic()
        result = kafkastate(*args, "-b", "127.0.0.1:1", "--timeout", "2", input=b"")
        one_error_line(result, 1, "127.0.0.1:1")
        assert time.monotonic() - started < 15


def test_bootstrap_from_the_environment(cluster: KafkaCluster) -> None:
    env = environment(KAFKASTATE_BOOTSTRAP=cluster.bootstrap)
    assert json.loads(ok(kafkastate("cluster", "--json", env=env)))["controller_id"] == 1


def test_unknown_topic(b: list[str]) -> None:
    for args in (["consume", "-t", "no-such-topic"], ["produce", "-t", "no-such-topic"],
                 ["topics", "describe", "no-such-topic"]):  # fmt: skip
        one_error_line(kafkastate(*args, *b, input=b"x\n"), 1, "'no-such-topic'", "not exist")
    topic = new_topic(b)
    one_error_line(kafkastate("consume", "-t", topic, "-p", "5", *b), 1, "no partition 5")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["consume", "-t", "x", "--bogus"], ["--bogus"]),
        (["consume"], ["--topic"]),
        (["consume", "-t", "x", "-o", "sometime"], ["-o", "sometime"]),
        (["consume", "-t", "x", "-f", "%Q"], ["%Q"]),
        (["consume", "-t", "x", "--json", "-f", "%s"], ["--json"]),
        (["consume", "-t", "x", "-X", "no.such.property=1"], ["no.such.property"]),
        (["consume", "-t", "x", "-X", "security.protocol=CARRIER_PIGEON"], ["CARRIER_PIGEON"]),
        (["consume", "-t", "x", "-X", "novalue"], ["novalue"]),
        (["consume", "-t", "x", "-F", "/no/such/file"], ["/no/such/file"]),
        (["produce", "-t", "x", "-z", "brotli"], ["brotli"]),
        (["produce", "-t", "x", "-H", "noequals"], ["noequals"]),
        (["groups", "reset-offsets", "g"], ["--to-earliest"]),
        (["nosuchcommand"], ["nosuchcommand"]),
    ],
)
def test_bad_option_is_one_line(b: list[str], args: list[str], words: list[str]) -> None:
    one_error_line(kafkastate(*args, *b), 2, *words)


def test_missing_extra_names_it() -> None:
    code = (
        "import sys; sys.modules['click'] = None; from kafkastate.cli import main; sys.exit(main())"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True,
                            env=environment(), check=False)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.decode().strip().splitlines() == [
        "kafkastate: the command line needs the 'cli' extra (click is not installed): "
        "pip install 'kafkastate[cli]'"
    ]


# ---------------------------------------------------------------------------- broker


def test_broker_command_serves_until_ctrl_c() -> None:
    printed: list[str] = []

    def serving(proc: Running) -> None:
        assert proc.stdout is not None
        bootstrap = proc.stdout.readline().decode().strip()
        printed.append(bootstrap)
        assert re.fullmatch(r"127\.0\.0\.1:\d+", bootstrap), bootstrap
        described = json.loads(ok(kafkastate("cluster", "--json", "-b", bootstrap)))
        assert len(described["brokers"]) == 1

    ctrl_c(["broker"], 0, serving)
    host, port = printed[0].rsplit(":", 1)
    with pytest.raises(ProbeError):  # stopped
        metadata(host, int(port))


# ------------------------------------------------------------------------------- docs

SHELL_BLOCK = re.compile(r"^```sh\n(.*?)^```\n(?:\n```text\n(.*?)^```)?", re.S | re.M)


def test_docs_examples_run(cluster: KafkaCluster, tmp_path: Path) -> None:
    """Each ```sh block of docs/cli.md runs in bash against the module's broker; where a
    ```text block follows, the output is exactly that."""
    blocks = SHELL_BLOCK.findall(DOCS.read_text())
    assert len(blocks) >= 5
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "kafkastate"
    wrapper.write_text("#!/bin/sh\nexec " + " ".join(f"'{c}'" for c in command()) + ' "$@"\n')
    wrapper.chmod(0o755)
    env = environment(**cluster.env())
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    bash = shutil.which("bash")
    assert bash is not None
    for i, (script, expected) in enumerate(blocks):
        if "kafkastate broker" in script:
            continue  # starts a broker of its own: test_broker_command_serves_until_ctrl_c
        result = subprocess.run([bash, "-euo", "pipefail", "-c", script], capture_output=True,
                                env=env, cwd=tmp_path, timeout=120, check=False)  # fmt: skip
        where = f"docs/cli.md block {i}:\n{script}\n{result.stderr.decode()}"
        assert result.returncode == 0, where
        if expected:
            assert result.stdout.decode() == expected, where
