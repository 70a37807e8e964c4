"""`poincare-index` command line: `demo` (recall and speed on generated data) and `info`."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="poincare-index", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser(
        "demo",
        help="build an HNSW index on generated hierarchical data and "
        "print recall and speed against the exact index; then show time at work in a Memory",
    )
    demo.add_argument("--n", type=_positive, default=50_000, help="database points (default 50000)")
    demo.add_argument("--dim", type=_positive, default=32, help="dimension (default 32)")
    demo.add_argument("--queries", type=_positive, default=500, help="held-out queries (default 500)")
    demo.add_argument("--k", type=_positive, default=10, help="neighbours per query (default 10)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.add_argument("--threads", type=_positive, default=None, help="threads (default: all cores)")
    sub.add_parser("info", help="print the version and the SIMD kernels chosen for this CPU")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = args.command or "demo"
    if command == "info":
        import poincare_index

        print(f"poincare_index {poincare_index.__version__}, kernels: {poincare_index.kernel_name()}")
        return 0
    from .demo import run_demo, run_memory_demo

    if args.command is None:
        run_demo()
    else:
        run_demo(args.n, args.dim, args.queries, args.k, args.seed, args.threads)
    run_memory_demo()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
