"""`poincare-index` command line: `demo` (recall and speed on generated data), `info` (this build,
or what a saved index or store holds) and `inspect` (the local web page)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, NoReturn, Sequence

from . import __version__
from ._validation import MAX_THREADS


def _int_at_least(low: int, why: str = "", high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an int >= ``low`` (and <= ``high``), ``why`` said when it is not."""
    span = f">= {low}" if high is None else f"in {low}..{high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {span}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {span}{why}, got {value}")
        return value

    return parse


_positive = _int_at_least(1)
_port = _int_at_least(0, " (0: any free port)", 65535)
_threads = _int_at_least(1, "", MAX_THREADS)


class _Parser(argparse.ArgumentParser):
    """A bad argument is told in one line (and exit status 2), not under a usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="poincare-index", description=__doc__)
    parser.add_argument("--version", action="version", version=f"poincare_index {__version__}",
                        help="print the version of poincare_index and exit")  # fmt: skip
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser(
        "demo",
        help="build an HNSW index on generated hierarchical data and "
        "print recall and speed against the exact index; then show time at work in a Memory",
    )
    demo.add_argument("--n", type=_positive, default=50_000, help="database points (default 50000)")
    demo.add_argument("--dim", type=_int_at_least(2, " (the demo's generated hierarchy needs it)"),
                      default=32, help="dimension, >= 2 (default 32)")  # fmt: skip
    demo.add_argument("--queries", type=_positive, default=500, help="held-out queries (default 500)")
    demo.add_argument("--k", type=_positive, default=10, help="neighbours per query (default 10)")
    demo.add_argument("--seed", type=_int_at_least(0), default=0, help="random seed, >= 0 (default 0)")
    demo.add_argument("--threads", type=_threads, default=None, help="threads (default: all cores)")
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
    inspect.add_argument(
        "--port", type=_port, default=8765, help="port on 127.0.0.1, 0..65535 (default 8765; 0: any free one)"
    )
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
    from .inspector import InspectorServer, store_loader
    from .memory import StoreLockedError

    refused = (FileNotFoundError, IndexFormatError, StoreLockedError, ValueError, OSError)
    # What takes no time is checked before the URL is shown (a missing store, a namespace to
    # choose, a port in use); the store is opened and projected while the server already answers.
    try:
        loader = store_loader(args.path, args.namespace, args.allow_writes, args.half_life_hours)
        server = InspectorServer(loader, args.port).start()
    except refused as exc:
        print(f"poincare-index inspect: {exc}", file=sys.stderr)
        return 2
    print(f"inspector for {args.path} at {server.url} (127.0.0.1 only; Ctrl-C stops)", flush=True)
    if args.open:
        import webbrowser

        webbrowser.open(server.url)
    try:
        try:
            view = server.wait_ready()
        except refused as exc:
            print(f"poincare-index inspect: {exc}", file=sys.stderr)
            return 2
        what = "memories" if view.memory is not None else "points"
        print(f"loaded {len(view.ids):,} {what} in {server.status()['elapsed_s']:.1f} s", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        if server.view is not None and server.view.memory is not None:
            server.view.memory.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
