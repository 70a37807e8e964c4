"""Inspector latency under concurrent clients: p50/p99/max of requests from ``--clients``
threads, each opening a new connection per request (as a page's parallel fetches do), over a
mix of the page's endpoints on a Memory of ``--n`` memories.

    python benchmarks/bench_inspector.py [--n 2000] [--clients 20] [--requests 50]
    python benchmarks/bench_inspector.py --backlog 5    # the listen queue before step 6

A request that waits ~1 s (and ~3 s) is a connection the kernel dropped from a full listen
queue and the client's TCP stack retried: the figure ``over_900ms`` counts them.

Page load in headless Debian chromium (selenium; needs chromium and chromium-driver), ``--loads``
reloads of the page, each figure in ms after navigation:

    python benchmarks/bench_inspector.py --page --n 200000 [--loads 5]

``first_paint_ms``: the browser's first contentful paint (the loading indicator, once there is one);
``first_points_ms``: the first points are drawn; ``full_ms``: every point drawn with its time
weight and the page answers clicks; ``slider_ms``: five slider moves (weights at the new time
fetched and every point redrawn). A page without the step-12 marks (before it) draws
everything at once: its ``inspectorReady`` stands for both point figures.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params  # noqa: E402
from knn_report import write_result  # noqa: E402

from poincare_index.inspector import serve  # noqa: E402
from poincare_index.inspector import server as inspector_server  # noqa: E402
from poincare_memory import HalfLife, Memory  # noqa: E402


@dataclass
class Results:
    n: int
    clients: int
    requests_per_client: int
    backlog: int
    machine: str
    requests: int = 0
    errors: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)
    over_900ms: int = 0
    wall_s: float = 0.0


@dataclass
class PageResults:
    n: int
    loads: int
    machine: str
    browser: str = ""
    first_paint_ms: list[float] = field(default_factory=list)
    first_points_ms: list[float] = field(default_factory=list)
    full_ms: list[float] = field(default_factory=list)
    slider_ms: list[float] = field(default_factory=list)
    median_ms: dict[str, float] = field(default_factory=dict)
    bytes_per_load: int = 0


def build_memory(n: int) -> Memory:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    mem = Memory(decay=HalfLife(hours=24 * 14))
    words = "deploy rollback alert cache queue index shard replica backup restore".split()
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=4)) + f" item {i}" for i in range(n)]
    mem.add_many(texts, [f"m{i}" for i in range(n)], t=[t0 + timedelta(minutes=i) for i in range(n)])
    return mem


def page_load(url: str, n: int, loads: int) -> PageResults:
    """Loads the page ``loads`` times (after one warm-up load) and reads its timing marks."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)
    res = PageResults(
        n=n, loads=loads, machine=machine(), browser=driver.capabilities.get("browserVersion", "")
    )
    marks = (
        "const fcp = performance.getEntriesByName('first-contentful-paint')[0];"
        "const m = window.inspectorTimings || {};"
        "const bytes = performance.getEntriesByType('resource').reduce((a, e) => a + e.transferSize, 0);"
        "return [fcp ? fcp.startTime : null, m.firstPoints ?? window.inspectorReady,"
        " m.full ?? window.inspectorReady, bytes];"
    )
    try:
        for i in range(loads + 1):
            driver.get(url)
            end = time.time() + 120
            while not driver.execute_script("return document.body.dataset.ready === '1'"):
                if time.time() > end:
                    raise RuntimeError("the page did not become ready in 120 s")
                time.sleep(0.01)
            fcp, first, full, nbytes = driver.execute_script(marks)
            if i == 0:
                continue  # warm-up: the first load also compiles the script and fills the OS caches
            res.first_paint_ms.append(round(fcp, 1))
            res.first_points_ms.append(round(first, 1))
            res.full_ms.append(round(full, 1))
            res.bytes_per_load = int(nbytes)
        for k, days in enumerate((120, 90, 60, 30, 0), start=1):  # weights at another time, redrawn
            at = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=n) - timedelta(days=days)
            driver.execute_script(f"window.inspector.setTime({json.dumps(at.isoformat())})")
            while driver.execute_script("return document.body.dataset.updates") != str(k):
                time.sleep(0.005)
        res.slider_ms = [round(t, 1) for t in driver.execute_script("return window.sliderTimings")]
    finally:
        driver.quit()
    for name in ("first_paint_ms", "first_points_ms", "full_ms", "slider_ms"):
        res.median_ms[name] = round(float(np.median(getattr(res, name))), 1)
    return res


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 2000,  # memories in the store
    "clients": 20,
    "requests": 50,  # requests per client
    "backlog": None,  # listen queue length (default: the server's)
    "page": False,  # page load times in headless chromium instead
    "loads": 5,  # page loads measured (--page)
    "out": None,
}


def run(args: Params) -> int:
    if args.backlog is not None:
        inspector_server.InspectorHTTPServer.request_queue_size = args.backlog
    backlog = inspector_server.InspectorHTTPServer.request_queue_size

    mem = build_memory(args.n)
    if args.page:
        server = serve(mem)
        server.wait_ready()  # serve() returns while the store is still being read
        try:
            page = page_load(server.url, args.n, args.loads)
        finally:
            server.close()
        print(json.dumps(asdict(page), indent=1))
        if args.out:
            write_result(args.out, page)
        return
    server = serve(mem)
    server.wait_ready()  # until then /api/* answers 503, which this run would count as errors
    host, port = server.httpd.server_address[:2]
    paths = ["/", "/static/app.js", "/api/meta", "/api/search?q=deploy+cache&k=10", "/api/point?id=m7",
             "/api/weights?at=2026-02-01T00:00:00Z", "/api/points"]  # fmt: skip
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    barrier = threading.Barrier(args.clients)

    def client(seed: int) -> None:
        local, bad = [], 0
        r = np.random.default_rng(seed)
        barrier.wait()
        for _ in range(args.requests):
            path = paths[int(r.integers(len(paths)))]
            start = time.perf_counter()
            try:
                conn = http.client.HTTPConnection(host, port, timeout=30)
                conn.request("GET", path)
                resp = conn.getresponse()
                resp.read()
                bad += resp.status != 200
                conn.close()
            except OSError:
                bad += 1
            local.append(time.perf_counter() - start)
        with lock:
            latencies.extend(local)
            errors[0] += bad

    wall = time.perf_counter()
    threads = [threading.Thread(target=client, args=(s,)) for s in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - wall
    server.close()
    ms = np.array(latencies) * 1e3
    res = Results(
        n=args.n, clients=args.clients, requests_per_client=args.requests, backlog=backlog,
        machine=machine(),
        requests=len(latencies), errors=errors[0],
        latency_ms={q: round(float(np.percentile(ms, v)), 2) for q, v in (("p50", 50), ("p90", 90),
                    ("p99", 99), ("max", 100))},
        over_900ms=int((ms > 900).sum()), wall_s=round(wall, 2),
    )  # fmt: skip
    print(json.dumps(asdict(res), indent=1))
    if args.out:
        write_result(args.out, res)
