"""The command line's parsing, without a broker: kcat's ``-f`` format and ``-o`` offsets,
``-X``/``-F`` properties and how they reach each client role."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from kafkastate.cli._options import Connection, parse_pairs, read_properties
from kafkastate.cli._records import StartAt, compile_format, parse_start, unescape
from kafkastate.errors import KafkaConfigurationError
from kafkastate.structs import ConsumerRecord


def record(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]
) -> ConsumerRecord:
    return ConsumerRecord(
        topic="t", partition=2, leader_epoch=0, offset=41, timestamp=1700000000000,
        timestamp_type=0, key=key, value=value, headers=headers, checksum=None,
        serialized_key_size=-1, serialized_value_size=-1, serialized_header_size=-1,
    )  # fmt: skip


def test_format_fields_and_escapes() -> None:
    render = compile_format(r"%t/%p/%o %k(%K)=%s(%S) @%T [%h] 100%%\t|\n")
    got = render(record(b"k", b"value", [("a", b"1"), ("b", b"2")]))
    assert got == b"t/2/41 k(1)=value(5) @1700000000000 [a=1,b=2] 100%\t|\n"


def test_format_of_a_tombstone_without_key() -> None:
    assert compile_format("%k|%K|%s|%S|%h")(record(None, None, [])) == b"|-1||-1|"


def test_format_keeps_bytes_as_they_are() -> None:
    assert compile_format("%s")(record(None, b"\xff\x00", [])) == b"\xff\x00"


@pytest.mark.parametrize("bad", ["%x", "50%", "%"])
def test_format_refuses_unknown_fields(bad: str) -> None:
    with pytest.raises(click.BadParameter, match="unknown field"):
        compile_format(bad)


def test_unescape() -> None:
    assert unescape(r"a\tb\nc\\d\qe") == "a\tb\nc\\d\\qe"


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("beginning", StartAt("beginning")),
        ("earliest", StartAt("beginning")),
        ("END", StartAt("end")),
        ("0", StartAt("offset", 0)),
        ("42", StartAt("offset", 42)),
        ("-5", StartAt("relative", 5)),
        ("s@1700000000000", StartAt("timestamp", 1700000000000)),
    ],
)
def test_offsets(text: str, start: StartAt) -> None:
    assert parse_start(click.Context(click.Command("c")), click.Option(["-o"]), text) == start


@pytest.mark.parametrize("bad", ["yesterday", "s@", "s@-1", "s@soon", "1.5"])
def test_bad_offsets(bad: str) -> None:
    with pytest.raises(click.BadParameter, match="expected beginning"):
        parse_start(click.Context(click.Command("c")), click.Option(["-o"]), bad)


def test_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("# comment\n! also\n\nsecurity.protocol = SSL\nsasl.username: a=b\n")
    assert read_properties(path) == {"security.protocol": "SSL", "sasl.username": "a=b"}
    path.write_text("just words\n")
    with pytest.raises(KafkaConfigurationError, match=r"client.properties:1: expected key=value"):
        read_properties(path)
    with pytest.raises(KafkaConfigurationError, match="-F"):
        read_properties(tmp_path / "missing")


def test_pairs() -> None:
    assert parse_pairs(["a=b=c", " k = v "]) == {"a": "b=c", "k": "v"}
    with pytest.raises(KafkaConfigurationError, match="-X novalue: expected key=value"):
        parse_pairs(["novalue"])


def test_each_client_takes_the_options_of_its_role(tmp_path: Path) -> None:
    path = tmp_path / "p"
    path.write_text("acks=1\nsasl.username=from-file\nbootstrap.servers=h:1\n")
    conn = Connection.build("", ["sasl.username=alice", "group.id=g"], [path], 3.0)
    assert conn.bootstrap == "h:1"  # -b absent: the file's bootstrap.servers
    producer = conn.client_options("producer", max_block_ms=1)
    assert producer["acks"] == 1 and producer["sasl_plain_username"] == "alice"
    assert "group_id" not in producer
    consumer = conn.client_options("consumer", group_id="cli")
    assert consumer["group_id"] == "g"  # the user's -X wins over the command's own
    assert "acks" not in consumer
    admin = conn.client_options("admin")
    assert admin["request_timeout_ms"] == admin["bootstrap_timeout_ms"] == 3000
    assert Connection.build("b:2", [], [path], 1.0).bootstrap == "b:2"
    with pytest.raises(KafkaConfigurationError, match="--timeout"):
        Connection.build("", [], [], 0)
