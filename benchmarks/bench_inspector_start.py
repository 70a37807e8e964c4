"""Inspector start on a large store: how long until ``poincare-index inspect`` shows its URL, until
the server first answers, and until the store is ready (``/api/meta`` answers 200); and the
same for ``Memory.inspect()`` on a Memory already open. Prints one JSON document.

    python benchmarks/bench_inspector_start.py [--n 200000] [--store DIR] [--runs 5]
    python benchmarks/bench_inspector_start.py --cli "python /other/build/cli.py"   # another build's CLI

The store (``--n`` memories of generated text with the default hashing embedder, one a minute
from 2026-01-01, HalfLife(14 days)) is built at ``--store`` the first time (minutes at 200k on
2 cores) and reused after. Every CLI run is a fresh ``python -m poincare_index.cli inspect``
process, so the figures include the interpreter's start and the package's imports, as a user
sees them. ``first_answer_s`` is the first HTTP answer of any status to ``GET /api/meta``
(asked every 50 ms); a build that opened the store before listening answers only once it is
ready. The machine's load shows in every figure: compare builds run by turns on one machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np


def build_store(path: Path, n: int) -> float:
    """Writes the generated store at ``path``; returns the seconds it took."""
    from poincare_memory import HalfLife, Memory

    started = time.perf_counter()
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    words = "deploy rollback alert cache queue index shard replica backup restore".split()
    rng = np.random.default_rng(0)
    with Memory(decay=HalfLife(hours=24 * 14), path=path) as mem:
        for lo in range(0, n, 50_000):
            hi = min(n, lo + 50_000)
            texts = [" ".join(rng.choice(words, size=4)) + f" item {i}" for i in range(lo, hi)]
            mem.add_many(texts, [f"m{i}" for i in range(lo, hi)],
                         t=[t0 + timedelta(minutes=i) for i in range(lo, hi)])  # fmt: skip
    return time.perf_counter() - started


def _meta_status(host: str, port: int) -> int | None:
    """The status of ``GET /api/meta``, or None when nothing answers."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=60)
        conn.request("GET", "/api/meta")
        status = conn.getresponse().status
        conn.close()
        return status
    except OSError:
        return None


def _watch(host: str, port: int, started: float) -> dict[str, float]:
    """Seconds from ``started`` to the first answer and to a 200 from /api/meta."""
    first = None
    while True:
        status = _meta_status(host, port)
        now = time.perf_counter() - started
        if status is not None and first is None:
            first = now
        if status == 200:
            return {"first_answer_s": round(first or now, 3), "ready_s": round(now, 3)}
        time.sleep(0.05)


def cli_run(store: Path, cli: list[str]) -> dict[str, float]:
    started = time.perf_counter()
    proc = subprocess.Popen([*cli, "inspect", str(store), "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url_s = time.perf_counter() - started
        if " at http://" not in line:
            raise RuntimeError(f"no URL from the inspect command: {line!r}")
        host, port = line.split(" at http://")[1].split("/")[0].split(":")
        return {"url_s": round(url_s, 3), **_watch(host, int(port), started)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def memory_inspect_run(store: Path) -> dict[str, float]:
    from poincare_memory import Memory

    opened = time.perf_counter()
    with Memory(path=store, read_only=True) as mem:
        open_s = time.perf_counter() - opened
        started = time.perf_counter()
        server = mem.inspect()
        returned_s = time.perf_counter() - started
        host, port = server.httpd.server_address[:2]
        try:
            return {"memory_open_s": round(open_s, 3), "inspect_returned_s": round(returned_s, 3),
                    **_watch(host, port, started)}  # fmt: skip
        finally:
            server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000, help="memories in the store (default 200000)")
    parser.add_argument(
        "--store", type=Path, default=None, help="the store, built there once (default: in the temp dir)"
    )
    parser.add_argument("--runs", type=int, default=5, help="runs of each measurement (default 5)")
    parser.add_argument(
        "--cli", default=f"{sys.executable} -m poincare_index.cli", help="the command line to time"
    )
    args = parser.parse_args(argv)
    store = args.store or Path(tempfile.gettempdir()) / f"poincare_inspector_start_{args.n}"
    built_s = None
    if not (store / "default").is_dir():
        built_s = round(build_store(store, args.n), 1)
    cli = [cli_run(store, shlex.split(args.cli)) for _ in range(args.runs)]
    inspect = [memory_inspect_run(store) for _ in range(args.runs)]

    def median(runs: list[dict[str, float]]) -> dict[str, float]:
        return {key: round(float(np.median([r[key] for r in runs])), 3) for key in runs[0]}

    out: dict[str, Any] = {
        "n": args.n,
        "store": str(store),
        "store_built_s": built_s,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "cli": {"median": median(cli), "runs": cli},
        "memory_inspect": {"median": median(inspect), "runs": inspect},
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
