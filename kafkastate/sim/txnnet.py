"""What the transactional world adds to the simulated network.

* A connection the *client* closes (after a request timeout) still delivers what was
  already sent -- TCP sends the FIN after the data -- so the broker may process a request
  whose client gave up on it; only a reset (or a crash) drops what is in flight.
* Every request a pipeline's producer sends is tagged with the client transaction it
  belongs to when it leaves the host (the cluster keeps the tags: invariant T5), and a
  *trap* can hold the connection from a producer's next EndTxn on (``hold_end_txn``).
* Transaction markers travel from the transaction coordinator to the partition leaders as
  WriteTxnMarkers frames on their own pipes, so they can be delayed and held like anything
  else; the coordinator's transaction timeouts are events too.
* A broker crash fails its coordinators over before its connections reset: the group
  coordinator's groups load from their records, the transaction coordinator loads its log
  (COORDINATOR_LOAD_IN_PROGRESS meanwhile, then the markers of what was being completed).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Final

from kafkastate.core.protocol.framing import FrameDecoder
from kafkastate.sim.cluster import parse_request
from kafkastate.sim.entropy import Entropy
from kafkastate.sim.host import HostDriver, _Host
from kafkastate.sim.network import _Conn
from kafkastate.sim.scheduler import _ms_at
from kafkastate.sim.txncluster import TxnCluster

if TYPE_CHECKING:
    from kafkastate.sim.txnworld import TxnConfig

__all__ = ["TxnNetwork"]

_END_TXN: Final = 26


class TxnNetwork(HostDriver[_Host[Any]]):
    """Half-closed connections, request tags, EndTxn traps and marker pipes."""

    config: TxnConfig
    cluster: TxnCluster

    def __init__(self, entropy: Entropy, config: TxnConfig, cluster: TxnCluster) -> None:
        super().__init__(entropy, config, cluster)
        self._draining: set[int] = set()  # closed by the client; what it sent still arrives
        self._held_conns: set[int] = set()
        self._traps: dict[str, bool] = {}  # producer host -> hold its next EndTxn (abort only?)
        self._trap_ms: dict[str, int] = {}
        self._tag_decoders: dict[int, FrameDecoder] = {}
        self._tags: dict[tuple[int, int], Any] = {}
        self._marker_last: dict[tuple[int, int, str], tuple[int, list[bytes]]] = {}
        self._marker_held: dict[int, list[tuple[int, bytes]]] = {}
        self._txn_timer: int | None = None

    def _request_tag(self, host: str) -> Any:
        """The client transaction a request leaving producer host ``host`` belongs to."""
        del host
        return None

    # ------------------------------------------------------------- connections

    def _client_close(self, conn: _Conn) -> None:
        """The client closed the connection: what it sent still reaches the broker (and
        is processed; the answers are lost), only the other direction is dropped."""
        if not conn.open:
            return
        conn.open = False
        self._draining.add(conn.cid)
        self._queued[conn.cid] = [q for q in self._queued.get(conn.cid, []) if q[0] == "up"]
        self.cluster.drop_held(conn.cid)

    def _close(self, conn: _Conn, *, notify_client: bool) -> None:
        self._draining.discard(conn.cid)
        self._held_conns.discard(conn.cid)
        super()._close(conn, notify_client=notify_client)

    def _send(self, conn: _Conn, direction: str, data: bytes) -> None:
        if direction == "up" and conn.host.endswith("/p"):
            for frame in self._frames(conn, data):
                self._send_one(conn, frame)
            return
        if direction == "up" and conn.cid in self._held_conns:
            self._queued[conn.cid].append((direction, data))
            return
        super()._send(conn, direction, data)

    def _resend(self, conn: _Conn, direction: str, data: bytes) -> None:
        super()._send(conn, direction, data)  # tagged and trapped when first sent

    def _frames(self, conn: _Conn, data: bytes) -> list[bytes]:
        decoder = self._tag_decoders.setdefault(conn.cid, FrameDecoder())
        decoder.feed(data)
        out = []
        while (frame := decoder.next_frame()) is not None:
            out.append(struct.pack(">i", len(frame)) + bytes(frame))
        return out

    def _send_one(self, conn: _Conn, frame: bytes) -> None:
        api_key, _version, correlation_id = struct.unpack_from(">hhi", frame, 4)
        tag = self._request_tag(conn.host)
        if tag is not None:
            self._tags[(conn.cid, correlation_id)] = tag
        trap = self._traps.get(conn.host)
        if api_key == _END_TXN and trap is not None and conn.cid not in self._held_conns:
            committed = bool(parse_request(frame[4:]).body.committed)
            if not (trap and committed):
                del self._traps[conn.host]
                ms = self._trap_ms.pop(conn.host)
                self._held_conns.add(conn.cid)
                self._line(f"fault hold {conn.host} conn {conn.cid} from EndTxn({committed})")
                self.stats["EndTxn held"] += 1
                self._at(self.now + ms, "release_conn", (conn.cid,))
        if conn.cid in self._held_conns:
            self._queued[conn.cid].append(("up", frame))
            return
        super()._send(conn, "up", frame)

    def _arm_trap(self, host: str, ms: int, *, only_abort: bool) -> None:
        """Hold producer host ``host``'s connection from its next EndTxn on for ``ms``."""
        self._traps[host] = only_abort
        self._trap_ms[host] = ms
        self._line(
            f"fault trap: hold {host}'s next EndTxn{'(abort)' if only_abort else ''} {ms} ms"
        )

    def _on_release_conn(self, cid: int) -> None:
        self._held_conns.discard(cid)
        conn = self._conns[cid]
        for direction, data in self._queued.pop(cid, []):
            if direction == "up" and (conn.open or cid in self._draining):
                super()._send(conn, direction, data)
        self._line(f"release conn {cid}")

    def _releasable(self, conn: _Conn) -> bool:
        return conn.cid not in self._held_conns and (conn.open or conn.cid in self._draining)

    def _arrive(self, cid: int, direction: str, data: bytes) -> None:
        conn = self._conns[cid]
        if direction == "up" and not conn.open and cid in self._draining:
            self._broker_reads(conn, data, note=" (closed)")
            return
        super()._arrive(cid, direction, data)

    def _serve(self, conn: _Conn, request: Any) -> None:
        self.cluster.request_tag = self._tags.pop((conn.cid, request.correlation_id), None)
        super()._serve(conn, request)
        self.cluster.request_tag = None
        self._flush_markers()

    def _respond(self, conn: _Conn, request: Any, body: Any) -> None:
        if conn.open or conn.cid not in self._draining:
            super()._respond(conn, request, body)
            return
        if conn.outstanding is request:  # the client is gone: the answer goes nowhere
            conn.outstanding = None
            if conn.backlog:
                self._serve(conn, conn.backlog.pop(0))

    # -- markers: coordinator -> leaders, through their own pipes

    def _flush_markers(self) -> None:
        cluster = self.cluster
        while cluster.markers_out:
            marker = cluster.markers_out.pop(0)
            self._pipe(cluster.txn_node, marker.dst, "marker", marker.frame())
        self._arm_cluster_timers()

    def _pipe(self, src: int, dst: int, kind: str, frame: bytes) -> None:
        if kind == "marker" and dst in self._marker_held:
            self._marker_held[dst].append((src, frame))
            return
        extra = 0
        if "marker_delay" in self.config.faults and self._chaos:
            extra = self.entropy.below(4, "slow marker") * self.entropy.below(500, "marker ms")
        last = self._marker_last.get((src, dst, kind))
        due = max(0 if last is None else last[0], self.now + self.config.latency_ms + extra)
        if last is not None and last[0] == due:
            last[1].append(frame)  # one delivery: the pipe stays in order
            return
        frames = [frame]
        self._marker_last[(src, dst, kind)] = (due, frames)
        self._at(due, kind, (src, dst, frames))

    def _on_marker(self, src: int, dst: int, frames: list[bytes]) -> None:
        for frame in frames:
            self._one_marker(src, dst, frame)

    def _on_marker_answer(self, src: int, dst: int, frames: list[bytes]) -> None:
        for frame in frames:
            self._one_marker_answer(src, dst, frame)

    def _one_marker(self, src: int, dst: int, frame: bytes) -> None:
        if dst not in self.cluster.alive:
            self.cluster.marker_lost(frame, now=self._s())  # the coordinator sends it again
            self._arm_cluster_timers()
            return
        self.stats["markers"] += 1
        answer = self.cluster.write_markers(dst, frame[4:])
        self._pipe(dst, src, "marker_answer", answer)

    def _one_marker_answer(self, src: int, dst: int, frame: bytes) -> None:
        del src
        if dst in self.cluster.alive:
            self.cluster.markers_answered(frame[4:])
        self._arm_cluster_timers()

    def _hold_markers(self, node: int, ms: int) -> None:
        if node not in self._marker_held:
            self._marker_held[node] = []
            self._line(f"fault hold markers to b{node} {ms} ms")
            self._at(self.now + ms, "release_markers", (node,))

    def _on_release_markers(self, dst: int) -> None:
        for src, frame in self._marker_held.pop(dst, []):
            self._pipe(src, dst, "marker", frame)

    def _arm_cluster_timers(self) -> None:
        super()._arm_cluster_timers()
        due = self.cluster.txn_timer()
        if due is not None:
            t = max(self.now, _ms_at(due))
            if self._txn_timer is None or t < self._txn_timer or self._txn_timer < self.now:
                self._txn_timer = t
                self._at(t, "txn_timer", ())

    def _on_txn_timer(self) -> None:
        self._txn_timer = None
        self.cluster.handle_txn_timer(now=self._s())
        self._flush_markers()

    def _txn_move(self, node: int) -> None:
        self._txn_failover(node)
        self._line(f"fault transaction coordinator -> b{node}")
        self.stats["txn coordinator moves"] += 1

    def _txn_failover(self, node: int) -> None:
        """The transaction coordinator fails over to broker ``node`` (it loads its log:
        :meth:`TxnCluster.move_txn_coordinator`); the load's end is a timer event."""
        self.cluster.move_txn_coordinator(node, now=self._s())
        self._flush_markers()

    def _broker_down(self, node: int) -> None:
        """A broker crashes: the coordinators it hosted fail over to live brokers -- the
        group coordinator loading its groups from their records (as in the group world),
        the transaction coordinator its log -- before its connections reset."""
        live = self.cluster.alive - {node}
        if live and node == self.cluster.coordinator_node:
            self._move_coordinator(min(live))
            self._line(f"group coordinator fails over -> b{self.cluster.coordinator_node}")
        if live and node == self.cluster.txn_node:
            self._txn_failover(max(live))
            self._line(f"transaction coordinator fails over -> b{self.cluster.txn_node}")
        super()._broker_down(node)

    def _heal_more(self) -> None:
        for cid in sorted(self._held_conns):
            self._on_release_conn(cid)
        for node in sorted(self._marker_held):
            self._on_release_markers(node)
        self._traps.clear()
