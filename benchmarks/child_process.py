"""Run one benchmark function in a fresh Python process (its own heap, so an RSS delta or a peak
is that function's alone): ``call_in_child("bench_footprint", "measure", dim=16, ...)`` runs
``python benchmarks/run.py --child bench_footprint.measure '{"dim": 16, ...}'``, which prints
the function's JSON-encodable return value as its last line of output."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from typing import Any

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run.py")


def call_in_child(module: str, function: str, env: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """``module.function(**kwargs)`` in a child process; its return value (through JSON)."""
    cmd = [sys.executable, RUNNER, "--child", f"{module}.{function}", json.dumps(kwargs)]
    # Through a small intermediate Python: Linux keeps a process's peak RSS (ru_maxrss) across
    # exec and counts the spawning process's memory in it, so a child spawned straight from a
    # large runner would start with the runner's peak. The grandchild's peak is its own.
    cmd = [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{module}.{function}({kwargs}) failed in its child process:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_main(target: str, kwargs_json: str) -> int:
    """The child's side: import ``module``, call ``function`` and print its result as JSON."""
    module, _, function = target.rpartition(".")
    result = getattr(importlib.import_module(module), function)(**json.loads(kwargs_json))
    print(json.dumps(result), flush=True)
    return 0
