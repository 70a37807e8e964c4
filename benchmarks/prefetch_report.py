#!/usr/bin/env python
"""Per-N tables of a families run that includes ``prefetch-rescore`` (configs/prefetch_rescore.toml),
as Markdown for BENCHMARKS.md. For each member and dimension, each prefetch N at Qdrant's default
beam (ef = max(N, 100)): held-out recall@10, QPS, the recipe's ceiling (exact L2 top-N), and ours
at the smallest swept ef whose recall@10 is at least as high, with its QPS and the ratio. Then
ours at its default ef_search, and the held-out QPS at recall@10 ``--target`` of each contender
(interpolated on its QPS/recall frontier, as bench_families' summary) with ours over the recipe.

    python benchmarks/prefetch_report.py benchmarks/results/prefetch_rescore_100k.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from bench_families import qps_at_recall  # noqa: E402
from prefetch_rescore import QDRANT_EF_FLOOR  # noqa: E402

OURS_DEFAULT_EF = 64  # PoincareIndex's fixed ef_search default before the recall target (step 17)


def held(point: dict[str, Any]) -> tuple[float, float]:
    return point["held_out"]["recall_at_10"], point["held_out"]["qps"]


def ours_matching(ours: dict[str, Any], target: float) -> tuple[Any, float, float] | None:
    """Ours' cheapest swept ef with held-out recall@10 >= ``target``: (ef, recall, QPS)."""
    reached = [(c["ef"], *held(c)) for c in ours["curve"] if held(c)[0] >= target]
    return min(reached, key=lambda r: r[0]) if reached else None


def fmt_qps(q: float | None) -> str:
    return "-" if q is None else f"{q:,.0f}"


def member_lines(rows: dict[str, dict[str, Any]], target: float) -> list[str]:
    pre, ours = rows["prefetch-rescore"], rows.get("ours")
    ceiling = pre["diagnostics"].get("exact_l2_prefetch_recall", {})
    lines = [
        f"**{pre['member']} {pre['dim']}-d** (n = {pre['n']:,})",
        "",
        "| N | ef | recall@10 | QPS | exact-L2 ceiling "
        "| ours ef | ours recall@10 | ours QPS | ours / recipe |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in pre["curve"]:
        n_cand, ef = c["ef"]
        if ef != max(n_cand, QDRANT_EF_FLOOR):
            continue  # the other beams are in the JSON; the table follows Qdrant's default
        r, q = held(c)
        match = ours_matching(ours, r) if ours else None
        ours_cols = "- | - | - | -"
        if match:
            ours_cols = f"{match[0]} | {match[1]:.3f} | {match[2]:,.0f} | {match[2] / q:.1f}x"
        top = ceiling.get(str(n_cand), float("nan"))
        lines.append(f"| {n_cand} | {ef} | {r:.3f} | {q:,.0f} | {top:.3f} | {ours_cols} |")
    if ours:  # ef_search's default, one of the swept efs
        default = next((c for c in ours["curve"] if c["ef"] == OURS_DEFAULT_EF), None)
        if default:
            r, q = held(default)
            lines.append("")
            what = f"ours at its default (ef_search {OURS_DEFAULT_EF})"
            lines.append(f"{what}: recall@10 {r:.3f}, {q:,.0f} QPS.")
    qps = {name: qps_at_recall(row, target) for name, row in rows.items()}
    parts = [f"{name} {fmt_qps(q)}" for name, q in qps.items()]
    ratio = ""
    if qps.get("ours") and qps.get("prefetch-rescore"):
        ratio = f"; ours / recipe {qps['ours'] / qps['prefetch-rescore']:.1f}x"
    lines.append(f"QPS at held-out recall@10 {target}: " + ", ".join(parts) + ratio + ".")
    return lines + [""]


def report(path: str, target: float) -> str:
    with open(path) as f:
        result = json.load(f)
    groups: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for row in result["rows"]:
        groups.setdefault((row["member"], row["dim"]), {})[row["contender"]] = row
    out = []
    for rows in groups.values():
        if "prefetch-rescore" in rows:
            out += member_lines(rows, target)
    if "hnswlib" in {c for rows in groups.values() for c in rows}:
        out.append("(plain hnswlib is scored against the exact L2 top 10, the task it solves.)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result", help="a families result JSON with prefetch-rescore rows")
    ap.add_argument("--target", type=float, default=0.95, help="recall@10 of the QPS comparison")
    args = ap.parse_args(argv)
    print(report(args.result, args.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
