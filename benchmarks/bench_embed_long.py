"""One very long token through a Memory: peak RSS and time of ``Memory().add`` of a text that is a
single word (``"x" * n``, random hex, random ACGT) and of the keyword index over it, each kind
in a fresh child process (so the peak, ``ru_maxrss``, is that text's alone).

Per kind and size, the child: imports (``rss_import_*``), makes the text (``rss_text_*``),
``Memory().add`` (the embedder and the store), a keyword search with the text as the query
(builds the BM25 main over it), a second text of the same kind added (into the keyword delta)
and searched for, and a vector search with the long text as the query. After each step: its
seconds, the process's peak RSS so far and its current RSS, in MB. ``max_gb`` caps the child's
address space (RLIMIT_AS), so a build that blows up fails with MemoryError instead of taking
the machine down.

    python benchmarks/bench_embed_long.py [--sizes 50000000] [--kinds x hex acgt] [--max-gb 4]

Prints one JSON document (and writes it to ``--out`` when given).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from typing import Any

KINDS = ("x", "hex", "acgt", "emoji", "punct")


def make_text(kind: str, n: int, seed: int) -> str:
    """``n`` characters of one kind, one word (x, hex, acgt) or one run of symbols (emoji, punct)."""
    import numpy as np

    if kind == "x":  # "x" * n, or "y" * n for an odd seed (a second text, not the first again)
        return ("y" if seed % 2 else "x") * n
    alphabet = {
        "hex": "0123456789abcdef", "acgt": "ACGT", "emoji": "🔥🎉👍😀🚀", "punct": "!?.,;:-",
    }[kind]  # fmt: skip
    codes = np.random.default_rng(seed).integers(0, len(alphabet), size=n, dtype=np.uint8)
    if all(ord(c) < 128 for c in alphabet):
        table = np.frombuffer(alphabet.encode("ascii"), dtype=np.uint8)
        return table[codes].tobytes().decode("ascii")
    table32 = np.array([ord(c) for c in alphabet], dtype="<u4")
    return table32[codes].tobytes().decode("utf-32-le")


def _rss_mb() -> tuple[float, float]:
    """(peak RSS so far, current RSS) of this process in MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    with open("/proc/self/statm") as f:
        current = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return round(peak, 1), round(current, 1)


def measure(kind: str, size: int, seed: int = 0) -> dict[str, Any]:
    """The child's side: the steps on one text, each with its time and RSS."""
    import numpy as np

    from poincare_memory import Memory

    result: dict[str, Any] = {"kind": kind, "size": size, "steps": {}}
    result["rss_import_peak_mb"], result["rss_import_mb"] = _rss_mb()
    text = make_text(kind, size, seed)
    result["rss_text_peak_mb"], result["rss_text_mb"] = _rss_mb()

    def step(name: str, fn: Any) -> Any:
        t0 = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
        peak, current = _rss_mb()
        result["steps"][name] = {"seconds": round(seconds, 3), "rss_peak_mb": peak, "rss_mb": current}
        return out

    mem = Memory(decay=None)
    step("add", lambda: mem.add(text, id="long"))
    # The keyword main is built on the first keyword search; the query is the text itself (its one
    # word), so the search analyses a text that long too (and embeds it: Memory.search does).
    hits = step("keyword_build", lambda: mem.search(text, k=3, mode="keyword", touch=False))
    result["keyword_hits"] = [h.id for h in hits]
    texts = {"other": make_text(kind, size, seed + 1)}
    step("add_to_delta", lambda: mem.add(texts["other"], id="long2"))
    hits = step("keyword_delta", lambda: mem.search(texts.pop("other"), k=3, mode="keyword", touch=False))
    result["keyword_delta_hits"] = [h.id for h in hits]
    hits = step("vector_query", lambda: mem.search(text, k=2, mode="vector", touch=False))
    result["vector_hits"] = [h.id for h in hits]
    vectors = mem.embedder.embed([text, text[: size // 2]])
    result["on_the_sphere"] = bool(np.all(np.linalg.norm(vectors, axis=1) > 0))
    peak = max(v["rss_peak_mb"] for v in result["steps"].values())
    result["peak_mb"] = peak
    result["peak_above_import_mb"] = round(peak - result["rss_import_mb"], 1)
    return result


def run_child(kind: str, size: int, max_gb: float, seed: int = 0) -> dict[str, Any]:
    """``measure`` in a fresh process; a failure (killed, MemoryError) is reported, not raised."""
    child = [sys.executable, os.path.abspath(__file__), "--child", json.dumps([kind, size, seed, max_gb])]
    # Through an intermediate Python: Linux carries a process's peak RSS across exec, so a child
    # exec'd straight from a large parent would start with the parent's peak.
    cmd = [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))", *child]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = round(time.perf_counter() - t0, 2)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return {"kind": kind, "size": size, "failed": tail[0], "wall_seconds": wall}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["wall_seconds"] = wall
    return out


def child_main(arg: str) -> None:
    kind, size, seed, max_gb = json.loads(arg)
    if max_gb > 0:
        limit = int(max_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    print(json.dumps(measure(kind, size, seed)), flush=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000_000])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=["x", "hex", "acgt"])
    parser.add_argument("--max-gb", type=float, default=4.0, help="address-space cap of each child (0: none)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    runs = [run_child(kind, size, args.max_gb) for size in args.sizes for kind in args.kinds]
    doc = {
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}",
        "max_gb": args.max_gb,
        "runs": runs,
    }
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return doc


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child_main(sys.argv[2])
    else:
        main()
