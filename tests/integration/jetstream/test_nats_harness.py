"""The suite's nats-server harness survives losing a picked port before nats-server binds it.

On a loaded machine a port that ``free_port`` found free can be taken (often by another test's
outgoing connection) before nats-server listens on it; a fresh clone's CI lost a three-node
cluster that way ("bind: address already in use" on a route port). The harness picks fresh ports
for a first start that lost that race; these tests take the port on purpose.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.nats_server import NatsCluster, NatsServer, _port_open


@contextmanager
def held_port() -> Iterator[int]:
    """A loopback port bound, not listening, for the duration: as an outgoing connection's
    local end holds it, so nats-server cannot bind it and nothing answers on it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def test_a_first_start_whose_client_port_was_taken_listens_on_a_fresh_port(
    tmp_path: Path,
) -> None:
    with held_port() as taken:
        server = NatsServer(tmp_path, name="squatted", port=taken)
        try:
            server.start()
            assert server.port != taken
            assert _port_open(server.port)
            assert "address already in use" in server.log_path.read_text()
        finally:
            server.stop()


def test_a_cluster_whose_route_port_was_taken_starts_every_node_afresh(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path)
    with held_port() as taken:
        last = cluster.nodes[-1]
        # Every other node routes to the squatted port, as they did to the real one in CI.
        for n in cluster.nodes[:-1]:
            n.routes = [taken if p == last.cluster_port else p for p in n.routes]
        last.cluster_port = taken
        try:
            cluster.start()
            assert all(n.cluster_port != taken for n in cluster.nodes)
            assert all(_port_open(n.port) for n in cluster.nodes)
            routes = {p for n in cluster.nodes for p in n.routes}
            assert routes == {n.cluster_port for n in cluster.nodes}
        finally:
            cluster.stop()
