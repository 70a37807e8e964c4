"""What quantized coordinates do to the Poincaré order (design data for compressed storage,
docs/compressed_storage.md): for each family member, rank every stored point by
``|q - code(x)|^2 a(x)`` (float16 or 8-bit codes of the coordinates; the factor a(x) from the
float32 coordinates, or, to compare, from the codes; with or without the code's own squared
error |x - code(x)|^2 subtracted), keep the ``ef`` best, re-rank those
exactly and report recall@10 and recall@1 against the exact float64 order. An exhaustive scan:
it isolates the order's error from the graph's; a walk on codes can only do worse.

    python benchmarks/run.py benchmarks/configs/code_order.toml
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import families  # noqa: E402
from bench_common import Params, machine, write_results  # noqa: E402

DEFAULTS: dict[str, Any] = {
    "families": ["gauss-s0.15", "uniform_ball", "tree-b4", "loguniform_depth"],
    "dims": [64, 256],
    "n": 4000,  # stored points per member
    "queries": 200,  # near and held-out queries each
    "efs": [16, 64],  # candidates kept before the exact re-rank
    "seed": 0,
    "out": os.path.join(HERE, "results", "code_order.json"),
}


@dataclass
class Results:
    machine: str
    params: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)


def codes(x: NDArray[np.float32]) -> dict[str, NDArray[np.float64]]:
    """The coordinates as each code decodes them: float16; 8 bits per dimension on the
    dimension's [min, max] (as FAISS's QT_8bit); and 8 bits per coordinate on the point's own
    [-max|x_i|, max|x_i|] (``sq8-point``: one float32 scale a point, what the index stores)."""
    lo, hi = x.min(axis=0), x.max(axis=0)
    step = np.where(hi > lo, (hi - lo) / 255.0, 1.0)
    sq8 = np.round((x - lo) / step).clip(0, 255) * step + lo
    scale = (np.abs(x).max(axis=1, keepdims=True) / 127.0).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(1.0))
    per_point = np.round(x / scale).clip(-127, 127) * scale.astype(np.float64)
    return {
        "f16": x.astype(np.float16).astype(np.float64),
        "sq8": sq8.astype(np.float64),
        "sq8-point": per_point,
    }


def factor(points: NDArray[np.float64]) -> NDArray[np.float64]:
    sq = np.sum(points * points, axis=1)
    return np.where(sq < 1.0, 1.0 / np.maximum(1.0 - sq, 1e-300), np.inf)


def sq_dists(q: NDArray[np.float64], x: NDArray[np.float64], chunk: int = 16) -> NDArray[np.float64]:
    """|q - x|^2 for every pair, by differences (no GEMM identity: near queries are close)."""
    return np.concatenate(
        [np.sum((q[i : i + chunk, None, :] - x[None, :, :]) ** 2, axis=2) for i in range(0, len(q), chunk)]
    )


def recalls(
    key: NDArray[np.float64], exact: NDArray[np.float64], truth: NDArray[np.int64], ef: int
) -> tuple[float, float]:
    cand = np.argsort(key, axis=1)[:, :ef]
    reranked = np.take_along_axis(cand, np.argsort(np.take_along_axis(exact, cand, 1), axis=1), 1)[:, :10]
    r10 = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(reranked, truth)]))
    return r10, float(np.mean(reranked[:, 0] == truth[:, 0]))


def run(args: Params) -> int:
    res = Results(machine(), {k: v for k, v in vars(args).items() if k != "out"})
    for name in args.families:
        for dim in args.dims:
            fam = families.make(name, args.n, args.queries, dim, seed=args.seed)
            x = fam.points.astype(np.float64)
            a32 = factor(x).astype(np.float32).astype(np.float64)  # what the index keeps
            for kind_q, q in (("near", fam.near), ("held-out", fam.held_out)):
                q = q.astype(np.float64)
                exact = sq_dists(q, x) * factor(x)[None, :]
                truth = np.argsort(exact, axis=1)[:, :10]
                for code, decoded in codes(fam.points).items():
                    d2 = sq_dists(q, decoded)
                    # The code's own squared error |x - code(x)|^2, known when x is coded: the
                    # mean of |q - code(x)|^2 - |q - x|^2 over the direction of the error.
                    bias = np.sum((x - decoded) ** 2, axis=1)
                    variants = (
                        ("float32", a32, False),
                        ("codes", factor(decoded), False),
                        ("float32", a32, True),
                    )
                    for source, a, unbiased in variants:
                        row = {
                            "member": name,
                            "dim": dim,
                            "queries": kind_q,
                            "code": code,
                            "factor_from": source,
                            "bias_subtracted": unbiased,
                        }
                        key = (d2 - bias[None, :] if unbiased else d2) * a[None, :]
                        for ef in args.efs:
                            row[f"recall@10_ef{ef}"], row[f"recall@1_ef{ef}"] = recalls(key, exact, truth, ef)
                        res.rows.append(row)
                        print(row, flush=True)
    write_results(args.out, res)
    return 0
