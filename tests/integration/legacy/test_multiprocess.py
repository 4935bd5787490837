"""MultiProcessConsumer (0.9.5) against a real broker: every record once across the child
processes, commits, clean stop, a crashed child reported."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import pytest

from kafkastate.errors import KafkaError
from kafkastate.legacy import KafkaClient, MultiProcessConsumer
from kafkastate.legacy.common import OffsetFetchRequest

pytestmark = pytest.mark.integration

Produce = Callable[[str, int, list[bytes]], None]


def test_every_record_once_across_processes(
    client: KafkaClient, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(4)
    group = "g-" + uuid.uuid4().hex
    expected = []
    for p in range(4):
        values = [b"%d-%d" % (p, i) for i in range(10)]
        produce(topic, p, values)
        expected += values
    consumer = MultiProcessConsumer(
        client, group, topic, partitions_per_proc=2, auto_commit_every_t=None
    )
    assert len(consumer.procs) == 2
    got = consumer.get_messages(count=40, block=True, timeout=60)
    assert sorted(m.message.value for m in got) == sorted(expected)
    assert consumer.get_messages(count=1, block=True, timeout=0.5) == []
    consumer.stop()
    assert all(not proc.is_alive() for proc in consumer.procs)
    resps = client.send_offset_fetch_request(
        group, [OffsetFetchRequest(topic, p) for p in range(4)]
    )
    assert [r.offset for r in resps] == [10, 10, 10, 10]


def test_iteration_and_num_procs(
    client: KafkaClient, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(2)
    produce(topic, 0, [b"a"])
    produce(topic, 1, [b"b"])
    consumer = MultiProcessConsumer(client, None, topic, num_procs=2, auto_commit=False)
    assert len(consumer.procs) == 2
    got: list[bytes] = []
    for _ in range(30):  # each pass ends after 1 s without a message
        got += [m.message.value for m in consumer]
        if len(got) == 2:
            break
    assert sorted(got) == [b"a", b"b"]
    consumer.stop()


def test_a_crashed_child_is_reported(client: KafkaClient, new_topic: Callable[..., str]) -> None:
    topic = new_topic(1)
    consumer = MultiProcessConsumer(client, None, topic, auto_commit=False)
    (proc,) = consumer.procs
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    with pytest.raises(KafkaError, match="exited"):
        consumer.get_messages(count=1, block=True, timeout=5)
    consumer.stop()


def test_children_exit_when_the_parent_dies(bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(2)
    script = (
        "import os, signal\n"
        "from kafkastate.legacy import KafkaClient, MultiProcessConsumer\n"
        f"c = MultiProcessConsumer(KafkaClient({bootstrap!r}), None, {topic!r}, num_procs=2,"
        " auto_commit=False)\n"
        "print(' '.join(str(p.pid) for p in c.procs), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2, out.stderr
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, "children outlived their parent"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not reaped by its new parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
