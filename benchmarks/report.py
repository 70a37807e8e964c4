"""Render a bench_knn.py JSON result as the Markdown tables of BENCHMARKS.md.

python benchmarks/report.py benchmarks/results/knn_full.json > /tmp/tables.md
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def _qps(c: dict[str, Any]) -> str:
    q = c.get("target_qps") or {}
    return " / ".join(f"{q[t]:,.0f}" if t in q else "-" for t in ("1", "2"))


def render(result: dict[str, Any]) -> str:
    out = []
    for ds in result["datasets"]:
        out.append(f"### {ds['name']}: {ds['description']}\n")
        out.append(f"{ds['n_database']:,} points x {ds['dim']}-d, {ds['n_queries']:,} queries.\n")
        out.append(
            "| contender | truth | build s | ef at target | recall@10 | QPS 1 thr / 2 thr "
            "| B/vector RSS (layout) |"
        )
        out.append("|---|---|---|---|---|---|---|")
        for c in ds["contenders"]:
            if c["target_reached"]:
                ef = "exact" if c["target_ef"] is None else str(c["target_ef"])
                recall = f"{c['target_recall']:.4f}"
                qps = _qps(c)
            elif c["best_recall_ef"] is None:
                ef = "exact, misses target"
                recall = f"{c['best_recall']:.4f}"
                qps = "-"
            else:
                ef = f"never (best at ef={c['best_recall_ef']})"
                recall = f"{c['best_recall']:.4f}"
                qps = "-"
            out.append(
                f"| {c['name']} | {c['truth']} | {c['build_seconds']:.2f} | {ef} | {recall} | {qps} | "
                f"{c['rss_bytes_per_vector']:.0f} ({c['analytic_bytes_per_vector']:.0f}) |"
            )
        out.append("\n| comparison (same run) | ratio | detail |")
        out.append("|---|---|---|")
        for cmp in ds["comparisons"]:
            value = "-" if cmp["value"] is None else f"{cmp['value']:.3f}"
            out.append(f"| {cmp['name']} | {value} | {cmp['detail']} |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("json_path")
    args = parser.parse_args()
    with open(args.json_path, encoding="utf-8") as fh:
        print(render(json.load(fh)))


if __name__ == "__main__":
    main()
