"""One adapter per contender: the harness drives every library through the same five calls.

``build(x, threads)`` builds from the float32 ball points with ``threads`` threads (the timed
build, including any transform of the data the contender needs), ``set_threads(n)`` sets the
search threads, ``search(q, k, ef) -> ids`` runs one batch (including any query transform),
``sweep_values`` are the ef values to try (``(None,)`` for exact indexes), and
``analytic_bytes()`` is the per-vector memory the structure itself implies.

Every contender is built as a user gets it: the library's defaults except efConstruction=200 and
the peers' M=16 (hnswlib's default; ours builds at its own default, ``pi.index.DEFAULT_M``), no
tuning flags.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import re
import shutil
import tempfile
from typing import Any, Sequence

import faiss
import hnswlib
import numpy as np
from numpy.typing import NDArray
from prefetch_rescore import HnswlibPrefetchRescore
from truth import Truth, recall

import poincare_index as pi

M = 16  # the peers' M
EF_CONSTRUCTION = 200
EF_SWEEP = (10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)

# Expected number of upper levels per node when levels are drawn with P(level >= l) = M^-l
# (all three HNSW implementations use level_mult = 1/ln M): sum_l M^-l = 1/(M-1).
_UPPER_LEVELS = 1.0 / (M - 1)
_P_UPPER = 1.0 / M
_MALLOC_OVERHEAD = 16  # glibc chunk header + rounding, per separately allocated block
_SPIN_LOCK = 1  # sizeof(poincare::SpinLock)
_STD_MUTEX = 40  # sizeof(std::mutex) on x86-64 Linux (hnswlib)
_HASH_ENTRY = 32 + 8  # unordered_map<int64, uint32> node (24 B -> 32 B chunk) + bucket


class Adapter:
    """Base class: a contender the harness builds, sweeps and times."""

    name: str = ""
    library: str = ""
    truth: str = "poincare"  # the truth recall is scored against
    extra_truths: tuple[str, ...] = ()  # also reported, not used for the target
    sweep_values: Sequence[int | None] = (None,)
    description: str = ""

    def __init__(self) -> None:
        self.n = 0
        self.dim = 0
        self.build_threads = 1

    def build(self, x: NDArray[np.float32], threads: int) -> None:
        raise NotImplementedError

    def set_threads(self, n: int) -> None:
        raise NotImplementedError

    def search(self, q: NDArray[np.float32], k: int, ef: int | None) -> NDArray[np.int64]:
        raise NotImplementedError

    def analytic_bytes(self) -> dict[str, float]:
        """Per-vector bytes by component, from the structure's layout (expected values).

        Keys ending in ``_per_thread`` are multiplied by the thread count, keys ending in
        ``_fixed`` are whole-index bytes (divided by n for the per-vector total)."""
        return {}

    def diagnostics(
        self, database: NDArray[np.float32], queries: NDArray[np.float32], k: int, truths: dict[str, Truth]
    ) -> dict[str, Any]:
        """Contender-specific correctness checks, run after the sweep."""
        return {}

    def release(self) -> None:
        """Drop the index (so the next contender's RSS delta starts clean)."""
        raise NotImplementedError


def _distance_check(
    dist: NDArray[np.float32],
    ids: NDArray[np.int64],
    database: NDArray[np.float32],
    queries: NDArray[np.float32],
) -> dict[str, Any]:
    """Max relative error of reported float32 distances against float64 pi.distance."""
    valid = ids >= 0
    ref = pi.distance(queries[:, None, :], database[np.where(valid, ids, 0)])
    rel = np.abs(dist.astype(np.float64) - ref) / np.maximum(ref, 1e-30)
    rel = np.where(valid, rel, 0.0)
    return {
        "reported_distance_max_rel_err": float(rel.max()),
        "results_sorted": bool(np.all(np.diff(dist, axis=1) >= 0)),
        "missing_results": int(np.count_nonzero(~valid)),
    }


# ---------------------------------------------------------------------------------------------
class OursHNSW(Adapter):
    name = "ours-hnsw"
    library = "poincare_index"
    truth = "poincare"
    sweep_values = EF_SWEEP
    description = f"pi.PoincareIndex(M={pi.index.DEFAULT_M}, ef_construction=200), Poincaré distance"

    def build(self, x: NDArray[np.float32], threads: int) -> None:
        self.n, self.dim, self.build_threads = x.shape[0], x.shape[1], threads
        self.index = pi.PoincareIndex(
            x.shape[1], ef_construction=EF_CONSTRUCTION, seed=0, num_threads=threads
        )
        self.index.add(x)

    def set_threads(self, n: int) -> None:
        self.index.num_threads = n

    def search(self, q: NDArray[np.float32], k: int, ef: int | None) -> NDArray[np.int64]:
        return self.index.search(q, k, ef=ef)[1]

    def analytic_bytes(self) -> dict[str, float]:
        # The index's own accounting: every array at its allocated capacity.
        n = max(self.n, 1)
        parts = {k: v / n for k, v in self.index.memory_usage().items()}
        parts["visited_scratch_per_thread"] = 2 * 1.25
        return parts

    def diagnostics(
        self, database: NDArray[np.float32], queries: NDArray[np.float32], k: int, truths: dict[str, Truth]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"check_integrity": self.index.check_integrity()}
        dist, ids = self.index.search(queries, k)  # default ef_search
        out["default_ef_search"] = self.index.ef_search
        out.update(_distance_check(dist, ids, database, queries))
        return out

    def release(self) -> None:
        self.index = None


class OursFlat(Adapter):
    name = "ours-flat"
    library = "poincare_index"
    truth = "poincare"
    description = "pi.PoincareFlatIndex, exact Poincaré scan"

    def build(self, x: NDArray[np.float32], threads: int) -> None:
        self.n, self.dim, self.build_threads = x.shape[0], x.shape[1], threads
        self.index = pi.PoincareFlatIndex(x.shape[1], num_threads=threads)
        self.index.add(x)

    def set_threads(self, n: int) -> None:
        self.index.num_threads = n

    def search(self, q: NDArray[np.float32], k: int, ef: int | None) -> NDArray[np.int64]:
        return self.index.search(q, k)[1]

    def analytic_bytes(self) -> dict[str, float]:
        # The index's own accounting, as for the graph.
        n = max(self.n, 1)
        return {k: v / n for k, v in self.index.memory_usage().items()}

    def diagnostics(
        self, database: NDArray[np.float32], queries: NDArray[np.float32], k: int, truths: dict[str, Truth]
    ) -> dict[str, Any]:
        dist, ids = self.index.search(queries, k)
        return _distance_check(dist, ids, database, queries)

    def release(self) -> None:
        self.index = None


# ---------------------------------------------------------------------------------------------
def lift_database(x: NDArray[np.float32]) -> NDArray[np.float32]:
    """p(v) = [1, v, |v|^2] / (1 - |v|^2) padded to the common norm R = max |p| (float64 math)."""
    v = x.astype(np.float64)
    sq = np.einsum("ij,ij->i", v, v)
    r = np.sqrt(sq)
    a = 1.0 / ((1.0 - r) * (1.0 + r))
    p = np.empty((v.shape[0], v.shape[1] + 3), dtype=np.float64)
    p[:, 0] = a
    p[:, 1:-2] = v * a[:, None]
    p[:, -2] = sq * a
    pn = np.einsum("ij,ij->i", p[:, :-1], p[:, :-1])
    p[:, -1] = np.sqrt(np.maximum(pn.max() - pn, 0.0))
    return np.ascontiguousarray(p, dtype=np.float32)


def lift_queries(q: NDArray[np.float32]) -> NDArray[np.float32]:
    """u -> [-|u|^2, 2u, -1, 0]: |Q - P|^2 = |Q|^2 + R^2 + 2 |u-v|^2 a(v), Poincaré order."""
    u = q.astype(np.float64)
    out = np.zeros((u.shape[0], u.shape[1] + 3), dtype=np.float64)
    out[:, 0] = -np.einsum("ij,ij->i", u, u)
    out[:, 1:-2] = 2.0 * u
    out[:, -2] = -1.0
    return np.ascontiguousarray(out, dtype=np.float32)


def _faiss_hnsw_bytes(stored_dim: int) -> dict[str, float]:
    return {
        "vectors": 4.0 * stored_dim,
        "levels": 4,
        "offsets": 8,
        "neighbors": 4 * (2 * M + M * _UPPER_LEVELS),
    }


class FaissHNSWLifted(Adapter):
    name = "faiss-hnsw-lifted"
    library = "faiss"
    truth = "poincare"
    sweep_values = EF_SWEEP
    description = "faiss.IndexHNSWFlat(d+3, 16) on the lifted vectors (L2 order = Poincaré order)"

    def build(self, x: NDArray[np.float32], threads: int) -> None:
        self.n, self.dim, self.build_threads = x.shape[0], x.shape[1], threads
        faiss.omp_set_num_threads(threads)
        lifted = lift_database(x)
        self.index = faiss.IndexHNSWFlat(lifted.shape[1], M)
        self.index.hnsw.efConstruction = EF_CONSTRUCTION
        self.index.add(lifted)

    def set_threads(self, n: int) -> None:
        faiss.omp_set_num_threads(n)

    def search(self, q: NDArray[np.float32], k: int, ef: int | None) -> NDArray[np.int64]:
        self.index.hnsw.efSearch = int(ef if ef is not None else 16)
        return self.index.search(lift_queries(q), k)[1]

    def analytic_bytes(self) -> dict[str, float]:
        return _faiss_hnsw_bytes(self.dim + 3)

    def diagnostics(
        self, database: NDArray[np.float32], queries: NDArray[np.float32], k: int, truths: dict[str, Truth]
    ) -> dict[str, Any]:
        # The ceiling of the lift in float32: exact L2 on the lifted vectors (no graph). Near
        # the boundary |p| ~ 1/(1-|v|^2) is huge and float32 rounding of the lifted coordinates
        # swamps the |u-v|^2 a(v) term that carries the order.
        lifted = lift_database(database)
        flat = faiss.IndexFlatL2(lifted.shape[1])
        flat.add(lifted)
        ids = flat.search(lift_queries(queries), k)[1]
        return {
            "lift_R": float(np.linalg.norm(lifted[0].astype(np.float64))),
            "exact_l2_on_lifted_float32_recall": recall(ids, truths["poincare"]),
        }

    def release(self) -> None:
        self.index = None


class FaissHNSWL2(Adapter):
    name = "faiss-hnsw-l2"
    library = "faiss"
    truth = "l2"
    extra_truths = ("poincare",)
    sweep_values = EF_SWEEP
    description = "faiss.IndexHNSWFlat(d, 16), L2 on the raw points"

    def build(self, x: NDArray[np.float32], threads: int) -> None:
        self.n, self.dim, self.build_threads = x.shape[0], x.shape[1], threads
        faiss.omp_set_num_threads(threads)
        self.index = faiss.IndexHNSWFlat(x.shape[1], M)
        self.index.hnsw.efConstruction = EF_CONSTRUCTION
        self.index.add(x)

    def set_threads(self, n: int) -> None:
        faiss.omp_set_num_threads(n)

    def search(self, q: NDArray[np.float32], k: int, ef: int | None) -> NDArray[np.int64]:
        self.index.hnsw.efSearch = int(ef if ef is not None else 16)
        return self.index.search(q, k)[1]

    def analytic_bytes(self) -> dict[str, float]:
        return _faiss_hnsw_bytes(self.dim)

    def release(self) -> None:
        self.index = None


class HnswlibL2(Adapter):
    name = "hnswlib-l2"
    library = "hnswlib"
    truth = "l2"
    extra_truths = ("poincare",)
    sweep_values = EF_SWEEP
    description = "hnswlib.Index('l2', M=16, ef_construction=200) on the raw points"

    def build(self, x: NDArray[np.float32], threads: int) -> None:
        self.n, self.dim, self.build_threads = x.shape[0], x.shape[1], threads
        self.index = hnswlib.Index(space="l2", dim=x.shape[1])
        self.index.init_index(max_elements=x.shape[0], ef_construction=EF_CONSTRUCTION, M=M)
        self.index.set_num_threads(threads)
        self.index.add_items(x, np.arange(x.shape[0]))

    def set_threads(self, n: int) -> None:
        self.index.set_num_threads(n)

    def search(self, q: NDArray[np.float32], k: int, ef: int | None) -> NDArray[np.int64]:
        self.index.set_ef(int(ef if ef is not None else 10))
        labels, _ = self.index.knn_query(q, k=k)
        return labels.astype(np.int64)

    def analytic_bytes(self) -> dict[str, float]:
        return {
            "vectors": 4.0 * self.dim,
            "label": 8,
            "level0_links": 4 + 2 * M * 4,
            "element_level": 4,
            "linklist_ptr": 8,
            "upper_links": _UPPER_LEVELS * (4 + M * 4) + _P_UPPER * _MALLOC_OVERHEAD,
            "node_locks": _STD_MUTEX,
            "label_hash_map": _HASH_ENTRY,
            "visited_list_per_thread": 2,
            "label_op_locks_fixed": 65536 * _STD_MUTEX,
        }

    def release(self) -> None:
        self.index = None


class FaissFlatL2(Adapter):
    name = "faiss-flat-l2"
    library = "faiss"
    truth = "poincare"  # the question: what does plain L2 give a FAISS user?
    extra_truths = ("l2",)  # sanity: exact L2 must score 1.0 here
    description = "faiss.IndexFlatL2 on the raw points (exact L2)"

    def build(self, x: NDArray[np.float32], threads: int) -> None:
        self.n, self.dim, self.build_threads = x.shape[0], x.shape[1], threads
        faiss.omp_set_num_threads(threads)
        self.index = faiss.IndexFlatL2(x.shape[1])
        self.index.add(x)

    def set_threads(self, n: int) -> None:
        faiss.omp_set_num_threads(n)

    def search(self, q: NDArray[np.float32], k: int, ef: int | None) -> NDArray[np.int64]:
        return self.index.search(q, k)[1]

    def analytic_bytes(self) -> dict[str, float]:
        return {"vectors": 4.0 * self.dim}

    def release(self) -> None:
        self.index = None


CONTENDERS: dict[str, type[Adapter]] = {
    cls.name: cls for cls in (OursHNSW, FaissHNSWLifted, FaissHNSWL2, HnswlibL2, OursFlat, FaissFlatL2)
}


# ---------------------------------------------------------------------------------------------
# NGT (PyPI ``ngt``, module ``ngtpy``): the other engine with a native Poincaré graph. Optional:
# imported when an NGT adapter is built, and kept out of CONTENDERS (bench_knn's "all").

# Search settings swept: (epsilon, edge_size). edge_size -2 is NGT's dynamic rule (what the
# ONNG optimizer writes into the profile), 40 ``create``'s default, 0 every edge of a node.
NGT_EPSILONS = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2)
NGT_EDGE_SIZES = (-2, 40, 0)
NGT_SWEEP: tuple[tuple[float, int], ...] = tuple((e, s) for s in NGT_EDGE_SIZES for e in NGT_EPSILONS)


def _ngtpy() -> Any:
    import ngtpy  # pip install ngt

    return ngtpy


def ngt_set_num_threads(n: int) -> None:
    """``batch_search`` is an OpenMP loop: set the thread count of the libgomp ngtpy links (the
    wheel bundles its own copy under ``ngt.libs``; dlopen of the loaded path gives its handle)."""
    here = os.path.dirname(_ngtpy().__file__)
    libs = sorted(glob.glob(os.path.join(here, "ngt.libs", "libgomp*")))
    path = libs[0] if libs else ctypes.util.find_library("gomp")
    if path is None:
        raise RuntimeError("cannot find the libgomp ngtpy uses, so cannot set its thread count")
    ctypes.CDLL(path).omp_set_num_threads(int(n))


def ngt_create_poincare(path: str, dim: int, edge_size_for_creation: int, edge_size_for_search: int) -> None:
    """An empty NGT index directory with the Poincaré distance. ``ngtpy.create`` refuses
    "Poincare", so the index is created as L2 and the profile's ``DistanceType\tL2`` line is
    rewritten to ``DistanceType\tPoincare`` before anything is inserted."""
    _ngtpy().create(
        path,
        dim,
        edge_size_for_creation=edge_size_for_creation,
        edge_size_for_search=edge_size_for_search,
        distance_type="L2",
        object_type="Float",
    )
    prf = os.path.join(path, "prf")
    with open(prf) as f:
        text = f.read()
    text, count = re.subn(r"^DistanceType\tL2$", "DistanceType\tPoincare", text, flags=re.MULTILINE)
    if count != 1:
        raise RuntimeError(f"{prf}: expected one 'DistanceType\tL2' line")
    with open(prf, "w") as f:
        f.write(text)


def ngt_distance_type(path: str) -> str | None:
    """The ``DistanceType`` an NGT index directory's profile names."""
    with open(os.path.join(path, "prf")) as f:
        found = re.search(r"^DistanceType\t(\S+)$", f.read(), flags=re.MULTILINE)
    return found.group(1) if found else None


class NgtANNG(Adapter):
    name = "ngt-anng"
    library = "ngt"
    truth = "poincare"
    sweep_values = NGT_SWEEP
    edge_size_for_creation = 10  # NGT's default
    description = (
        "ngtpy ANNG, Poincaré distance (created as L2, prf DistanceType set to Poincare), "
        "edge_size_for_creation=10, search swept over (epsilon, edge_size)"
    )

    def __init__(self) -> None:
        super().__init__()
        self.tmp: str | None = None
        self.index: Any = None
        self.path = ""

    def _build_anng(self, x: NDArray[np.float32], threads: int, path: str, edge_size: int) -> Any:
        ngtpy = _ngtpy()
        ngt_create_poincare(path, x.shape[1], edge_size, 40)
        index = ngtpy.Index(path, log_disabled=True)
        index.batch_insert(np.ascontiguousarray(x, dtype=np.float32), num_threads=threads, build=False)
        index.build_index(num_threads=threads)
        index.save()
        return index

    def build(self, x: NDArray[np.float32], threads: int) -> None:
        self.n, self.dim, self.build_threads = x.shape[0], x.shape[1], threads
        ngt_set_num_threads(threads)
        self.tmp = tempfile.mkdtemp(prefix="ngt-")
        self.path = os.path.join(self.tmp, "anng")
        self.index = self._build_anng(x, threads, self.path, self.edge_size_for_creation)
        self.results = _ngtpy().BatchResults()

    def set_threads(self, n: int) -> None:
        ngt_set_num_threads(n)

    def search(self, q: NDArray[np.float32], k: int, ef: Any) -> NDArray[np.int64]:
        epsilon, edge_size = ef if ef is not None else (0.1, -1)
        self.index.set(epsilon=float(epsilon), edge_size=int(edge_size))
        self.index.batch_search(
            np.ascontiguousarray(q, dtype=np.float32), self.results, k, with_distance=False
        )
        return self.results.get_ids().astype(np.int64)

    def analytic_bytes(self) -> dict[str, float]:
        # NGT's own serialisation, per vector: objects, graph (id + distance per edge), tree.
        n = max(self.n, 1)
        files = {"objects": "obj", "graph": "grp", "tree": "tre"}
        return {k: os.path.getsize(os.path.join(self.path, f)) / n for k, f in files.items()}

    def diagnostics(
        self, database: NDArray[np.float32], queries: NDArray[np.float32], k: int, truths: dict[str, Truth]
    ) -> dict[str, Any]:
        # NGT's reported distances against float64 pi.distance (same ids, so the order it ranks
        # by is the Poincaré order), on up to 100 queries, every edge and epsilon 0.2.
        q = np.ascontiguousarray(queries[:100], dtype=np.float32)
        dist = np.full((len(q), k), np.inf, dtype=np.float32)
        ids = np.full((len(q), k), -1, dtype=np.int64)
        for i, row in enumerate(q):
            found = self.index.search(row, k, epsilon=0.2, edge_size=0)
            ids[i, : len(found)] = [j for j, _ in found]
            dist[i, : len(found)] = [d for _, d in found]
        out = {"prf_distance_type": ngt_distance_type(self.path)}
        out.update(_distance_check(dist, ids, database, q))
        return out

    def release(self) -> None:
        if self.index is not None:
            self.index.close()
        self.index = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp = None


class NgtONNG(NgtANNG):
    name = "ngt-onng"
    edge_size_for_creation = 100  # the ANNG the ONNG is made from (NGT's ONNG recipe)
    outgoing, incoming = 10, 120
    # The graph is NGT's reconstruct-graph (shortcut reduction, out/in-degree 10/120) plus its
    # prefetch tuning. The optimizer's search-parameter step (dynamic edge-size rule for
    # edge_size=-2, and the accuracy table that needs it) is off: on the generated hierarchy it
    # takes 150 s at 2,000 points and had not finished after 20 min at 20,000.
    modes = {
        "shortcut_reduction": True,
        "search_parameter_optimization": False,
        "prefetch_parameter_optimization": True,
        "accuracy_table_generation": False,
    }
    description = (
        "ngtpy ONNG, Poincaré distance: ANNG (edge_size_for_creation=100) -> ngtpy.Optimizer("
        "num_of_outgoings=10, num_of_incomings=120), shortcut reduction + prefetch tuning; "
        "search swept over (epsilon, edge_size)"
    )

    def build(self, x: NDArray[np.float32], threads: int) -> None:
        self.n, self.dim, self.build_threads = x.shape[0], x.shape[1], threads
        ngt_set_num_threads(threads)
        ngtpy = _ngtpy()
        self.tmp = tempfile.mkdtemp(prefix="ngt-")
        anng = os.path.join(self.tmp, "anng")
        self._build_anng(x, threads, anng, self.edge_size_for_creation).close()
        self.path = os.path.join(self.tmp, "onng")
        optimizer = ngtpy.Optimizer(
            num_of_outgoings=self.outgoing, num_of_incomings=self.incoming, log_disabled=True
        )
        optimizer.set_processing_modes(**self.modes)
        optimizer.execute(anng, self.path)
        shutil.rmtree(anng)
        self.index = ngtpy.Index(self.path, read_only=True, log_disabled=True)
        self.results = ngtpy.BatchResults()


# Optional contenders (need ``ngt``), by name; bench_families.py picks from CONTENDERS and these.
NGT_CONTENDERS: dict[str, type[Adapter]] = {cls.name: cls for cls in (NgtANNG, NgtONNG)}
# Qdrant's recipe for hyperbolic data (hnswlib L2 prefetch, exact Poincaré re-score), in its own
# file (prefetch_rescore.py); kept out of CONTENDERS like NGT, so a suite runs it when named.
PREFETCH_CONTENDERS: dict[str, Any] = {HnswlibPrefetchRescore.name: HnswlibPrefetchRescore}
ALL_CONTENDERS: dict[str, type[Adapter]] = {**CONTENDERS, **NGT_CONTENDERS, **PREFETCH_CONTENDERS}
