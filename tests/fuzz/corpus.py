"""Seed inputs for the loader fuzzer: small but complete saved indexes and a Memory store that
use every part of the formats (removed points, open windows, metadata of each type, a
snapshot followed by logged adds, updates, in-place sets, deletes, invalidations and touches)."""

from __future__ import annotations

import gc
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

import poincare_index as pi
from poincare_index.embed import HashingEmbedder
from poincare_index.memory import Memory

T0 = datetime(2026, 6, 1, tzinfo=timezone.utc)


def _points(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return (x * rng.uniform(0.05, 0.95, size=(n, 1))).astype(np.float32)


def _index_seed(index: pi.PoincareFlatIndex | pi.PoincareIndex, path: Path, seed: int) -> None:
    n = 48
    x = _points(n, index.dim, seed)
    t = np.array([T0 + timedelta(hours=i) for i in range(n)])
    until = np.array([None if i % 3 else T0 + timedelta(days=30 + i) for i in range(n)], dtype=object)
    index.add(
        x,
        t=t,
        valid_until=until,
        metadata={
            "kind": ["note", "fact", "ticket", "note"] * (n // 4),
            "n": np.arange(n),
            "score": np.linspace(0.0, 1.0, n),
            "flag": [bool(i % 2) for i in range(n)],
            "due": [T0 + timedelta(days=i) for i in range(n)],
        },
    )
    index.remove_ids(np.arange(0, n, 7))
    index.save(path)


def store_state(mem: Memory) -> dict[str, list[object]]:
    """Every memory as [text, time, validity end, access count], by id (JSON-ready)."""
    return {
        r.id: [r.text, r.t.isoformat(), r.valid_until and r.valid_until.isoformat(), r.access_count]
        for r in mem.list()
    }


def build(root: Path) -> dict[str, Path]:
    """Writes the seeds under ``root``; returns {name: directory}. Deterministic."""
    root.mkdir(parents=True, exist_ok=True)
    seeds = {
        "flat": root / "flat",
        "hnsw": root / "hnsw",
        "store": root / "store",
        "hnsw_sq8": root / "hnsw_sq8",
    }
    _index_seed(pi.PoincareFlatIndex(6, num_threads=1), seeds["flat"], 1)
    _index_seed(pi.PoincareIndex(6, M=4, ef_construction=16, num_threads=1), seeds["hnsw"], 2)
    # Code rows (version 3 of the vectors file) in reach of the mutators.
    _index_seed(
        pi.PoincareIndex(6, M=4, ef_construction=16, num_threads=1, storage="sq8"), seeds["hnsw_sq8"], 3
    )
    embedder = HashingEmbedder(dim=16)
    decay = pi.Product(pi.HalfLife(hours=24 * 7), pi.ValidityWindow(outside_weight=0.1))
    mem = Memory(decay=decay, embedder=embedder, path=seeds["store"], num_threads=1, M=4, ef_construction=16)
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()
    texts = [f"{words[i % 12]} {words[(i * 5) % 12]} note {i}" for i in range(16)]
    mem.add_many(
        texts,
        [f"m{i}" for i in range(16)],
        t=[T0 + timedelta(hours=i) for i in range(16)],
        metadata=[{"topic": words[i % 3], "n": i, "w": i / 4, "ok": i % 2 == 0} for i in range(16)],
    )
    mem.checkpoint()  # a snapshot; everything below is in the log after it
    # The state after each logged operation, in order: what a store cut anywhere in its log may
    # hold (the fuzzer's store_log target checks nothing else is ever opened without a word).
    states = [store_state(mem)]
    mem.add("mike november note", id="late", t=T0 + timedelta(days=2), metadata={"topic": "alpha"})
    states.append(store_state(mem))
    mem.update("m1", "bravo rewritten note")  # an update record (new row)
    states.append(store_state(mem))
    mem.update("m2", t=T0 + timedelta(days=3), metadata={"n": 99})  # a set record (in place)
    states.append(store_state(mem))
    mem.delete("m3")
    states.append(store_state(mem))
    mem.invalidate("m4", at=T0 + timedelta(days=5))
    states.append(store_state(mem))
    mem.search("alpha note", k=3, at_time=T0 + timedelta(days=6))  # touch records
    states.append(store_state(mem))
    (root / "store.states.json").write_text(json.dumps(states))
    del mem  # dropped without close(), as by a crash: the log is not folded into a snapshot
    gc.collect()
    return seeds
