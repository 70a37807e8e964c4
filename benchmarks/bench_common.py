"""What the benchmarks share: the machine's description, timing, latency percentiles, recall and
the results file (a dataclass written as JSON)."""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict
from typing import Any

import numpy as np


def machine() -> str:
    return f"{platform.machine()} {platform.processor()} {os.cpu_count()} cpus"


def percentiles_ms(samples: list[float]) -> dict[str, float]:
    """p50, p99 and max of durations in seconds, in milliseconds."""
    a = np.asarray(samples) * 1e3
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "max": float(a.max())}


def write_results(path: str, results: Any) -> None:
    """``results`` (a dataclass instance) as indented JSON at ``path``, its directory created."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(asdict(results), f, indent=2)


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean over queries of |found & truth| / k (padding ids -1 never count)."""
    rows = zip(found.tolist(), truth.tolist())
    return float(np.mean([len((set(f) & set(t)) - {-1}) / len(t) for f, t in rows]))


def best_of(repeats: int, fn: Any, *args: Any) -> tuple[float, Any]:
    """(the fastest of ``repeats`` calls in seconds, the last call's result)."""
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn(*args)
        times.append(time.perf_counter() - t0)
    return min(times), result
