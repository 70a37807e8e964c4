"""A hierarchy as the trainer sees it: node names, (child, parent) edges as int32 rows, and the
relation of each node kept in CSR form (sorted), for negative sampling and evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["Relations", "as_relations", "transitive_closure"]


@dataclass(frozen=True)
class Relations:
    """``edges`` (m, 2) int32 rows of (child, parent) node numbers into ``names``; the CSR
    (``indptr``, ``indices``, sorted per node) of each node's parents in those rows, which
    negative sampling must not draw for it (the paper's N(u) = {v : (u, v) not in D}: a node's
    own descendants are negatives for it, which is what orders its ancestors before them)."""

    names: tuple[str, ...]
    edges: NDArray[np.int32]
    indptr: NDArray[np.int64]
    indices: NDArray[np.int32]
    degree: NDArray[np.int64]  # pairs each node is in, either side (burn-in negatives follow it)

    @property
    def n_nodes(self) -> int:
        return len(self.names)

    def index_of(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}


def _pairs(edges: Any, where: str) -> list[tuple[str, str]]:
    if isinstance(edges, (str, bytes)) or not isinstance(edges, Iterable):
        raise TypeError(f"{where} must be a sequence of (child, parent) pairs, got {type(edges).__name__}")
    out: list[tuple[str, str]] = []
    for i, pair in enumerate(edges):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise TypeError(f"{where}[{i}] must be a (child, parent) pair, got {pair!r}")
        child, parent = pair
        for role, value in (("child", child), ("parent", parent)):
            if not isinstance(value, str):
                raise TypeError(f"{where}[{i}]: the {role} must be a str name, got {type(value).__name__}")
            if not value:
                raise ValueError(f"{where}[{i}]: the {role} is an empty name")
        if child == parent:
            raise ValueError(f"{where}[{i}]: {child!r} is its own parent (a self loop)")
        out.append((child, parent))
    if not out:
        raise ValueError(f"{where} is empty: a hierarchy needs at least one (child, parent) pair")
    return out


def transitive_closure(edges: NDArray[np.int32], n_nodes: int, names: Sequence[str]) -> NDArray[np.int32]:
    """Every (descendant, ancestor) pair reachable by parent links, as sorted unique rows;
    ValueError naming a node on a cycle (a closure of a cyclic graph would have self loops)."""
    parents: list[list[int]] = [[] for _ in range(n_nodes)]
    for c, p in edges.tolist():
        parents[c].append(p)
    # Ancestor sets in an order where every parent comes before its children (Kahn's algorithm
    # on the parent links), so each set is the union of its parents' sets, built once.
    waiting = np.zeros(n_nodes, dtype=np.int64)  # parents whose ancestor set is not built yet
    children: list[list[int]] = [[] for _ in range(n_nodes)]
    for c in range(n_nodes):
        for p in parents[c]:
            children[p].append(c)
            waiting[c] += 1
    ready = [v for v in range(n_nodes) if waiting[v] == 0]
    ancestors: list[set[int] | None] = [None] * n_nodes
    done = 0
    while ready:
        v = ready.pop()
        acc: set[int] = set()
        for p in parents[v]:
            acc.add(p)
            acc |= ancestors[p]  # type: ignore[operator]
        ancestors[v] = acc
        done += 1
        for c in children[v]:
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)
    if done < n_nodes:
        # A node left waiting has a parent left waiting: walking up them must repeat a node,
        # and the first repeated one lies on a cycle.
        on_cycle = next(v for v in range(n_nodes) if ancestors[v] is None)
        seen: set[int] = set()
        while on_cycle not in seen:
            seen.add(on_cycle)
            on_cycle = next(p for p in parents[on_cycle] if ancestors[p] is None)
        raise ValueError(
            f"the edges have a cycle (through {names[on_cycle]!r}); a closure needs a hierarchy "
            "without cycles"
        )
    rows = [(v, a) for v in range(n_nodes) for a in sorted(ancestors[v])]  # type: ignore[arg-type]
    return np.asarray(rows, dtype=np.int32).reshape(-1, 2)


def as_relations(edges: Any, *, closure: bool = False, where: str = "edges") -> Relations:
    """Validated relations of ``edges`` (pairs of str names); with ``closure=True`` their
    transitive closure. Node numbers follow the order names first appear."""
    if not isinstance(closure, bool):
        raise TypeError(f"closure must be True or False, got {type(closure).__name__}")
    pairs = _pairs(edges, where)
    index: dict[str, int] = {}
    for child, parent in pairs:
        index.setdefault(child, len(index))
        index.setdefault(parent, len(index))
    names = tuple(index)
    rows = np.asarray([(index[c], index[p]) for c, p in pairs], dtype=np.int32)
    if closure:
        rows = transitive_closure(rows, len(names), names)
    else:
        rows = np.unique(rows, axis=0)
    n = len(names)
    src, dst = rows[:, 0].astype(np.int64), rows[:, 1]  # unique rows, sorted by (child, parent)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, src + 1, 1)
    np.cumsum(indptr, out=indptr)
    degree = np.bincount(rows.ravel(), minlength=n).astype(np.int64)
    return Relations(
        names=names, edges=np.ascontiguousarray(rows), indptr=indptr,
        indices=np.ascontiguousarray(dst, dtype=np.int32), degree=degree,
    )  # fmt: skip
