"""A small local web server for the inspector: 127.0.0.1 only, the page and its script shipped in
the package (no CDN, no network), JSON endpoints answered by a StoreView.

    GET /                       the page
    GET /static/<file>          app.js, style.css
    GET /api/meta               counts, time range, decay, layouts (and the default), filterable fields
    GET /api/points?field=&value=&layout=   ids and disk coordinates (of the points matching a
                                filter) in a layout: "depth" (the projection, default) or "time"
    GET /api/points?format=f32&layout=      every point's x, y as little-endian float32 (binary)
    GET /api/ids                the ids of every point, in the order of the binary arrays
    GET /api/weights?at=ISO     log time weights of every point at that time (the policy in numpy)
    GET /api/weights?at=ISO&format=f32      the same as little-endian float32 (-inf included)
    GET /api/search?q=&at=&k=&field=&value=     ranked results with the score breakdown
    GET /api/point?id=          one point's fields

Every /api/ answer carries ``X-Generation``: the view's refresh count when it was computed, so
the page can tell arrays of one state of the store from arrays of the next.
"""

from __future__ import annotations

import json
import math
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlparse

from .data import StoreView

__all__ = ["InspectorServer", "parse_time"]

_STATIC = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
# Sent with every answer: the page runs only its own script and style, talks only to this
# server, cannot be framed, and no response is sniffed as another type.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def parse_time(text: str | None) -> datetime | None:
    """An ISO-8601 time from the page (the page sends UTC with "Z"; without an offset it is the
    local time of the server, the one rule for naive times, see poincare_index._time); None or
    empty = now."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _finite(obj: Any) -> Any:
    """JSON has no inf/NaN: they become null (the page shows them as "-inf")."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _static(name: str) -> bytes:
    return resources.files("poincare_index.inspector").joinpath("static", name).read_bytes()


def host_allowed(host_header: str | None, port: int) -> bool:
    """Whether a request's Host names this server by a loopback name and its port. A page from
    another site that rebinds its own name to 127.0.0.1 still sends that name, so it is refused
    (DNS rebinding); so are requests without a Host (HTTP/1.0 clients are not the browser page)."""
    if not host_header:
        return False
    host = host_header.strip().lower()
    return any(host == f"{name}:{port}" or (port == 80 and host == name) for name in LOOPBACK_NAMES)


class _Handler(BaseHTTPRequestHandler):
    view: StoreView  # set on the subclass made per server
    lock: threading.Lock
    # Seconds a connection may sit without sending its request (or reading the answer) before
    # its thread gives up: idle sockets cannot pile up server threads.
    timeout = 5.0

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Any, extra: dict[str, str] | None = None) -> None:
        body = json.dumps(_finite(obj), allow_nan=False, default=str).encode()
        self._send(status, body, "application/json", extra)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if not host_allowed(self.headers.get("Host"), self.server.server_address[1]):
            self._json(
                421, {"error": "this inspector answers only requests to 127.0.0.1, localhost or [::1]"}
            )
            return
        url = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            if url.path in ("/", "/index.html"):
                self._send(200, _static("index.html"), "text/html; charset=utf-8")
            elif url.path.startswith("/static/") and url.path[8:] in _STATIC:
                self._send(200, _static(url.path[8:]), _STATIC[url.path[8:]])
            elif url.path.startswith("/api/"):
                # One request at a time reads the view: a live Memory's changes swap its arrays.
                with self.lock:
                    self.view.sync()
                    status, body = self._api(url.path, q)
                    extra = {"X-Generation": str(self.view.generation)}
                if isinstance(body, bytes):
                    self._send(status, body, "application/octet-stream", extra)
                else:
                    self._json(status, body, extra)
            else:
                self._json(404, {"error": f"no such page: {url.path}"})
        except KeyError as exc:
            self._json(404, {"error": str(exc.args[0] if exc.args else exc)})
        except (ValueError, TypeError, OverflowError) as exc:
            self._json(400, {"error": str(exc)})
        except Exception as exc:  # never drop the connection without an answer
            self._json(500, {"error": f"{type(exc).__name__}: {exc}"})

    def _api(self, path: str, q: dict[str, str]) -> tuple[int, Any]:
        fmt = q.get("format", "json")
        if fmt not in ("json", "f32"):
            raise ValueError(f"unknown format {fmt!r} (json or f32)")
        binary = fmt == "f32"
        if path == "/api/meta":
            return 200, self.view.meta()
        if path == "/api/points" and binary:
            return 200, self.view.positions_f32(q.get("layout", "depth"))
        if path == "/api/points":
            return 200, self.view.points(q.get("field"), q.get("value"), q.get("layout", "depth"))
        if path == "/api/ids":
            return 200, {"ids": self.view.ids}
        if path == "/api/weights" and binary:
            return 200, self.view.weights_f32(parse_time(q.get("at")))
        if path == "/api/weights":
            return 200, self.view.weights(parse_time(q.get("at")))
        if path == "/api/search":
            k = max(1, min(int(q.get("k", "10")), 100))
            at = parse_time(q.get("at"))
            return 200, {"results": self.view.search(q.get("q", ""), at, k, q.get("field"), q.get("value"))}
        if path == "/api/point":
            return 200, self.view.point(q.get("id", ""))
        return 404, {"error": f"no such endpoint: {path}"}

    def do_POST(self) -> None:  # noqa: N802
        self._json(405, {"error": "the inspector is read-only"})


class InspectorHTTPServer(ThreadingHTTPServer):
    """A thread per connection. The listen queue holds 128 connections, not socketserver's 5:
    with a full queue the kernel drops a new connection and the client's TCP retries after
    1 s, then 3 s -- the ~1 s p99 of 20 concurrent clients (benchmarks/bench_inspector.py)."""

    request_queue_size = 128
    daemon_threads = True


class InspectorServer:
    """Serves one StoreView on 127.0.0.1:port (0: any free port) from a background thread.
    ``connection_timeout``: seconds a connection may stay silent before it is closed."""

    def __init__(self, view: StoreView, port: int = 0, *, connection_timeout: float = 5.0) -> None:
        if not connection_timeout > 0:
            raise ValueError(f"connection_timeout must be > 0 seconds, got {connection_timeout!r}")
        attrs = {"view": view, "lock": threading.Lock(), "timeout": float(connection_timeout)}
        handler = type("Handler", (_Handler,), attrs)
        self.view = view
        self.httpd = InspectorHTTPServer(("127.0.0.1", port), handler)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> InspectorServer:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="poincare-inspector", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> InspectorServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
