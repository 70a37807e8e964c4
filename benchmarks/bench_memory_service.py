"""MemoryService on a local Ray cluster against Memory in process: what a remote call adds to an
add and a search, and the throughput of several namespaces searched from several threads.

Per namespace the same memories (short generated notes, stamped a minute apart) go into an
in-process Memory and into a MemoryService namespace; then single adds and searches are timed
one at a time (p50 / p99), and searches from ``--threads`` driver threads over ``--namespaces``
namespaces spread on ``--hosts`` hosts (queries per second, all threads together).

    python benchmarks/bench_memory_service.py [--memories 2000] [--namespaces 4] [--hosts 2]
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params, machine, percentiles_ms, write_results  # noqa: E402

import poincare_index as pi  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WORDS = ("tea coffee peanuts hyperbolic index ray actor window seat sunday train flight paper "
         "review deadline garden piano chess python rust meeting budget travel").split()  # fmt: skip


@dataclass
class Results:
    machine: str
    memories: int
    namespaces: int
    hosts: int
    threads: int
    local: dict[str, Any] = field(default_factory=dict)
    service: dict[str, Any] = field(default_factory=dict)


def notes(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, 6)) for _ in range(n)]


def timed(fn: Any, calls: list[tuple[Any, ...]]) -> list[float]:
    out = []
    for args in calls:
        t0 = time.perf_counter()
        fn(*args)
        out.append(time.perf_counter() - t0)
    return out


def throughput(memories: list[Any], queries: list[str], threads: int, at: datetime) -> float:
    """Searches per second, ``threads`` threads each going round the namespaces."""
    per_thread = len(queries) // threads

    def work(t: int) -> None:
        for i in range(per_thread):
            memories[(t + i) % len(memories)].search(queries[i], k=5, at_time=at, touch=False)

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    t0 = time.perf_counter()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return per_thread * threads / (time.perf_counter() - t0)


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "memories": 2000,  # per namespace
    "namespaces": 4,
    "hosts": 2,
    "threads": 4,
    "calls": 300,
    "out": os.path.join(HERE, "results", "memory_service.json"),
}


def run(args: Params) -> int:
    import ray

    from poincare_index.distributed import MemoryService

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    res = Results(machine(), args.memories, args.namespaces, args.hosts, args.threads)
    decay = pi.HalfLife(hours=24)
    stamps = [T0 + timedelta(minutes=i) for i in range(args.memories)]
    at = stamps[-1] + timedelta(hours=1)
    queries = notes(args.calls, seed=99)
    extra = notes(args.calls, seed=7)
    with tempfile.TemporaryDirectory() as root:
        service = MemoryService(os.path.join(root, "svc"), hosts=args.hosts, decay=decay)
        local, remote = [], []
        for ns in range(args.namespaces):
            texts = notes(args.memories, seed=ns)
            mem = pi.Memory(decay=decay, path=os.path.join(root, "local"), namespace=f"user{ns}")
            mem.add_many(texts, t=stamps)
            rm = service.namespace(f"user{ns}")
            rm.add_many(texts, t=stamps)
            local.append(mem)
            remote.append(rm)
        for name, mems, out in (("local", local, res.local), ("service", remote, res.service)):
            first = mems[0]
            first.search(queries[0], k=5, at_time=at)  # warm: keyword engines, caches
            out["search_ms"] = percentiles_ms(
                timed(functools.partial(first.search, k=5, at_time=at, touch=False), [(q,) for q in queries])
            )
            out["add_ms"] = percentiles_ms(timed(functools.partial(first.add, t=at), [(x,) for x in extra]))
            out["search_qps_threads"] = throughput(mems, queries, args.threads, at)
            print(f"{name}: {out}", flush=True)
        for mem in local:
            mem.close()
        service.close()
    res.service["search_p50_added_ms"] = res.service["search_ms"]["p50"] - res.local["search_ms"]["p50"]
    res.service["add_p50_added_ms"] = res.service["add_ms"]["p50"] - res.local["add_ms"]["p50"]
    print(f"added by the remote call, p50: search {res.service['search_p50_added_ms']:.2f} ms, "
          f"add {res.service['add_p50_added_ms']:.2f} ms", flush=True)  # fmt: skip
    write_results(args.out, res)
    ray.shutdown()
    return 0
