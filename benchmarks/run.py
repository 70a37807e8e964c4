#!/usr/bin/env python
"""The one benchmark runner: a configuration names a suite and its parameters; the runner
resolves data sets and contenders from registry.py, runs every run of the configuration and
writes one JSON result file per run (with the hardware, versions, parameters and this command
under ``"run"``) and, beside it, the run's printed output as ``.log``.

    python benchmarks/run.py benchmarks/configs/knn_full.toml         # one configuration
    python benchmarks/run.py CONFIG --quick --out /tmp/q                # tiny sizes, a smoke test
    python benchmarks/run.py CONFIG --only knn_full4.json               # one run of the config
    python benchmarks/run.py --all                                      # every figure (hours)
    python benchmarks/run.py --all --quick                              # every config, tiny
    python benchmarks/run.py --list                                     # configs, suites, data

A configuration (TOML, in benchmarks/configs/):

    suite = "knn"                      # registry.SUITES
    hours = 3                          # rough duration of the full run on 2 cores
    quotes = "BENCHMARKS.md, Full run" # what it regenerates
    [params]                           # overrides of the suite's DEFAULTS, shared by every run
    datasets = ["hierarchy", "glove-boundary", "glove-095"]
    [quick]                            # overrides for --quick
    n = 2000
    [[runs]]                           # one result file per run; `out` is relative to --out
    out = "knn_full4.json"
    [grid]                             # or: the cartesian product of lists, out a template
    dims = [16, 64]                    # out = "footprint_{dims}d.json"

Without --out results go to benchmarks/results/ (--quick: a temporary directory). Run it as a
script (it puts benchmarks/ on sys.path), with the installed poincare_index.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import itertools
import json
import os
import sys
import tempfile
import time
import traceback
from typing import Any, Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

CONFIG_DIR = os.path.join(HERE, "configs")
RESULTS_DIR = os.path.join(HERE, "results")


def read_toml(path: str) -> dict[str, Any]:
    try:
        import tomllib  # Python >= 3.11
    except ModuleNotFoundError:  # pragma: no cover - Python 3.9 / 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise SystemExit("reading configurations needs Python >= 3.11 or `pip install tomli`") from None
    with open(path, "rb") as f:
        return tomllib.load(f)


def expand_runs(config: dict[str, Any], quick: bool) -> list[dict[str, Any]]:
    """The configuration's runs: each a dict of parameters (``out`` included)."""
    shared = dict(config.get("params", {}))
    runs = [dict(r) for r in config.get("runs", [])]
    grid = config.get("grid", {})
    if grid:
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            point = dict(zip(keys, values))
            runs.append({**point, "out": config["out"].format(**point)})
    if not runs:
        runs = [{"out": config.get("out")}]
    quick_overrides = config.get("quick", {}) if quick else {}
    return [{**shared, **run, **quick_overrides} for run in runs]


def suite_params(module: Any, given: dict[str, Any]) -> dict[str, Any]:
    """The suite's DEFAULTS overridden by ``given``; an unknown name is an error."""
    unknown = sorted(set(given) - set(module.DEFAULTS))
    if unknown:
        raise ValueError(f"{module.__name__} has no parameters {unknown}; it has {sorted(module.DEFAULTS)}")
    return {**module.DEFAULTS, **given}


class Tee(io.TextIOBase):
    """Writes to the terminal and to a log file."""

    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, s: str) -> int:
        for stream in self.streams:
            stream.write(s)
        return len(s)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


@contextlib.contextmanager
def logged(path: str | None) -> Iterator[None]:
    if path is None:
        yield
        return
    with open(path, "w") as log, contextlib.redirect_stdout(Tee(sys.stdout, log)):
        yield


def shutdown_ray() -> None:
    """Stop the Ray a suite started (a failed one leaves it running), so the next can start it."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def record_run(path: str | None, meta: dict[str, Any]) -> None:
    """Add ``meta`` under ``"run"`` to the result file the suite wrote (if it wrote one)."""
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        result = json.load(f)
    if isinstance(result, dict):
        result["run"] = meta
        with open(path, "w") as f:
            json.dump(result, f, indent=2, default=str)


def parse_settings(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs, each VALUE a TOML value (``n=5000``, ``families=["tree-b4"]``,
    ``switch="cover_rule=off"``; a bare word is taken as a string)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set takes KEY=VALUE, got {item!r}")
        try:
            out[key] = read_toml_text(f"v = {value}")["v"]
        except Exception:
            out[key] = value
    return out


def read_toml_text(text: str) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    return tomllib.loads(text)


def run_config(
    path: str, out_dir: str, quick: bool, only: str | None = None, settings: dict[str, Any] | None = None
) -> list[str]:
    """Run every run of the configuration at ``path`` (``settings`` override every run's
    parameters, for a one-off variant); the result files written."""
    import registry
    from bench_common import Params, hardware_info, versions

    config = read_toml(path)
    module = registry.suite(config["suite"])
    written = []
    for given in expand_runs(config, quick):
        given = {**given, **(settings or {})}
        out = given.get("out")
        if only is not None and out != only:
            continue
        target = os.path.join(out_dir, out) if out else None
        if "out" in module.DEFAULTS:
            given = {**given, "out": target}
        else:  # a suite that only prints: its log is the result
            given = {k: v for k, v in given.items() if k != "out"}
        params = suite_params(module, given)
        registry.check_datasets(params, getattr(module, "OWN_DATA", ()))
        log = os.path.splitext(target)[0] + ".log" if target else None
        os.makedirs(out_dir, exist_ok=True)
        print(f"== {os.path.relpath(path)} [{config['suite']}] -> {target or '(stdout)'}", flush=True)
        started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        t0 = time.perf_counter()
        try:
            with logged(log):
                module.run(Params(**params))
        finally:
            shutdown_ray()
        meta = {
            "config": os.path.relpath(path, HERE),
            "suite": config["suite"],
            "quick": quick,
            "command": [sys.executable, *sys.argv],
            "parameters": params,
            "started": started,
            "seconds": time.perf_counter() - t0,
            "hardware": hardware_info(),
            "versions": versions(),
            "loadavg": os.getloadavg(),
        }
        record_run(params.get("out"), meta)
        written.append(target)
    return written


def all_configs() -> list[str]:
    return sorted(glob.glob(os.path.join(CONFIG_DIR, "*.toml")))


def list_everything() -> None:
    import registry

    print("configurations (benchmarks/configs/):")
    for path in all_configs():
        c = read_toml(path)
        outs = [r.get("out") for r in expand_runs(c, quick=False)]
        print(f"  {os.path.basename(path):28s} {c['suite']:16s} ~{c.get('hours', '?')} h  {', '.join(outs)}")
    print("suites:")
    for name, (module, what) in registry.SUITES.items():
        print(f"  {name:16s} {module}.py: {what}")
    print("datasets:")
    for kind, entries in registry.DATASETS.items():
        print(f"  {kind:7s} {', '.join(entries)}")
    print("contenders:", ", ".join(registry.contenders()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="*", help="configuration files (TOML)")
    ap.add_argument("--all", action="store_true", help="every configuration in benchmarks/configs/")
    ap.add_argument("--quick", action="store_true", help="each configuration at its tiny [quick] sizes")
    ap.add_argument("--out", default=None, help="result directory (default: benchmarks/results/)")
    ap.add_argument("--only", default=None, help="only the run whose out is this file name")
    ap.add_argument("--list", action="store_true", help="list configurations, suites, data sets")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a parameter of every run (a TOML value), e.g. --set n=20000 --set out=x.json",
    )  # fmt: skip
    ap.add_argument("--child", nargs=2, metavar=("MODULE.FUNCTION", "JSON"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        from child_process import child_main

        return child_main(*args.child)
    if args.list:
        list_everything()
        return 0
    configs = all_configs() if args.all else args.configs
    if not configs:
        ap.error("give configuration files, --all or --list")
    out_dir = args.out or (tempfile.mkdtemp(prefix="bench_quick_") if args.quick else RESULTS_DIR)
    t0 = time.perf_counter()
    written, failed = [], []
    for path in configs:
        try:
            written += run_config(path, out_dir, args.quick, args.only, parse_settings(args.set))
        except Exception:  # one configuration failing must not stop the others
            traceback.print_exc()
            failed.append(os.path.basename(path))
    print(f"\n{len(written)} result files in {out_dir} ({time.perf_counter() - t0:.0f} s)")
    if failed:
        print(f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
