"""What the benchmarks share: the machine's description, timing, latency percentiles, recall and
the results file (a dataclass written as JSON)."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import platform
import time
from dataclasses import asdict
from types import SimpleNamespace
from typing import Any

import numpy as np

# A suite's parameters: its DEFAULTS overridden by a configuration's values (see run.py).
Params = SimpleNamespace


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


def hardware_info() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine()}
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
        models = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")]
        flags = next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), [])
        info["cpu_model"] = models[0] if models else "unknown"
        info["logical_cpus"] = len(models)
        info["simd"] = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl") if f in flags]
    except OSError:
        info["cpu_model"] = platform.processor() or "unknown"
    info["nproc"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    try:
        with open("/proc/meminfo") as f:
            mem = next(ln for ln in f if ln.startswith("MemTotal"))
        info["mem_total_kib"] = int(mem.split()[1])
    except (OSError, StopIteration):
        pass
    return info


def versions() -> dict[str, str]:
    import poincare_index as pi

    def dist_version(name: str) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(name)
        except PackageNotFoundError:
            return "unknown"

    import hashlib

    core_path = pi._core.__file__
    with open(core_path, "rb") as f:
        core_sha = hashlib.sha256(f.read()).hexdigest()[:16]
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "poincare_index": pi.__version__,
        # The exact build benchmarked: the package may be rebuilt between runs.
        "poincare_index_core_sha256": core_sha,
        "poincare_index_core_mtime": time.strftime(
            "%Y-%m-%dT%H:%M:%S", time.localtime(os.path.getmtime(core_path))
        ),
        "poincare_index_kernel": pi.kernel_name(),
        "faiss": dist_version("faiss-cpu"),
        "hnswlib": dist_version("hnswlib"),
        "ngt": dist_version("ngt"),
    }


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL("libc.so.6")
except OSError:  # pragma: no cover - not glibc
    _LIBC = None


def rss_bytes() -> int:
    """Resident set size of this process, after returning freed heap memory to the OS."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:  # pragma: no cover - not Linux
        return 0
