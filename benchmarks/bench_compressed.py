"""Compressed storage with exact re-ranking (issue 37, step 15): ``PoincareIndex(storage="f16" |
"sq8")`` against our ``"f32"`` index and FAISS ``IndexHNSWFlat``, ``IndexHNSWSQ`` (QT_8bit) and
``IndexRefineFlat(IndexHNSWSQ)``, on members of the data family (benchmarks/families.py).

For each member and dimension the parent process generates the data once (``families.make``:
stored points, held-out queries, near queries), writes it to a work directory, computes the
exact float64 top-10 (``truth.exact_knn``: Poincaré, and L2 for FAISS) and then, per contender:

1. **Build** in a child process of its own (``child_process.call_in_child``): load the points,
   build (M=16, efConstruction=200, ``threads`` threads), save (ours: ``index.save``; FAISS:
   ``faiss.write_index``). Build time, the child's peak RSS (``ru_maxrss``) right after the
   build, and that peak less the child's RSS before building (points loaded).
   ``faiss-hnsw-sq8-refine`` wraps the graph the ``faiss-hnsw-sq8`` child saved (read back,
   plus ``IndexRefineFlat(base, points)``): its build time adds the sq8 build's.
2. **Measure** in a fresh child: import numpy, poincare_index and faiss, load the queries,
   open a tiny index of the same type once (so lazy imports, pyarrow and pandas for our
   columns file, are not counted), drop the index's files from the page cache (``page_cache =
   "cold"``, see ``drop_from_page_cache``), take the baseline (``/proc/self/status``: VmRSS,
   RssAnon, RssFile), open the saved index (ours:
   ``read_index(path, mmap=True, verify=False)``; FAISS: ``read_index`` with the first I/O flag
   that maps this index type, ``IO_FLAG_MMAP`` then ``IO_FLAG_MMAP_IFC``, else read), run
   ``warmup`` held-out queries at the largest ef, and take the status again: resident bytes per
   vector = (VmRSS - baseline) / n, with the RssAnon / RssFile parts. ``/proc/self/pagemap``
   says which pages of each mapped file are resident; for our vectors file it is split by
   section (float32 rows, rank factors, code rows, ids and flags), so the JSON has the resident
   bytes *without* the float32 rows (graph + codes + factors + heap: what must stay in RAM;
   the float32 pages are clean file pages the kernel may drop) beside the RSS.
   Then the files are read into the page cache (not mapped), and the sweep, single thread
   (``search_threads``), runs on a warm cache: at each ef, the held-out, near and self
   batches, best of ``repeats``; the ids go back to the parent through an ``.npz`` file.
3. **Score** in the parent: recall@1 / recall@10 of held-out and near queries (ours against the
   Poincaré truth; FAISS against the L2 truth on the same points, its Poincaré recall beside),
   ``self@1`` (a stored point searched by its own vector comes back first, or an equal one),
   QPS per batch.

Per member x dim: the smallest ef where held-out *and* near reach recall@10 ``target_r10`` and
recall@1 ``target_r1``, the QPS there, bytes against FAISS HNSWFlat (goal <= 0.4x) and HNSWSQ
(goal <= 1x), QPS against FAISS sq8 + refine and against our f32 index.

    python benchmarks/run.py benchmarks/configs/compressed.toml --quick
"""

from __future__ import annotations

import ctypes
import gc
import os
import resource
import shutil
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from numpy.typing import NDArray

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import datasets as ds  # noqa: E402
import families  # noqa: E402
from bench_common import Params, best_of, machine, write_results  # noqa: E402
from child_process import call_in_child  # noqa: E402
from truth import Truth, exact_knn, recall  # noqa: E402

K = 10
OURS = {"ours-f32": "f32", "ours-f16": "f16", "ours-sq8": "sq8"}
FAISS = ("faiss-hnsw-flat", "faiss-hnsw-sq8", "faiss-hnsw-sq8-refine")
CONTENDERS = (*OURS, *FAISS)
QUERY_KINDS = ("held_out", "near")  # scored against a truth; "self" is scored by self@1
FAISS_READ_MODES = ("IO_FLAG_MMAP", "IO_FLAG_MMAP_IFC")  # tried in this order; else "read"
STATUS_KEYS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MIB = 1 << 20

F32 = NDArray[np.float32]
I64 = NDArray[np.int64]

try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL("libc.so.6")
except OSError:  # pragma: no cover - not glibc
    _LIBC = None


@dataclass
class Results:
    machine: str
    settings: dict[str, Any]
    builds: list[dict[str, Any]] = field(default_factory=list)  # one per member x dim x contender
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per member x dim x contender x ef
    summary: list[dict[str, Any]] = field(default_factory=list)  # one per member x dim x contender
    skipped: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# memory of this process (child side)


def proc_status() -> dict[str, int]:
    """VmRSS, RssAnon, RssFile, RssShmem and VmHWM of this process in bytes, after a garbage
    collection and ``malloc_trim(0)`` (freed heap returned to the OS)."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in STATUS_KEYS:
                out[key] = int(value.split()[0]) * 1024
    return out


def peak_rss() -> int:
    """This process's peak RSS in bytes (``ru_maxrss``, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def mappings(root: str) -> list[tuple[int, int, int, str]]:
    """(start, end, file offset, path) of this process's mappings of files under ``root``."""
    root = os.path.realpath(root)
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip().startswith(root):
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                out.append((lo, hi, int(parts[2], 16), parts[5].strip()))
    return out


def present_bytes(lo: int, hi: int) -> int:
    """Bytes of the pages starting in [lo, hi) that are mapped into this process now (the
    present bit of ``/proc/self/pagemap``; readable without privileges, the frame numbers are
    not needed). A page belongs to the range its first byte lies in, so adjacent ranges do not
    count a page twice."""
    first, last = -(-lo // PAGE), -(-hi // PAGE)
    if last <= first:
        return 0
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        raw = np.frombuffer(f.read((last - first) * 8), dtype=np.uint64)
    return int(np.count_nonzero(raw >> np.uint64(63))) * PAGE


def vectors_file_sections(path: str) -> dict[str, tuple[int, int]] | None:
    """Byte ranges of our vectors file (version 3, csrc/format.cpp ``write_vectors``): header,
    ids and flags; float32 rows; rank factors; code rows; block table and trailer. None when
    the layout does not add up to the file's size (another version: no split then)."""
    with open(path, "rb") as f:
        head = f.read(56)
    size = os.path.getsize(path)
    if len(head) < 56:
        return None
    version, header = struct.unpack_from("<II", head, 8)
    dim, _curvature, slots, _high_water, _kind, code_bytes = struct.unpack_from("<QdQqII", head, 16)
    if version != 3 or header != 56:
        return None
    rows = -(-(header + 9 * slots) // 8) * 8  # ids (8 B) and flags (1 B) a slot, padded to 8
    factors = rows + 4 * slots * dim
    codes = factors + 4 * slots
    end = codes + slots * code_bytes
    if end + 4 * (-(-end // MIB)) + 28 != size:  # block table (4 B a MiB, 20 B) and trailer (8 B)
        return None
    return {
        "header_ids_flags": (0, rows),
        "f32_rows": (rows, factors),
        "rank_factors": (factors, codes),
        "codes": (codes, end),
        "checksums": (end, size),
    }


def resident_by_file(root: str) -> dict[str, int]:
    """Resident bytes of every file under ``root`` mapped into this process, by file role
    (``vectors``, ``graph``, ``columns``, ``faiss``...), our vectors file split by section
    (``vectors:f32_rows``, ``vectors:codes``...)."""
    out: dict[str, int] = {}
    for lo, hi, offset, path in mappings(root):
        name = os.path.basename(path)
        role = name.split("-")[0].split(".")[0]
        sections = vectors_file_sections(path) if role == "vectors" else None
        if not sections:
            out[role] = out.get(role, 0) + present_bytes(lo, hi)
            continue
        for section, (a, b) in sections.items():
            start, stop = max(lo, lo + a - offset), min(hi, lo + b - offset)
            key = f"vectors:{section}"
            out[key] = out.get(key, 0) + (present_bytes(start, stop) if stop > start else 0)
    return out


# ---------------------------------------------------------------------------------------------
# FAISS (child side)


def faiss_new(contender: str, dim: int, M: int, ef_construction: int) -> Any:
    import faiss

    if contender == "faiss-hnsw-flat":
        index = faiss.IndexHNSWFlat(dim, M)
    else:
        index = faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_8bit, M)
    index.hnsw.efConstruction = ef_construction
    if contender == "faiss-hnsw-sq8-refine":
        return faiss.IndexRefineFlat(index), index  # the base kept alive beside its wrapper
    return index, index


def faiss_read_mode(contender: str, dim: int, M: int, workdir: str) -> str:
    """The first of FAISS_READ_MODES under which ``faiss.read_index`` maps (rather than reads)
    a small index of this type, found by building one and looking for its file in
    /proc/self/maps; "read" when none does."""
    import faiss

    probe_dir = tempfile.mkdtemp(dir=workdir, prefix="probe_")
    try:
        x = np.random.default_rng(0).uniform(-0.1, 0.1, size=(1000, dim)).astype(np.float32)
        index, base = faiss_new(contender, dim, M, 40)
        index.train(x)
        index.add(x)
        path = os.path.join(probe_dir, "probe.faiss")
        faiss.write_index(index, path)
        del index, base
        for mode in FAISS_READ_MODES:
            if not hasattr(faiss, mode):
                continue
            try:
                loaded = faiss.read_index(path, getattr(faiss, mode))
            except RuntimeError:
                continue
            mapped = bool(mappings(probe_dir))
            del loaded
            if mapped:
                return mode
        return "read"
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# the two child functions


def save_ours(index: Any, path: str, out: dict[str, Any]) -> None:
    """After one of our builds: peak and current RSS, memory_usage() per vector, then the save."""
    out["peak_rss_build"] = peak_rss()
    out["rss_after_build"] = proc_status()
    out["memory_usage_in_build"] = {k: v / index.ntotal for k, v in index.memory_usage().items()}
    t0 = time.perf_counter()
    index.save(path)
    out["save_s"] = time.perf_counter() - t0
    out["read_mode"] = "read_index(mmap=True, verify=False)"


def build_contender(
    contender: str,
    workdir: str,
    path: str,
    M: int,
    ef_construction: int,
    threads: int,
    sq8_file: str | None = None,
    sq8_build_s: float | None = None,
    f32_path: str | None = None,
    f32_build_s: float | None = None,
) -> dict[str, Any]:
    """Runs in a child process: load the points, build ``contender``, save it under ``path``.
    With ``f32_path`` (``derive_coded``), one of our coded kinds is ours-f32's saved index coded
    again (``set_storage``): the same graph a build of that kind makes (construction reads
    float32 whatever the storage; tests/test_compressed_storage.py checks it link for link), its
    build time ours-f32's plus the coding."""
    points = np.load(os.path.join(workdir, "points.npy"))
    n, dim = points.shape
    before = proc_status()
    out: dict[str, Any] = {"contender": contender, "n": int(n), "dim": int(dim), "threads": threads}
    if contender in OURS and f32_path:
        import poincare_index as pi

        index = pi.read_index(f32_path, num_threads=threads)
        t0 = time.perf_counter()
        index.set_storage(OURS[contender])
        out["recode_s"] = time.perf_counter() - t0
        out["build_s"] = out["recode_s"] + float(f32_build_s or 0.0)
        out["built_from"] = "ours-f32's saved index, read_index + set_storage"
        save_ours(index, path, out)
    elif contender in OURS:
        import poincare_index as pi

        index = pi.PoincareIndex(
            dim, M=M, ef_construction=ef_construction, seed=0, num_threads=threads, storage=OURS[contender]
        )
        t0 = time.perf_counter()
        index.add(points)
        out["build_s"] = time.perf_counter() - t0
        save_ours(index, path, out)
    else:
        import faiss

        faiss.omp_set_num_threads(threads)
        t0 = time.perf_counter()
        if contender == "faiss-hnsw-sq8-refine" and sq8_file:
            # The sq8 child's graph, read back, wrapped with the float32 rows for the refine.
            base = faiss.read_index(sq8_file)
            t0 = time.perf_counter()
            index = faiss.IndexRefineFlat(base, faiss.swig_ptr(points))
            out["built_from"] = "faiss-hnsw-sq8's saved graph + IndexRefineFlat(base, points)"
            out["refine_s"] = time.perf_counter() - t0
            out["build_s"] = out["refine_s"] + float(sq8_build_s or 0.0)
        else:
            index, base = faiss_new(contender, dim, M, ef_construction)
            index.train(points)
            index.add(points)
            out["build_s"] = time.perf_counter() - t0
        out["peak_rss_build"] = peak_rss()
        out["rss_after_build"] = proc_status()
        os.makedirs(path, exist_ok=True)
        t0 = time.perf_counter()
        faiss.write_index(index, os.path.join(path, "index.faiss"))
        out["save_s"] = time.perf_counter() - t0
        del index, base
        out["read_mode"] = faiss_read_mode(contender, int(dim), M, workdir)
    out["rss_before_build"] = before
    out["peak_rss_over_before"] = out["peak_rss_build"] - before["VmRSS"]
    out["file_bytes"] = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    out["peak_rss_child"] = peak_rss()
    return out


def open_index(contender: str, path: str, threads: int, read_mode: str) -> tuple[Any, Callable[..., I64]]:
    """(the saved index opened, find(queries, k, ef) -> ids)."""
    if contender in OURS:
        import poincare_index as pi

        index = pi.read_index(path, num_threads=threads, mmap=True, verify=False)

        def find(q: F32, k: int, ef: int) -> I64:
            return index.search(q, k, ef)[1]

        return index, find
    import faiss

    faiss.omp_set_num_threads(threads)
    flags = getattr(faiss, read_mode) if read_mode in FAISS_READ_MODES else 0
    index = faiss.read_index(os.path.join(path, "index.faiss"), flags)
    if contender == "faiss-hnsw-sq8-refine":
        base = faiss.downcast_index(index.base_index)

        def find_refined(q: F32, k: int, ef: int) -> I64:
            base.hnsw.efSearch = ef
            index.k_factor = ef / k  # the base returns ef candidates, all re-ranked exactly (L2)
            return index.search(q, k)[1]

        return index, find_refined

    def find_faiss(q: F32, k: int, ef: int) -> I64:
        index.hnsw.efSearch = ef
        return index.search(q, k)[1]

    return index, find_faiss


def prime(contender: str, sample: F32, workdir: str, threads: int, read_mode: str) -> None:
    """Build, save, open and search a tiny index of the contender's type, so what the first open
    costs once per process (``read_index`` imports pyarrow and pandas for the columns file:
    ~50 MB) is in the baseline, not in the index's bytes."""
    import faiss

    import poincare_index as pi

    x = np.ascontiguousarray(np.resize(sample, (256, sample.shape[1])) * 0.9, dtype=np.float32)
    x[:, 0] += np.linspace(0.0, 0.01, len(x), dtype=np.float32)  # distinct rows
    path = tempfile.mkdtemp(dir=workdir, prefix="prime_")
    try:
        if contender in OURS:
            tiny = pi.PoincareIndex(x.shape[1], M=8, ef_construction=16, storage=OURS[contender])
            tiny.add(x)
            tiny.save(path)
        else:
            tiny, base = faiss_new(contender, x.shape[1], 8, 16)
            tiny.train(x)
            tiny.add(x)
            faiss.write_index(tiny, os.path.join(path, "index.faiss"))
            del base
        del tiny
        index, find = open_index(contender, path, threads, read_mode)
        find(x[:8], K, 32)
        del index, find
    finally:
        shutil.rmtree(path, ignore_errors=True)


def drop_from_page_cache(path: str) -> None:
    """Flush the files under ``path`` and ask the kernel to drop them from the page cache
    (``posix_fadvise(DONTNEED)`` on our own files: a process opening an index that is not
    cached). A file just written is in the page cache in large folios, and a fault on a mapping
    of it maps the whole folio: one query then makes nearly all of a mapped file resident
    (measured: 96 % of the float32 rows after one query at 50,000 x 128-d), which says nothing
    about what the index reads."""
    for name in os.listdir(path):
        fd = os.open(os.path.join(path, name), os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_into_page_cache(path: str) -> float:
    """Read every file under ``path`` once (read(), not mapped: RSS unchanged) so the timed
    searches after it take minor faults only; the seconds it took."""
    t0 = time.perf_counter()
    buf = bytearray(16 << 20)
    for name in os.listdir(path):
        with open(os.path.join(path, name), "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
    return time.perf_counter() - t0


def measure_contender(
    contender: str,
    workdir: str,
    path: str,
    efs: list[int],
    repeats: int,
    threads: int,
    read_mode: str,
    page_cache: str = "cold",
) -> dict[str, Any]:
    """Runs in a fresh child process: open the saved index, warm up, resident memory, the sweep.
    ``page_cache="cold"``: the index's files are dropped from the page cache before opening and
    read back into it (not mapped) after the resident memory is taken, before the timed sweep."""
    import faiss  # noqa: F401  (every child imports the same libraries before its baseline)

    import poincare_index  # noqa: F401

    q = {
        kind: np.load(os.path.join(workdir, f"{kind}.npy")) for kind in ("warmup", "held_out", "near", "self")
    }
    prime(contender, q["warmup"], workdir, threads, read_mode)
    if page_cache == "cold":
        drop_from_page_cache(path)
    baseline = proc_status()
    t0 = time.perf_counter()
    index, find = open_index(contender, path, threads, read_mode)
    open_s = time.perf_counter() - t0
    after_open = proc_status()
    files_open = resident_by_file(path)
    t0 = time.perf_counter()
    find(q["warmup"], K, max(efs))
    warmup_s = time.perf_counter() - t0
    after_warmup = proc_status()
    files_warmup = resident_by_file(path)
    cache_s = read_into_page_cache(path) if page_cache == "cold" else 0.0
    ids: dict[str, I64] = {}
    seconds: dict[str, float] = {}
    for ef in efs:
        for kind in ("held_out", "near", "self"):
            k = 1 if kind == "self" else K
            s, found = best_of(repeats, find, q[kind], k, ef)
            ids[f"{kind}_{ef}"] = np.asarray(found, dtype=np.int64)
            seconds[f"{kind}_{ef}"] = s
    after_sweep = proc_status()
    files_sweep = resident_by_file(path)
    usage = index.memory_usage() if contender in OURS else None
    np.savez(os.path.join(workdir, f"ids_{contender}.npz"), **ids)
    return {
        "storage": OURS.get(contender),
        "read_mode": read_mode,
        "open_s": open_s,
        "warmup_queries": len(q["warmup"]),
        "warmup_ef": max(efs),
        "warmup_s": warmup_s,
        "page_cache": page_cache,
        "page_cache_fill_s": cache_s,
        "status": {"baseline": baseline, "after_open": after_open, "after_warmup": after_warmup,
                   "after_sweep": after_sweep},
        "resident_files": {"after_open": files_open, "after_warmup": files_warmup,
                           "after_sweep": files_sweep},
        "memory_usage": usage,
        "seconds": seconds,
    }  # fmt: skip


# ---------------------------------------------------------------------------------------------
# the parent: data, truth, children, scores


def truth_metric(contender: str) -> str:
    return "poincare" if contender in OURS else "l2"


def self_at_1(first: I64, points: F32, rows: I64) -> float:
    """Share of stored ``rows`` whose own vector's first result is the row (or an equal vector)."""
    same = first == rows
    found = first >= 0
    same[found] |= np.all(points[first[found]] == points[rows[found]], axis=1)
    return float(np.mean(same))


def scores(ids: I64, truth: Truth) -> dict[str, float]:
    return {"recall_at_1": float(np.mean(ids[:, 0] == truth.ids[:, 0])), "recall_at_10": recall(ids, truth)}


def resident_summary(measured: dict[str, Any], n: int, when: str = "after_warmup") -> dict[str, Any]:
    """Bytes per stored vector resident at ``when`` over the baseline: RSS, its anonymous and
    file parts, and (ours) the part that is not the float32 rows of the vectors file."""
    status, base = measured["status"][when], measured["status"]["baseline"]
    files = measured["resident_files"][when]
    rss = status["VmRSS"] - base["VmRSS"]
    out: dict[str, Any] = {
        "rss_per_vector": rss / n,
        "anon_per_vector": (status["RssAnon"] - base["RssAnon"]) / n,
        "file_per_vector": (status["RssFile"] - base["RssFile"]) / n,
        "files_per_vector": {k: v / n for k, v in files.items()},
    }
    if "vectors:f32_rows" in files:
        f32_rows = files["vectors:f32_rows"]
        out["f32_rows_per_vector"] = f32_rows / n
        if measured.get("storage") != "f32":  # an f32 walk reads the rows: they are its data
            out["without_f32_rows_per_vector"] = (rss - f32_rows) / n
    return out


def ef_at_target(curve: list[dict[str, Any]], r10: float, r1: float, kinds: tuple[str, ...]) -> int | None:
    """The smallest ef where every query kind in ``kinds`` reaches both recall targets."""
    for row in sorted(curve, key=lambda r: r["ef"]):
        if all(row[k]["recall_at_10"] >= r10 and row[k]["recall_at_1"] >= r1 for k in kinds):
            return int(row["ef"])
    return None


def summarize(
    member: str,
    dim: int,
    builds: dict[str, dict[str, Any]],
    curves: dict[str, list[dict[str, Any]]],
    args: Params,
) -> list[dict[str, Any]]:
    """Per contender: ef and QPS at the targets, bytes against FAISS, QPS against FAISS refine
    and ours-f32, build time and peak RSS against ours-f32."""
    out = []
    for contender, curve in curves.items():
        b = builds[contender]
        ef = ef_at_target(curve, args.target_r10, args.target_r1, QUERY_KINDS)
        at = next((r for r in curve if r["ef"] == ef), None)
        row: dict[str, Any] = {
            "member": member, "dim": dim, "n": b["n"], "contender": contender,
            "truth_metric": truth_metric(contender),
            "ef_at_target": ef,
            "ef_at_target_held_out": ef_at_target(curve, args.target_r10, args.target_r1, ("held_out",)),
            "ef_at_target_near": ef_at_target(curve, args.target_r10, args.target_r1, ("near",)),
            "qps_at_target": at["held_out"]["qps"] if at else None,
            "rss_per_vector": b["resident"]["rss_per_vector"],
            "without_f32_rows_per_vector": b["resident"].get("without_f32_rows_per_vector"),
            "build_s": b["build_s"], "peak_rss_build": b["peak_rss_build"],
        }  # fmt: skip
        for other, key in (("faiss-hnsw-flat", "vs_faiss_flat"), ("faiss-hnsw-sq8", "vs_faiss_sq8")):
            if other in builds:
                theirs = builds[other]["resident"]["rss_per_vector"]
                row[f"{key}_rss"] = row["rss_per_vector"] / theirs
                if row["without_f32_rows_per_vector"] is not None:
                    row[f"{key}_without_f32_rows"] = row["without_f32_rows_per_vector"] / theirs
        out.append(row)
    by = {r["contender"]: r for r in out}
    for row in out:
        for other in ("faiss-hnsw-sq8-refine", "ours-f32"):
            if other == row["contender"] or other not in by:
                continue
            theirs = by[other]["qps_at_target"]
            if row["qps_at_target"] and theirs:
                row[f"qps_vs_{other}"] = row["qps_at_target"] / theirs
            # The same ef (the same number of candidates re-ranked): FAISS against its L2 truth
            # may never reach the targets on these points.
            same = next((c for c in curves[other] if c["ef"] == row["ef_at_target"]), None)
            if row["qps_at_target"] and same:
                row[f"qps_vs_{other}_same_ef"] = row["qps_at_target"] / same["held_out"]["qps"]
        if "ours-f32" in builds and row["contender"] in OURS:
            f32 = builds["ours-f32"]
            row["build_vs_ours_f32"] = row["build_s"] / f32["build_s"]
            row["peak_rss_vs_ours_f32"] = row["peak_rss_build"] / f32["peak_rss_build"]
        if row["contender"] in ("ours-f16", "ours-sq8"):
            flat, sq8 = row.get("vs_faiss_flat_without_f32_rows"), row.get("vs_faiss_sq8_without_f32_rows")
            row["must_reach"] = {
                "recall": row["ef_at_target"] is not None,
                "bytes_without_f32_rows": None if flat is None or sq8 is None else flat <= 0.4 and sq8 <= 1.0,
                "bytes_rss": None
                if "vs_faiss_flat_rss" not in row or "vs_faiss_sq8_rss" not in row
                else row["vs_faiss_flat_rss"] <= 0.4 and row["vs_faiss_sq8_rss"] <= 1.0,
            }
    return out


# ---------------------------------------------------------------------------------------------
# printing

MB = 1e6


def build_line(b: dict[str, Any]) -> str:
    r = b["resident"]
    no_f32 = r.get("without_f32_rows_per_vector")
    f32 = r.get("f32_rows_per_vector")
    return (
        f"  {b['contender']:<22} build {b['build_s']:>7.1f} s  peak {b['peak_rss_build'] / MB:>8,.0f} MB "
        f"(+{b['peak_rss_over_before'] / MB:,.0f})  file {b['file_bytes'] / b['n']:>6,.0f} B/v  "
        f"RSS {r['rss_per_vector']:>6,.0f} B/v (anon {r['anon_per_vector']:,.0f}, file "
        f"{r['file_per_vector']:,.0f})  w/o f32 rows {'-' if no_f32 is None else f'{no_f32:,.0f}'}  "
        f"f32 rows {'-' if f32 is None else f'{f32:,.0f}'}  [{b['read_mode']}]"
    )


SWEEP_HEADER = (
    f"  {'contender':<22} {'ef':>4}  {'self@1':>6}  {'held r@1':>8} {'r@10':>6}  {'near r@1':>8} "
    f"{'r@10':>6}  {'QPS held':>9} {'QPS near':>9}  truth (FAISS: Poincaré r@1/r@10 held, near)"
)


def sweep_line(row: dict[str, Any]) -> str:
    h, n = row["held_out"], row["near"]
    line = (
        f"  {row['contender']:<22} {row['ef']:>4}  {row['self_at_1']:>6.3f}  {h['recall_at_1']:>8.3f} "
        f"{h['recall_at_10']:>6.3f}  {n['recall_at_1']:>8.3f} {n['recall_at_10']:>6.3f}  "
        f"{h['qps']:>9,.0f} {n['qps']:>9,.0f}  {row['truth_metric']}"
    )
    if "poincare_recall_at_10" in h:
        line += (
            f" ({h['poincare_recall_at_1']:.3f}/{h['poincare_recall_at_10']:.3f}, "
            f"{n['poincare_recall_at_1']:.3f}/{n['poincare_recall_at_10']:.3f})"
        )
    return line


REFINE = "faiss-hnsw-sq8-refine"
YES_NO = {True: "yes", False: "no", None: "-"}


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def summary_lines(summary: list[dict[str, Any]], args: Params) -> list[str]:
    if not summary:
        return []
    s0 = summary[0]
    lines = [
        f"== {s0['member']} {s0['dim']}-d, n={s0['n']:,}: at recall@10 >= {args.target_r10} and recall@1 >= "
        f"{args.target_r1} (held-out and near; ours Poincaré truth, FAISS L2 truth), {args.search_threads} "
        f"search thread(s)",
        f"  {'contender':<22} {'ef':>4} {'QPS':>8}  {'RSS B/v':>8} {'w/o f32':>8}  {'/flat':>6} {'/sq8':>6}  "
        f"{'QPS/refine':>10} {'same ef':>7} {'QPS/f32':>7}  {'build s':>8} {'/f32':>5} {'peak MB':>8} "
        f"{'/f32':>5}  must-reach (recall, bytes w/o f32 rows, bytes RSS)",
    ]
    for r in summary:
        flat = r.get("vs_faiss_flat_without_f32_rows", r.get("vs_faiss_flat_rss"))
        sq8 = r.get("vs_faiss_sq8_without_f32_rows", r.get("vs_faiss_sq8_rss"))
        lines.append(
            f"  {r['contender']:<22} {fmt(r['ef_at_target'], 'd'):>4} {fmt(r['qps_at_target'], ',.0f'):>8}  "
            f"{r['rss_per_vector']:>8,.0f} {fmt(r['without_f32_rows_per_vector'], ',.0f'):>8}  "
            f"{fmt(flat):>6} {fmt(sq8):>6}  "
            f"{fmt(r.get(f'qps_vs_{REFINE}')):>10} {fmt(r.get(f'qps_vs_{REFINE}_same_ef')):>7} "
            f"{fmt(r.get('qps_vs_ours-f32')):>7}  {r['build_s']:>8.1f} {fmt(r.get('build_vs_ours_f32')):>5} "
            f"{r['peak_rss_build'] / MB:>8,.0f} {fmt(r.get('peak_rss_vs_ours_f32')):>5}  "
            f"{' '.join(YES_NO[v] for v in r['must_reach'].values()) if 'must_reach' in r else ''}"
        )
    lines.append(
        "  (RSS B/v: resident bytes per stored vector after opening and the warm-up, over the baseline;"
    )
    lines.append("   w/o f32: less the resident pages of the float32 rows (f16/sq8 only); /flat, /sq8: that")
    lines.append("   figure (else RSS) over FAISS's RSS; same ef: over FAISS refine's QPS at this row's ef)")
    return lines


# ---------------------------------------------------------------------------------------------


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "families": ["gauss-s0.15", "glove-unit"],
    "dims": [128, 256],
    "n": 1_000_000,  # stored points (GloVe: at most 400,000 - queries - warmup)
    "queries": 1000,  # held-out, near and self queries each
    "warmup": 1000,  # held-out queries run at the largest ef before resident memory is taken
    "efs": [32, 64, 128, 256],
    "M": 16,
    "ef_construction": 200,
    "threads": 2,  # build threads
    "search_threads": 1,  # search threads (QPS per core)
    "repeats": 3,  # timed batches per QPS figure (best of)
    "seed": 0,
    "contenders": list(CONTENDERS),
    "target_r10": 0.95,
    "target_r1": 0.99,
    "page_cache": "cold",  # "cold": the index's files dropped from the page cache before opening
    # Our f16 / sq8 contenders as ours-f32's saved index coded again (set_storage: the same graph
    # a build of that kind makes) instead of a build each: a third of the build time at 1M.
    "derive_coded": False,
    "workdir": "",  # where the data and the saved indexes go (a temporary directory in it)
    "out": os.path.join(HERE, "results", "compressed.json"),
}


def run(args: Params) -> int:
    if args.page_cache not in ("cold", "warm"):
        raise ValueError(f"page_cache must be 'cold' or 'warm', got {args.page_cache!r}")
    unknown = sorted(set(args.contenders) - set(CONTENDERS))
    if unknown:
        raise ValueError(f"unknown contenders {unknown}; known: {list(CONTENDERS)}")
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    res = Results(machine(), settings)
    efs = sorted(int(e) for e in args.efs)
    for name, dim in families.jobs(args.families, args.dims):
        reason = families.unavailable(name)
        if reason:
            print(f"skipped {reason}", flush=True)
            res.skipped.append(reason)
            continue
        n_queries = args.queries + args.warmup
        n = min(args.n, ds.GLOVE_ROWS - n_queries) if families.fixed_dim(name) else args.n
        t0 = time.perf_counter()
        fam = families.make(name, n, n_queries, dim, seed=args.seed)
        rng = np.random.default_rng([args.seed, 3])
        self_rows = np.sort(rng.choice(n, min(args.queries, n), replace=False)).astype(np.int64)
        queries = {
            "warmup": fam.held_out[: args.warmup],
            "held_out": fam.held_out[args.warmup :],
            "near": fam.near[: args.queries],
            "self": fam.points[self_rows],
        }
        workdir = tempfile.mkdtemp(dir=args.workdir or None, prefix=f"bench_compressed_{name}_{dim}d_")
        try:
            np.save(os.path.join(workdir, "points.npy"), fam.points)
            for kind, q in queries.items():
                np.save(os.path.join(workdir, f"{kind}.npy"), np.ascontiguousarray(q))
            truths = {
                metric: {kind: exact_knn(fam.points, queries[kind], K, metric) for kind in QUERY_KINDS}
                for metric in sorted({"poincare", *(truth_metric(c) for c in args.contenders)})
            }
            print(
                f"== {name} {dim}-d: n={n:,}, {args.queries} queries a kind, {args.warmup} warm-up; data and "
                f"truth {time.perf_counter() - t0:.0f} s (cut violations "
                f"{ {m: sum(t.cut_violations for t in ts.values()) for m, ts in truths.items()} })",
                flush=True,
            )
            builds, curves = measure_member(fam, name, dim, n, workdir, truths, self_rows, efs, args, res)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        summary = summarize(name, dim, builds, curves, args)
        res.summary += summary
        print("\n".join(summary_lines(summary, args)), flush=True)
        write_results(args.out, res)
        del fam
    print("\n== builds and memory (bytes per stored vector)")
    for b in res.builds:
        print(f"  {b['member']} {b['dim']}-d n={b['n']:,}")
        print(build_line(b))
    print("\n== sweep")
    print(SWEEP_HEADER)
    for row in res.rows:
        print(sweep_line(row))
    for key in sorted({(s["member"], s["dim"]) for s in res.summary}, key=str):
        print("\n".join(summary_lines([s for s in res.summary if (s["member"], s["dim"]) == key], args)))
    write_results(args.out, res)
    print(f"wrote {args.out}")
    return 0


def measure_member(
    fam: families.Family,
    name: str,
    dim: int,
    n: int,
    workdir: str,
    truths: dict[str, dict[str, Truth]],
    self_rows: I64,
    efs: list[int],
    args: Params,
    res: Results,
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Every contender on one member at one dimension: build child, measure child, scores."""
    builds: dict[str, dict[str, Any]] = {}
    curves: dict[str, list[dict[str, Any]]] = {}
    for contender in args.contenders:
        path = os.path.join(workdir, contender)
        extra: dict[str, Any] = {}
        if contender == "faiss-hnsw-sq8-refine" and "faiss-hnsw-sq8" in builds:
            extra = {
                "sq8_file": os.path.join(workdir, "faiss-hnsw-sq8", "index.faiss"),
                "sq8_build_s": builds["faiss-hnsw-sq8"]["build_s"],
            }
        if args.derive_coded and contender in OURS and contender != "ours-f32" and "ours-f32" in builds:
            extra = {
                "f32_path": os.path.join(workdir, "ours-f32"),
                "f32_build_s": builds["ours-f32"]["build_s"],
            }
        built = call_in_child(
            "bench_compressed", "build_contender", contender=contender, workdir=workdir, path=path,
            M=args.M, ef_construction=args.ef_construction, threads=args.threads, **extra,
        )  # fmt: skip
        measured = call_in_child(
            "bench_compressed", "measure_contender", contender=contender, workdir=workdir, path=path,
            efs=efs, repeats=args.repeats, threads=args.search_threads, read_mode=built["read_mode"],
            page_cache=args.page_cache,
        )  # fmt: skip
        # The refine reads the sq8 graph; derived coded kinds read ours-f32's files.
        if contender not in ("faiss-hnsw-sq8", "ours-f32"):
            shutil.rmtree(path, ignore_errors=True)
        build = {"member": name, "family": fam.family, "dim": dim, **built, **measured}
        build["resident"] = resident_summary(measured, n)
        build["resident_after_sweep"] = resident_summary(measured, n, "after_sweep")
        builds[contender] = build
        res.builds.append(build)
        print(build_line(build), flush=True)
        with np.load(os.path.join(workdir, f"ids_{contender}.npz")) as f:
            ids = {key: f[key] for key in f.files}
        metric = truth_metric(contender)
        curve = []
        for ef in efs:
            row: dict[str, Any] = {
                "member": name, "dim": dim, "n": n, "contender": contender, "ef": ef, "truth_metric": metric,
                "self_at_1": self_at_1(ids[f"self_{ef}"][:, 0], fam.points, self_rows),
                "self_qps": len(self_rows) / measured["seconds"][f"self_{ef}"],
            }  # fmt: skip
            for kind in QUERY_KINDS:
                found = ids[f"{kind}_{ef}"]
                row[kind] = {
                    **scores(found, truths[metric][kind]),
                    "qps": len(found) / measured["seconds"][f"{kind}_{ef}"],
                }
                if metric != "poincare":  # FAISS: its Poincaré recall beside (not its goal)
                    row[kind].update(
                        {f"poincare_{k}": v for k, v in scores(found, truths["poincare"][kind]).items()}
                    )
            curve.append(row)
            res.rows.append(row)
            print(sweep_line(row), flush=True)
        curves[contender] = curve
        write_results(args.out, res)  # after every contender: a long run keeps what it measured
    return builds, curves
