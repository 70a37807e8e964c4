"""Readers follow a writer: the time from a writer's acknowledged add to its visibility in reader
processes.

A store of ``--n`` memories is written, then ``--readers`` processes open it read_only and the
writer (this process) adds ``--writes`` memories, one every ``--interval-ms``, noting the
CLOCK_MONOTONIC time each add returned (acknowledged). Each reader polls for the next id with
``get`` (which takes in the writer's changes first, Memory.refresh) every ``--poll-ms`` and notes
when it first sees it. Visibility latency = seen - acknowledged, per id and reader; p50, p99 and
max are reported, with ``--checkpoint-every`` small enough to make readers switch snapshots
during the run when asked.

    python benchmarks/bench_readers.py [--n 20000] [--writes 1000] [--checkpoint-every 20000]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params, machine, percentiles_ms, write_results  # noqa: E402
from text_data import generated_items  # noqa: E402

from poincare_memory import Memory  # noqa: E402

READER = """
import json, sys, time
from poincare_memory import Memory
path, writes, poll = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
mem = Memory(path=path, read_only=True, num_threads=1)
print("ready", flush=True)
seen = []
for i in range(writes):
    while mem.get(f"w{i}") is None:
        time.sleep(poll)
    seen.append(time.monotonic())
print(json.dumps(seen), flush=True)
"""


@dataclass
class Results:
    n: int
    writes: int
    readers: int
    interval_ms: float
    poll_ms: float
    checkpoint_every: int
    machine: str
    checkpoints_during_run: int = 0
    visibility_ms: dict[str, dict[str, float]] = field(default_factory=dict)


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 20_000,
    "writes": 1000,
    "readers": 2,
    "interval_ms": 5.0,
    "poll_ms": 0.5,
    "checkpoint_every": 20_000,
    "out": os.path.join(HERE, "results", "readers.json"),
}


def run(args: Params) -> int:
    res = Results(
        args.n, args.writes, args.readers, args.interval_ms, args.poll_ms, args.checkpoint_every, machine()
    )
    items = generated_items(args.n + args.writes, 0, None)
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        with Memory(path=store) as mem:
            mem.add_many(items.texts[: args.n], [f"m{i}" for i in range(args.n)], t=items.t[: args.n])
        readers = [
            subprocess.Popen(
                [sys.executable, "-c", READER, store, str(args.writes), str(args.poll_ms / 1e3)],
                cwd=tmp,
                stdout=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for _ in range(args.readers)
        ]
        for r in readers:
            assert r.stdout is not None and r.stdout.readline().strip() == "ready"
        writer = Memory(path=store, checkpoint_every=args.checkpoint_every, num_threads=1)
        acked: list[float] = []
        snapshots_before = writer._journal.snapshot
        checkpoints = 0
        for i in range(args.writes):
            writer.add(items.texts[args.n + i], id=f"w{i}", t=items.t[args.n + i])
            acked.append(time.monotonic())
            if writer._ns.current()[0] != snapshots_before:
                checkpoints += 1
                snapshots_before = writer._ns.current()[0]
            time.sleep(args.interval_ms / 1e3)
        res.checkpoints_during_run = checkpoints
        outs: list[Any] = []
        for r in readers:
            out, _ = r.communicate(timeout=600)
            outs.append(json.loads(out.strip().splitlines()[-1]))
        writer.close()
    for j, seen in enumerate(outs):
        lat = (np.asarray(seen) - np.asarray(acked)).tolist()
        res.visibility_ms[f"reader {j + 1}"] = percentiles_ms(lat)
        v = res.visibility_ms[f"reader {j + 1}"]
        print(
            f"reader {j + 1}: visible after p50 {v['p50']:.2f} ms, p99 {v['p99']:.2f} ms, "
            f"max {v['max']:.1f} ms"
        )
    print(
        f"({args.writes} writes, one per {args.interval_ms} ms, on {args.n:,} memories; "
        f"{checkpoints} checkpoints)"
    )
    write_results(args.out, res)
    return 0
