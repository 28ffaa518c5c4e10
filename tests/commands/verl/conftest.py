"""The ``ebpo verl`` command-line tests need verl (an optional extra): skipped without it.

Two listeners on 127.0.0.1 that are not Ray, for the address checks: a real HTTP server (what a
user who types the dashboard's port meets) and a socket that answers the HTTP/2 greeting as a
gRPC server does, then says nothing (``ray.init`` never gets in)."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("verl")

#: an HTTP/2 SETTINGS frame with no settings: what a gRPC server sends first
SETTINGS_FRAME = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


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


@pytest.fixture
def silent_grpc() -> Iterator[str]:
    """A listener that answers every connection's HTTP/2 greeting with a SETTINGS frame, then
    stays silent: it passes the greeting check, and Ray's client can never join it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()
    connections: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connections.append(conn)
            with contextlib.suppress(OSError):
                conn.sendall(SETTINGS_FRAME)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in [server, *connections]:
            conn.close()
