"""`poincare-index` command line: `demo` (recall and speed on generated data), `info` (this build,
or what a saved index or store holds) and `inspect` (the local web page)."""

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
    info = sub.add_parser(
        "info",
        help="describe a saved index or memory store (kind, size, dimension, time range, namespaces, "
        "configuration, versions); without PATH: the version and the SIMD kernels of this CPU",
    )
    info.add_argument("path", nargs="?", default=None, help="a saved index or memory store directory")
    info.add_argument("--json", action="store_true", help="print the description as JSON")
    inspect = sub.add_parser(
        "inspect", help="serve a local web page showing a memory store or saved index in the Poincaré disk"
    )
    inspect.add_argument("path", help="a Memory store directory (or one namespace in it) or a saved index")
    inspect.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (default 8765; 0: any)")
    inspect.add_argument("--namespace", default=None, help="the namespace, when the store has several")
    inspect.add_argument(
        "--allow-writes", action="store_true", help="open for writing so that searches count accesses"
    )
    inspect.add_argument(
        "--half-life-hours", type=float, default=None, help="saved indexes: weigh points by this half-life"
    )
    inspect.add_argument("--open", action="store_true", help="open the page in the default browser")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare command explains itself; the demo is `poincare-index demo`
        parser.print_help()
        return 0
    if args.command == "info":
        return _info(args)
    if args.command == "inspect":
        return _inspect(args)
    from .demo import run_demo, run_hierarchy_demo, run_memory_demo

    run_demo(args.n, args.dim, args.queries, args.k, args.seed, args.threads)
    run_memory_demo()
    run_hierarchy_demo()
    return 0


def _info(args: argparse.Namespace) -> int:
    import json

    import poincare_index

    if args.path is None:
        print(f"poincare_index {poincare_index.__version__}, kernels: {poincare_index.kernel_name()}")
        return 0
    from ._core import IndexFormatError
    from .describe import describe

    try:
        doc = describe(args.path)
    except (FileNotFoundError, IndexFormatError, OSError) as exc:
        print(f"poincare-index info: {exc}", file=sys.stderr)
        return 2
    doc["poincare_index"] = poincare_index.__version__
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        _print_tree(doc)
    return 0


def _print_tree(doc: object, indent: str = "") -> None:
    items = doc.items() if isinstance(doc, dict) else enumerate(doc)  # type: ignore[union-attr]
    for key, value in items:
        if isinstance(value, (dict, list)) and value:
            print(f"{indent}{key}:")
            _print_tree(value, indent + "  ")
        else:
            print(f"{indent}{key}: {value}")


def _inspect(args: argparse.Namespace) -> int:
    from ._core import IndexFormatError
    from .inspector import InspectorServer, open_store
    from .memory import StoreLockedError

    try:
        view = open_store(args.path, args.namespace, args.allow_writes, args.half_life_hours)
        server = InspectorServer(view, args.port)
    except (FileNotFoundError, IndexFormatError, StoreLockedError, ValueError, OSError) as exc:
        print(f"poincare-index inspect: {exc}", file=sys.stderr)
        return 2
    print(f"inspector for {args.path} at {server.url} (127.0.0.1 only; Ctrl-C stops)", flush=True)
    if args.open:
        import webbrowser

        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
