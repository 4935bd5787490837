"""Draw docs/plots/stats-run.png with ``kafkastate stats run --plot`` from a real run.

The run: a producer writes for about 12 s (a burst, a pause, a steady stream) while a
consumer of the same topic starts late and reads slowly at first, so that lag builds up and
drains; both write their ``stats_cb`` reports (every 250 ms) as JSON lines, and the command
line draws them. Against ``KAFKASTATE_BOOTSTRAP`` when set, else a broker of the harness.

Run: python tools/gen_stats_plot.py [OUT.png]      (default docs/plots/stats-run.png)
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: tools/ is on the path, not the root
    sys.path.insert(0, str(ROOT))

from kafkastate.adapters.blocking import BlockingAdmin  # noqa: E402
from kafkastate.core.protocol.requests import NewTopic  # noqa: E402
from kafkastate.sync import KafkaConsumer, KafkaProducer  # noqa: E402

OUT = ROOT / "docs" / "plots" / "stats-run.png"
RECORDS = 10_000


def run(bootstrap: str, stats: pathlib.Path) -> None:
    topic = f"stats-demo-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=topic, num_partitions=4)])
    lock = threading.Lock()
    with stats.open("w") as file:

        def write(report: dict[str, Any]) -> None:
            with lock:
                file.write(json.dumps(report) + "\n")

        def produce() -> None:
            with KafkaProducer(
                bootstrap_servers=bootstrap, stats_cb=write, statistics_interval_ms=250
            ) as producer:
                for i in range(RECORDS):
                    producer.send(topic, b"x" * 200, key=b"%d" % (i % 64))
                    if i == RECORDS // 3:
                        producer.flush()
                        time.sleep(2.0)  # a pause: the rates fall, the consumer catches up
                    elif i > RECORDS // 3 and i % 250 == 0:
                        time.sleep(0.1)  # then a steady stream
                producer.flush()

        writer = threading.Thread(target=produce)
        writer.start()
        time.sleep(1.5)  # the consumer starts late: lag builds up
        with KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=f"g-{topic}",
            auto_offset_reset="earliest",
            stats_cb=write,
            statistics_interval_ms=250,
            max_poll_records=200,
        ) as consumer:
            seen, started = 0, time.monotonic()
            while seen < RECORDS:
                seen += sum(len(rs) for rs in consumer.poll(timeout_ms=200).values())
                if time.monotonic() - started < 4.0:
                    time.sleep(0.05)  # slow at first
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                consumer.poll(timeout_ms=100)
        writer.join()


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[0]) if argv else OUT
    with ExitStack() as stack:
        bootstrap = os.environ.get("KAFKASTATE_BOOTSTRAP")
        if not bootstrap:
            from kafkastate.testing import KafkaCluster  # noqa: PLC0415 -- only without one

            bootstrap = stack.enter_context(KafkaCluster.start()).bootstrap
        folder = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
        stats = folder / "run.jsonl"
        run(bootstrap, stats)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "kafkastate.cli", "stats", "run", str(stats)]
        subprocess.run([*command, "--plot", str(out)], check=True, env=env)  # and a summary
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
