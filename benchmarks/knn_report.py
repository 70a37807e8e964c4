"""Plain-text tables of a bench_knn.py run (stdout) and its JSON encoding."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Any

import numpy as np


def _fmt(v: float | None, spec: str = ".2f") -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    return format(v, spec)


def _json_ready(obj: Any) -> Any:
    """Plain JSON: numpy scalars to Python, NaN / inf to null (strict parsers reject NaN)."""
    if isinstance(obj, dict):
        return {str(k): _json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_ready(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.ndarray):
        return _json_ready(obj.tolist())
    return obj


def write_result(path: str, result: Any) -> None:
    """Writes a results dataclass as strict JSON (NaN / inf as null) to ``path``."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(_json_ready(asdict(result)), f, indent=1, allow_nan=False)


def print_dataset(r: Any, threads: list[int], target: float, k: int) -> None:
    print(f"\n## {r.name}: {r.description}")
    print(f"database {r.n_database:,} x {r.dim}, {r.n_queries:,} queries, recall@{k}, target {target}")
    qcols = [f"QPS {t}thr" for t in threads]
    head = ["contender", "truth", "build s", f"ef@{target}", f"R@{k}", "R@1", "self@1", *qcols]
    head += [f"ef@all {target}", *[f"{c} @all" for c in qcols], "B/vec RSS", "B/vec est"]
    rows = []
    for c in r.contenders:
        if c.error:
            rows.append([c.name, c.truth, "-", "FAILED", c.error[:40], *["-"] * (len(head) - 5)])
            continue
        chosen = next((p for p in c.sweep if p.ef == c.target_ef), None) if c.target_reached else None
        chosen = chosen or max(c.sweep, key=lambda p: (p.recall, -(p.ef or 0)))
        if not c.sweep or c.sweep[0].ef is None:
            ef_col = "exact"
        elif c.target_reached:
            ef_col = str(c.target_ef)
        else:
            ef_col = f"never (best@{c.best_recall_ef})"
        rows.append(
            [
                c.name,
                c.truth,
                _fmt(c.build_seconds),
                ef_col,
                _fmt(c.target_recall, ".4f"),
                _fmt(chosen.recall_at_1, ".4f"),
                _fmt(chosen.self_recall_at_1, ".4f"),
                *[_fmt(c.target_qps.get(str(t)), ",.0f") for t in threads],
                "exact" if not c.sweep or c.sweep[0].ef is None else str(c.all_target_ef or "never"),
                *[_fmt(c.all_target_qps.get(str(t)), ",.0f") for t in threads],
                _fmt(c.rss_bytes_per_vector, ".0f"),
                _fmt(c.analytic_bytes_per_vector, ".0f"),
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for row in (head, ["-" * w for w in widths], *rows):
        print(
            "  ".join(
                str(x).ljust(w) if i < 2 else str(x).rjust(w) for i, (x, w) in enumerate(zip(row, widths))
            )
        )
    print(
        f"\nsweep (ef: recall@{k} / recall@1 / self@1 / QPS at " + ",".join(map(str, threads)) + " threads):"
    )
    for c in r.contenders:
        if not c.sweep or c.sweep[0].ef is None:
            continue
        pts = "  ".join(
            f"{p.ef}:{p.recall:.3f}/{p.recall_at_1:.3f}/{p.self_recall_at_1:.3f}/"
            + ",".join(_fmt(p.qps.get(str(t)), ".0f") for t in threads)
            for p in c.sweep
        )
        print(f"  {c.name:18s} {pts}")
    print("\ncomparisons (same run; QPS ratio > 1: ours faster; time / bytes ratio < 1: ours better):")
    for cmp in r.comparisons:
        print(f"  {cmp.name:62s} {_fmt(cmp.value, '.3f'):>8}   {cmp.detail}")
    notes = []
    for c in r.contenders:
        if any(not p.same_ids_across_threads for p in c.sweep):
            notes.append(f"{c.name}: results differ between thread counts")
        for m, v in c.sweep[-1].recall_extra.items() if c.sweep else []:
            notes.append(f"{c.name}: recall vs {m} truth at ef={c.sweep[-1].ef}: {v:.4f}")
        if c.diagnostics:
            notes.append(f"{c.name}: {json.dumps(c.diagnostics, sort_keys=True)}")
    if notes:
        print("\nchecks:")
        for line in notes:
            print(f"  {line}")
