"""The ``ebpo verl`` command-line tests need verl (an optional extra): skipped without it.

Listeners on 127.0.0.1 that are not Ray, for the address checks: a real HTTP server (what a user
who types the dashboard's port meets), a real gRPC server of another service, and one that
answers only the address check's call to Ray's GCS (``ray.init`` never gets in)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest

pytest.importorskip("verl")


@pytest.fixture
def http_server() -> Iterator[str]:
    """A real HTTP server on the loopback (http.server): its ``host:port``."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _grpc_server(handlers: list[Any]) -> Iterator[str]:
    import grpc  # comes with ray (verl extra)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=handlers)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


@pytest.fixture
def other_grpc() -> Iterator[str]:
    """A real gRPC server that serves nothing (another service, a raylet's port): every call
    ends UNIMPLEMENTED."""
    yield from _grpc_server([])


@pytest.fixture
def fake_gcs() -> Iterator[str]:
    """A gRPC server that answers the one call the address check makes of Ray's GCS
    (:data:`~ebpo.commands.verl.address.GCS_METHOD`) and nothing else: it passes the check, and
    ``ray.init`` never gets in."""
    import grpc  # comes with ray (verl extra)

    from ebpo.commands.verl.address import GCS_METHOD

    class ClusterIdOnly(grpc.GenericRpcHandler):
        def service(self, details: Any) -> Any:
            if details.method != GCS_METHOD:
                return None
            return grpc.unary_unary_rpc_method_handler(lambda request, context: b"")

    yield from _grpc_server([ClusterIdOnly()])
