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
    GET /api/status             {"state": "loading" | "ready" | "failed", "stage", "elapsed_s", "error"}

Every /api/ answer carries ``X-Generation``: the view's refresh count when it was computed, so
the page can tell arrays of one state of the store from arrays of the next.

The server can listen before its view exists: given a loader, it builds the view in a thread of
its own (opening a large store and projecting its points takes seconds). Meanwhile ``/`` is a
small page that says what is loading and reloads itself every second, and every other /api/
endpoint answers 503 with the status above (``Retry-After: 1``); a load that fails answers 500
with its error.
"""

from __future__ import annotations

import html
import json
import math
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from .data import StoreView

__all__ = ["InspectorServer", "parse_time", "Loader"]

# Builds the view in the server's loading thread; it reports what it is doing through its argument.
Loader = Callable[[Callable[[str], None]], StoreView]

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


def _waiting_page(status: dict[str, Any]) -> bytes:
    """The page while the view loads (it reloads itself every second: the script of the real
    page may run only once there is data) or after its load failed (it stays)."""
    if status["state"] == "failed":
        head, word, summary, css = "", "failed", "failed", ' class="error"'
        text, bar = f"error: {status['error']}", ""
    else:
        head, word, summary, css = '<meta http-equiv="refresh" content="1">\n', "loading", "loading…", ""
        text = f"{status['stage']}… ({status['elapsed_s']:.0f} s)"
        bar = '<progress id="loading-bar" max="1"></progress>'
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"{head}<title>poincare_index inspector ({word})</title>\n"
        '<link rel="stylesheet" href="/static/style.css">\n</head>\n<body>\n'
        f'<header><h1>poincare_index inspector</h1><span id="summary"{css}>{summary}</span></header>\n'
        '<main><section id="view"><canvas width="720" height="720"></canvas>\n'
        f'<div id="loading" role="status" aria-live="polite" data-state="{status["state"]}">'
        f'<span id="loading-text"{css}>{html.escape(text)}</span>{bar}</div>\n'
        "</section></main>\n</body>\n</html>\n"
    ).encode()


class _Handler(BaseHTTPRequestHandler):
    owner: InspectorServer  # set on the subclass made per server
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
        owner = self.owner
        try:
            if url.path == "/api/status":
                self._json(200, owner.status())
            elif url.path in ("/", "/index.html") and owner.view is None:
                status = owner.status()
                code = 500 if status["state"] == "failed" else 200
                self._send(code, _waiting_page(status), "text/html; charset=utf-8")
            elif url.path in ("/", "/index.html"):
                self._send(200, _static("index.html"), "text/html; charset=utf-8")
            elif url.path.startswith("/static/") and url.path[8:] in _STATIC:
                self._send(200, _static(url.path[8:]), _STATIC[url.path[8:]])
            elif url.path.startswith("/api/") and owner.view is None:
                status = owner.status()
                if status["state"] == "failed":
                    self._json(500, status)
                else:
                    self._json(503, status, {"Retry-After": "1"})
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

    @property
    def view(self) -> StoreView:
        view = self.owner.view
        assert view is not None  # do_GET answers /api/ from the view only once it is loaded
        return view

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
    ``connection_timeout``: seconds a connection may stay silent before it is closed.

    ``view`` may be a loader instead: a function that builds the StoreView, given a callback to
    report its stage ("opening the store at ..."). The server then listens at once and answers
    with a loading state (see the module docstring) while the loader runs in a thread of its
    own; :meth:`wait_ready` waits for it (and raises what it raised)."""

    def __init__(self, view: StoreView | Loader, port: int = 0, *, connection_timeout: float = 5.0) -> None:
        if not connection_timeout > 0:
            raise ValueError(f"connection_timeout must be > 0 seconds, got {connection_timeout!r}")
        if not isinstance(view, StoreView) and not callable(view):
            raise TypeError(f"view must be a StoreView or a loader function, got {type(view).__name__}")
        attrs = {"owner": self, "lock": threading.Lock(), "timeout": float(connection_timeout)}
        handler = type("Handler", (_Handler,), attrs)
        self._view: StoreView | None = view if isinstance(view, StoreView) else None
        self._loaded = threading.Event()
        self._error: BaseException | None = None
        self._stage = "ready"
        self._started = time.monotonic()
        self._load_s = 0.0
        self.httpd = InspectorHTTPServer(("127.0.0.1", port), handler)
        self._thread: threading.Thread | None = None
        if self._view is not None:
            self._loaded.set()
        else:
            # Started once the socket listens: a port in use is refused before any loading.
            self._stage = "loading"
            threading.Thread(
                target=self._load, args=(view,), name="poincare-inspector-load", daemon=True
            ).start()

    def _load(self, loader: Loader) -> None:
        def report(stage: str) -> None:
            self._stage = str(stage)

        try:
            view = loader(report)
            if not isinstance(view, StoreView):
                raise TypeError(f"the inspector's loader returned {type(view).__name__}, not a StoreView")
            self._view = view
            self._stage = "ready"
        except BaseException as exc:  # served to the page and raised by wait_ready
            self._error = exc
            self._stage = "failed"
        finally:
            self._load_s = time.monotonic() - self._started
            self._loaded.set()

    @property
    def view(self) -> StoreView | None:
        """The StoreView served (None while it loads, or when its load failed)."""
        return self._view

    def status(self) -> dict[str, Any]:
        """What /api/status answers: the state, the loader's stage, seconds spent loading (so
        far, or in all), and the load's error."""
        if self._view is not None:
            state = "ready"
        else:
            state = "failed" if self._error is not None else "loading"
        done = self._loaded.is_set()
        return {
            "state": state,
            "stage": self._stage,
            "elapsed_s": round(self._load_s if done else time.monotonic() - self._started, 3),
            "error": None if self._error is None else f"{type(self._error).__name__}: {self._error}",
        }

    def wait_ready(self, timeout: float | None = None) -> StoreView:
        """Waits for the view; raises the loader's exception if it failed, TimeoutError if it
        is still loading after ``timeout`` seconds."""
        if not self._loaded.wait(timeout):
            raise TimeoutError(f"the inspector is still loading after {timeout} s ({self._stage})")
        if self._error is not None:
            raise self._error
        assert self._view is not None
        return self._view

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
