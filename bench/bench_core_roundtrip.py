"""Core-only request round trips: CPU per request through one ``BrokerConnection``.

A connection past its ApiVersions handshake sends a Metadata request and takes its answer,
N times: ``send_request``, ``data_to_send``, ``receive_data`` of the answer's frame,
``next_event`` -- the sans-IO path every client request takes (and most of a simulator
seed), with no socket and no broker. The answer's body is the same each time (the
connection's small-response cache decodes it once, as in a steady client). Only the loop
is timed (process CPU time); the minimum of ``--repeat`` rounds counts.

Written to compare the pure-Python core with one compiled by mypyc
(``tools/build_mypyc.py``; docs/simulation.md, "Compiled core (mypyc): a measurement"):

    PYTHONPATH=. python bench/bench_core_roundtrip.py --requests 200000
"""

from __future__ import annotations

import argparse
import pathlib
import struct
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kafkastate.core.connection import (  # noqa: E402
    BrokerConnection,
    ConnectionConfig,
    ConnectionReady,
    ResponseReceived,
)
from tests._support.peer import api_versions_response, response_frame  # noqa: E402
from tests.core.test_connection import metadata_request, metadata_response  # noqa: E402

_SIZE_AND_HEADER = struct.Struct(">ihhi")  # a request frame's size, key, version, id
_SIZE_AND_ID = struct.Struct(">ii")  # a response frame's size and correlation id


def ready() -> BrokerConnection:
    conn = BrokerConnection(ConnectionConfig())
    conn.connection_made(now=0.0)
    _, _, version, cid = _SIZE_AND_HEADER.unpack_from(conn.data_to_send())
    conn.receive_data(response_frame(cid, api_versions_response(version)), now=0.0)
    assert isinstance(conn.next_event(), ConnectionReady)
    return conn


def one_round(requests: int) -> float:
    conn = ready()
    request = metadata_request()
    frame = response_frame(0, metadata_response())
    body = frame[8:]  # after the size and the correlation id (Metadata v12: header v1)
    start = time.process_time()
    for i in range(requests):
        now = i * 0.001
        conn.send_request(request, now=now)
        sent = conn.data_to_send()
        cid = _SIZE_AND_HEADER.unpack_from(sent)[3]
        conn.receive_data(_SIZE_AND_ID.pack(len(body) + 4, cid) + body, now=now)
        event = conn.next_event()
        if not isinstance(event, ResponseReceived):
            raise AssertionError(f"unexpected event {event!r}")
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    best = min(one_round(args.requests) for _ in range(args.repeat))
    source = sys.modules[BrokerConnection.__module__].__file__ or ""
    kind = "pure" if source.endswith(".py") else "compiled"
    print(
        f"{kind}: {args.requests} round trips, best of {args.repeat}: {best:.3f} s CPU, "
        f"{best / args.requests * 1e6:.2f} µs each"
    )


if __name__ == "__main__":
    main()
