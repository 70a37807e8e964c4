"""Inspector latency under concurrent clients: p50/p99/max of requests from ``--clients``
threads, each opening a new connection per request (as a page's parallel fetches do), over a
mix of the page's endpoints on a Memory of ``--n`` memories.

    python benchmarks/bench_inspector.py [--n 2000] [--clients 20] [--requests 50]
    python benchmarks/bench_inspector.py --backlog 5    # the listen queue before step 6

A request that waits ~1 s (and ~3 s) is a connection the kernel dropped from a full listen
queue and the client's TCP stack retried: the figure ``over_900ms`` counts them.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=2000, help="memories in the store")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--requests", type=int, default=50, help="requests per client")
    p.add_argument("--backlog", type=int, default=None, help="listen queue length (default: the server's)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if args.backlog is not None:
        inspector_server.InspectorHTTPServer.request_queue_size = args.backlog
    backlog = inspector_server.InspectorHTTPServer.request_queue_size

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    mem = Memory(decay=HalfLife(hours=24 * 14))
    words = "deploy rollback alert cache queue index shard replica backup restore".split()
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=4)) + f" item {i}" for i in range(args.n)]
    mem.add_many(
        texts, [f"m{i}" for i in range(args.n)], t=[t0 + timedelta(minutes=i) for i in range(args.n)]
    )
    server = serve(mem)
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
        machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        requests=len(latencies), errors=errors[0],
        latency_ms={q: round(float(np.percentile(ms, v)), 2) for q, v in (("p50", 50), ("p90", 90),
                    ("p99", 99), ("max", 100))},
        over_900ms=int((ms > 900).sum()), wall_s=round(wall, 2),
    )  # fmt: skip
    print(json.dumps(asdict(res), indent=1))
    if args.json:
        write_result(args.json, res)


if __name__ == "__main__":
    main()
