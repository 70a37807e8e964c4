"""Poincaré embeddings of WordNet: our numba trainer against gensim's PoincareModel.

* ``--data mammals``: the shipped mammal closure (1,182 synsets), both trainers with the same
  dimension, negatives, burn-in and epochs, in the same run; MAP and mean rank of each by our
  ``reconstruction`` (the same metric code for both), with wall times.
* ``--data nouns``: the noun closure from Debian's wordnet-base (82,115 synsets) for
  ``--minutes`` of training; the curve of MAP and mean rank against training time, evaluated on
  ``--eval-nodes`` sampled nodes every ``--eval-every`` epochs (evaluation time not counted),
  and on every node at the end.

    python benchmarks/bench_hierarchy.py --data mammals [--epochs 50] [--dim 10]
    python benchmarks/bench_hierarchy.py --data nouns --minutes 30 --threads 2 --epochs 100000 \
        --negatives 50 --burn-in 20 --lr 0.05 --eval-every 100 --no-gensim
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params, machine, write_results  # noqa: E402

from poincare_index.hierarchy import Embedding, mammals, noun_closure, reconstruction, train  # noqa: E402


@dataclass
class Results:
    data: str
    dim: int
    machine: str
    params: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    curve: list[dict[str, float]] = field(default_factory=list)


def gensim_run(edges: list[tuple[str, str]], args: argparse.Namespace, lr: float | None) -> dict[str, Any]:
    """gensim at its own default learning rate (0.1, burn-in 0.01) or at ``lr`` (burn-in lr/10)."""
    from gensim.models.poincare import PoincareModel

    rates = {} if lr is None else {"alpha": lr, "burn_in_alpha": lr / 10}
    start = time.perf_counter()
    model = PoincareModel(edges, size=args.dim, negative=args.negatives, burn_in=args.burn_in,
                          seed=args.seed, **rates)  # fmt: skip
    model.train(epochs=args.epochs, batch_size=10)
    seconds = time.perf_counter() - start
    names = list(model.kv.index_to_key)
    pts = np.stack([model.kv[n] for n in names]).astype(np.float32)
    norms = np.linalg.norm(pts.astype(np.float64), axis=1)
    pts[norms >= 1.0] *= np.float32(1 - 1e-6)
    rec = reconstruction(Embedding(names=tuple(names), points=pts), edges)
    return {"trainer": "gensim", "lr": 0.1 if lr is None else lr, "seconds": seconds,
            "mean_rank": rec.mean_rank, "map": rec.map}  # fmt: skip


def ours_run(edges: list[tuple[str, str]], args: argparse.Namespace) -> dict[str, Any]:
    train(edges[:50], args.dim, epochs=1, burn_in=0)  # numba compiles (or loads its cache) once
    start = time.perf_counter()
    emb = train(edges, args.dim, epochs=args.epochs, negatives=args.negatives, burn_in=args.burn_in,
                lr=args.lr, lr_final=args.lr_final, seed=args.seed, threads=args.threads)  # fmt: skip
    seconds = time.perf_counter() - start
    rec = reconstruction(emb, edges)
    return {"trainer": "poincare_index", "threads": args.threads, "lr": args.lr, "seconds": seconds,
            "mean_rank": rec.mean_rank, "map": rec.map}  # fmt: skip


def nouns(args: argparse.Namespace, res: Results) -> None:
    edges = noun_closure()
    budget = args.minutes * 60.0
    clock = {"train": 0.0, "last": time.perf_counter()}

    class Stop(Exception):
        pass

    def on_epoch(epoch: int, loss: float, points: np.ndarray) -> None:
        now = time.perf_counter()
        clock["train"] += now - clock["last"]
        if epoch % args.eval_every == 0:
            emb = Embedding(names=names, points=points)
            rec = reconstruction(emb, edges, sample=args.eval_nodes, seed=1)
            point = {"epoch": epoch, "train_s": clock["train"], "loss": loss,
                     "mean_rank_sample": rec.mean_rank, "map_sample": rec.map}  # fmt: skip
            res.curve.append(point)
            print(point, flush=True)
            final["points"] = points
        clock["last"] = time.perf_counter()
        if clock["train"] >= budget:
            final["points"] = points
            final["epoch"] = epoch
            raise Stop

    from poincare_index.hierarchy import as_relations

    names = as_relations(edges, closure=False).names
    final: dict[str, Any] = {}
    try:
        train(edges, args.dim, epochs=args.epochs, negatives=args.negatives, burn_in=args.burn_in,
              lr=args.lr, lr_final=args.lr_final, seed=args.seed, threads=args.threads,
              on_epoch=on_epoch)  # fmt: skip
    except Stop:
        pass
    start = time.perf_counter()
    rec = reconstruction(Embedding(names=names, points=final["points"]), edges)
    res.runs.append({"trainer": "poincare_index", "threads": args.threads, "epochs": final.get("epoch"),
                     "train_s": clock["train"], "mean_rank": rec.mean_rank, "map": rec.map,
                     "eval_s": time.perf_counter() - start})  # fmt: skip
    print(res.runs[-1], flush=True)


# Data of this suite's own (not in registry.py's dataset registry).
OWN_DATA = ("mammals", "nouns")

# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "data": "mammals",
    "dim": 10,
    "epochs": 50,
    "negatives": 10,
    "burn_in": 10,
    "lr": 0.3,
    "lr_final": None,
    "seed": 0,
    "threads": 1,
    "minutes": 30.0,
    "eval_every": 25,
    "eval_nodes": 1000,
    "no_gensim": False,
    "out": None,
}


def run(args: Params) -> int:
    res = Results(data=args.data, dim=args.dim, machine=machine(), params=vars(args).copy())
    if args.data == "mammals":
        edges = mammals()
        res.runs.append(ours_run(edges, args))
        print(res.runs[-1], flush=True)
        if not args.no_gensim:
            for lr in (None, args.lr):  # gensim's default rate, then ours
                res.runs.append(gensim_run(edges, args, lr))
                print(res.runs[-1], flush=True)
                ours, theirs = res.runs[0], res.runs[-1]
                print(f"time ratio ours/gensim {ours['seconds'] / theirs['seconds']:.3f}, "
                      f"MAP {ours['map']:.3f} vs {theirs['map']:.3f}")  # fmt: skip
    else:
        nouns(args, res)
    out = args.out or os.path.join(HERE, "results", f"hierarchy_{args.data}_{args.dim}d.json")
    write_results(out, res)
    return 0
