"""Real loopback peers for the network-wait faults: a listener that accepts and never speaks, a real HTTP
server that answers everything with 404 or 501, and a port where nothing listens. All bind 127.0.0.1 only,
run in daemon threads with bounded loops, and stop by themselves after `life_s` even if a test forgets them."""

from __future__ import annotations

import http.server
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

LIFE_S = 180.0


@contextmanager
def silent_listener(life_s: float = LIFE_S) -> Iterator[int]:
    """A port on 127.0.0.1 that accepts every connection, reads what comes, and never sends a byte."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        end = time.monotonic() + life_s
        while not stop.is_set() and time.monotonic() < end:
            ready, _, _ = select.select([server, *held], [], [], 0.2)
            for s in ready:
                if s is server:
                    conn, _ = server.accept()
                    held.append(conn)
                else:
                    try:
                        data = s.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        held.remove(s)
                        s.close()
        for s in held:
            s.close()
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)


class _Quiet(http.server.BaseHTTPRequestHandler):
    """Every GET and HEAD is a 404 (nothing published); any other method Python's server answers 501."""

    def do_GET(self) -> None:
        self.send_error(404)

    def do_HEAD(self) -> None:
        self.send_error(404)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def http_server(life_s: float = LIFE_S) -> Iterator[int]:
    """A real HTTP server on 127.0.0.1 (404 for every page), stopped on leaving or after `life_s`."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    server.daemon_threads = True
    server.handle_error = lambda request, address: None  # type: ignore[method-assign]  # a peer hanging up is no news
    timer = threading.Timer(life_s, server.shutdown)
    timer.daemon = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    timer.start()
    try:
        yield server.server_address[1]
    finally:
        timer.cancel()
        server.shutdown()
        server.server_close()
        thread.join(5)


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then closed: a connection there is refused)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
