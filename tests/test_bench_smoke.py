"""The benchmark driver runs end to end: a short version of ``./ks bench`` in the suite.

No figure is checked (timings never pass or fail a test); what is checked is that every
part the driver was asked for ran and landed in its tables, so a driver broken by a
change (an option, a script's arguments) fails here rather than in the long run; and that
the codec cells compare compressed runs: each client the driver runs (and the Java perf
tool) writes record batches with the cell's codec, which the broker's log shows.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import struct
import subprocess
import sys
import uuid
from types import ModuleType
from typing import Any

import pytest

from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaAdminClient
from kafkastate.testing._cluster import default_kafka_version

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH_ALL = ROOT / "bench" / "bench_all.py"


def _bench_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_all_under_test", BENCH_ALL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench(name: str) -> ModuleType:
    """``bench/bench_producer.py`` or ``bench_consumer.py`` (bench_all puts bench/ on the
    path, as the scripts expect)."""
    _bench_all()
    return importlib.import_module(name)


CODECS = ("gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # attributes bits 0-2


def test_run_script_runs_a_script_that_takes_no_cells(tmp_path: pathlib.Path) -> None:
    # The Spark and curve scripts take no --cells: the driver once looked for it in every
    # script's arguments and stopped the full run (ValueError) after the Java figures.
    bench_all = _bench_all()
    script = tmp_path / "tiny_bench.py"
    script.write_text(
        "import json, sys\n"
        "out = sys.argv[sys.argv.index('--json') + 1]\n"
        "json.dump({'rows': [{'kind': 'spark', 'argv': sys.argv[1:-2]}]}, open(out, 'w'))\n"
    )
    rows = bench_all.run_script(str(script), ["--bootstrap", "b:1"], tmp_path / "rows.json")
    assert rows == [{"kind": "spark", "argv": ["--bootstrap", "b:1"]}]
    # a --cells that --only emptied skips the script
    none = bench_all.run_script(str(script), ["--cells", ""], tmp_path / "none.json")
    assert none == [] and not (tmp_path / "none.json").exists()


@pytest.mark.integration
def test_quick_subset_writes_every_table(kafka_cluster: Any, tmp_path: pathlib.Path) -> None:
    for peer in ("aiokafka", "confluent_kafka"):
        if importlib.util.find_spec(peer) is None:
            pytest.skip(f"{peer} is not installed (the dev extra)")
    out, plots = tmp_path / "results", tmp_path / "plots"
    argv = [
        sys.executable,
        str(BENCH_ALL),
        "--quick",
        "--only",
        "produce/100B-p1-*,consume/100B-p1-*",
        "--no-java",
        "--no-spark",
        "--no-curves",
        "--bootstrap",
        kafka_cluster.bootstrap,
        "--out",
        str(out),
        "--plots",
        str(plots),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        argv, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "latest.json").read_text())
    rates = {(r["kind"], r["cell"], r["client"]): r["rate"] for r in result["rows"]}
    for kind, cell in (("producer", "100B-p1-acks1-none"), ("consumer", "100B-p1-none")):
        clients = {c for k, ce, c in rates if (k, ce) == (kind, cell)}
        assert "aiokafka" in clients, (kind, clients)
        assert any(c.startswith("confluent") for c in clients), (kind, clients)
        assert any(c.startswith("ks-") for c in clients), (kind, clients)
        assert all(rates[(kind, cell, c)] > 0 for c in clients)
    table = (out / "latest.md").read_text()
    for heading in ("### Produce", "### Consume", "### Memory", "### Spark"):
        assert heading in table
    assert "left out (--no-spark)" in table
    assert list(plots.glob("perf-*.svg")), "no chart written"


def test_every_codec_has_produce_and_consume_cells() -> None:
    bench_all = _bench_all()
    producer, consumer = _bench("bench_producer"), _bench("bench_consumer")
    assert producer.CODECS == CODECS
    produce = {c for c in bench_all.PRODUCE_CELLS if bench_all.codec_of(c) != "none"}
    assert {bench_all.codec_of(c) for c in produce} == set(CODECS)
    assert any("keyed" in c for c in produce)
    consume = {c for c in bench_all.CONSUME_CELLS if bench_all.codec_of(c) != "none"}
    assert consume, "no codec consume cell"
    # every cell the driver asks for is one the worker script has (--cells would drop it)
    assert set(bench_all.PRODUCE_CELLS) <= {c.name for c in producer.ALL_CELLS}
    assert set(bench_all.CONSUME_CELLS) <= {c.name for c in consumer.ALL_CELLS}
    # the selection docs/performance.md gives runs exactly the codec cells
    only = "*-gzip,*-snappy,*-lz4,*-zstd"
    picked = bench_all.selected("produce", bench_all.PRODUCE_CELLS, only)
    picked += bench_all.selected("consume", bench_all.CONSUME_CELLS, only)
    assert set(picked) == produce | consume


def _batch_codecs(partition_dir: pathlib.Path) -> list[int]:
    """The codec id (attributes bits 0-2) of every record batch in a partition's segments:
    baseOffset int64, batchLength int32, leader epoch int32, magic int8, crc int32, then the
    attributes int16 (the v2 record batch, KIP-98)."""
    codecs = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + 23 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            if length <= 0:
                break
            (attributes,) = struct.unpack_from(">h", data, pos + 21)
            codecs.append(attributes & 0x07)
            pos += 12 + length
    return codecs


def _codecs_on_disk(broker: Any, topic: str) -> list[int] | None:
    """The codec ids of the topic's partition 0 batches, read from the broker's log
    directory; None where that directory is not on this machine (an existing cluster)."""
    tp = TopicPartition(topic, 0)
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        found = admin.describe_log_dirs([tp])
    paths = [d.path for node in found for d in node["log_dirs"] if tp in d.replicas]
    local = [pathlib.Path(p) / f"{topic}-0" for p in paths]
    local = [p for p in local if p.is_dir()]
    return _batch_codecs(local[0]) if local else None


def _peers_installed() -> None:
    for peer in ("aiokafka", "confluent_kafka", "kafka"):
        if importlib.util.find_spec(peer) is None:
            pytest.skip(f"{peer} is not installed (the dev extra)")


WORKER_ARGS = argparse.Namespace(with_hypothesis=False, worker_timeout=None, sample_every=100)


@pytest.mark.integration
@pytest.mark.parametrize("codec", CODECS)
def test_codec_cells_write_compressed_batches(kafka_cluster: Any, codec: str) -> None:
    _peers_installed()
    bench_all, producer = _bench_all(), _bench("bench_producer")
    broker = producer.Broker(kafka_cluster.bootstrap)
    cell = producer.Cell(1024, 1, codec, "1")
    records = 2000
    not_local: list[str] = []
    for client in bench_all.PRODUCE_CLIENTS:
        topic = f"bench-codec-{codec}-{client}-{uuid.uuid4().hex[:8]}"
        broker.create_topic(topic, 1)
        try:
            job = [client, broker.bootstrap, topic, records]
            extra = ["--size", 1024, "--acks", "1", "--compression", codec, "--sample-every", 100]
            data, problems = producer.run_subprocess(
                producer.HERE, job, extra, WORKER_ARGS, pythonpath=str(ROOT)
            )
            assert data is not None and not problems, (client, problems)
            value_bytes = (records + 1) * cell.size  # + the warm-up record
            problem = producer.compression_problem(broker, topic, 1, codec, value_bytes)
            assert problem is None, (client, problem)
            codecs = _codecs_on_disk(broker, topic)
            if codecs is None:
                not_local.append(client)
                continue
            # the witness: every batch on disk carries the cell's codec
            assert codecs and set(codecs) == {CODEC_IDS[codec]}, (client, codecs)
        finally:
            broker.delete_topic(topic)
    # the bench's own path: the worker's result carries no problem (the log check included)
    result = producer.run_worker(broker, cell, "ks-asyncio", records, WORKER_ARGS)
    assert not result.problems, result.problems
    if not_local:
        pytest.skip(
            f"the broker's log directory is not on this machine: {not_local} checked "
            "by log size only, not by the codec ids on disk"
        )


@pytest.mark.integration
def test_the_compression_check_flags_uncompressed_batches(kafka_cluster: Any) -> None:
    _peers_installed()
    producer = _bench("bench_producer")
    broker = producer.Broker(kafka_cluster.bootstrap)
    topic = f"bench-codec-plain-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 1)
    try:
        records = 500
        job = ["confluent", broker.bootstrap, topic, records]
        extra = ["--size", 1024, "--acks", "1", "--compression", "none", "--sample-every", 100]
        data, problems = producer.run_subprocess(
            producer.HERE, job, extra, WORKER_ARGS, pythonpath=str(ROOT)
        )
        assert data is not None and not problems, problems
        # an uncompressed topic passed off as a zstd cell's is caught
        problem = producer.compression_problem(broker, topic, 1, "zstd", (records + 1) * 1024)
        assert problem is not None and "not compressed" in problem
        codecs = _codecs_on_disk(broker, topic)
        assert codecs is None or set(codecs) == {CODEC_IDS["none"]}, codecs
    finally:
        broker.delete_topic(topic)


@pytest.mark.integration
@pytest.mark.parametrize("codec", ("lz4", "zstd"))
def test_codec_consume_cells_read_a_compressed_topic(kafka_cluster: Any, codec: str) -> None:
    _peers_installed()
    consumer = _bench("bench_consumer")
    broker = consumer.Broker(kafka_cluster.bootstrap)
    cell = consumer.Cell(1024, 1, codec)
    records = 2000
    topic, _ = consumer.fill_topic(broker, cell, records)  # raises if not compressed
    try:
        codecs = _codecs_on_disk(broker, topic)
        assert codecs is None or set(codecs) == {CODEC_IDS[codec]}, codecs
        result = consumer.run_worker(
            broker, cell, topic, "ks-asyncio", records=records, args=WORKER_ARGS
        )
        assert not result.problems, result.problems
    finally:
        broker.delete_topic(topic)


@pytest.mark.integration
def test_the_java_perf_tool_compresses_in_codec_cells(kafka_cluster: Any) -> None:
    bench_all = _bench_all()
    version = getattr(kafka_cluster, "kafka_version", None) or default_kafka_version()
    classpath = bench_all.java_classpath(version)
    if classpath is None:
        pytest.skip("java or mvn is not on PATH: the Java perf tools (see stderr)")
    broker = bench_all.Broker(kafka_cluster.bootstrap)
    # java_produce raises if the tool's topic is not compressed (the log-size check)
    assert bench_all.java_produce(broker, classpath, 1024, 2000, "zstd") > 0
    assert bench_all.java_consume(broker, classpath, 1024, 2000, "lz4") > 0
