"""The runner's three registries, by name: datasets, contenders and suites.

* ``DATASETS``: every data set a configuration may name, with where it comes from. Three kinds:
  ``split`` (database + held-out queries, ``datasets.load``: what the k-NN loop and the
  single-index suites use), ``family`` (a member of the data family, ``families.make``: stored
  points, held-out and near queries; what the families loop uses) and ``text`` (timestamped text
  for the Memory suites, ``text_data``). A suite parameter named ``data``, ``dataset``,
  ``datasets`` or ``families`` is checked against the registry before the suite runs.
* ``CONTENDERS``: the engines behind one adapter (``adapters.py``): ours, FAISS, hnswlib, NGT.
* ``SUITES``: what a configuration runs: the module whose ``run(params)`` measures it. ``knn``
  and ``families`` are the generic loops (datasets x contenders x a sweep of search settings);
  the others measure something of their own (a Memory, a service, shards, a browser page...).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import datasets as ds
import families


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    kind: str  # "split", "family" or "text"
    load: Callable[..., Any]
    description: str


def _split_entry(name: str) -> DatasetEntry:
    def load(n: int | None, n_queries: int, seed: int = 0) -> ds.Dataset:
        return ds.load(name, n, n_queries, seed=seed)

    return DatasetEntry(name, "split", load, f"datasets.load({name!r}): database + held-out queries")


def _family_entry(name: str) -> DatasetEntry:
    def load(n: int, n_queries: int, dim: int, seed: int = 0) -> families.Family:
        return families.make(name, n, n_queries, dim, seed=seed)

    return DatasetEntry(name, "family", load, f"families.make({name!r}): points, held-out and near queries")


def _text_entries() -> dict[str, DatasetEntry]:
    import text_data

    return {
        "memory-items": DatasetEntry(
            "memory-items",
            "text",
            text_data.memory_items,
            "Debian changelog items (generated notes where there are none), dated",
        ),
        "labelled-changelog": DatasetEntry(
            "labelled-changelog",
            "text",
            text_data.labelled_changelog_split,
            "changelog items labelled by source package: memories and queries",
        ),
        "generated-notes": DatasetEntry(
            "generated-notes", "text", text_data.generated_items, "seeded synthetic notes over a year"
        ),
    }


# A name may be both a split data set and a family member (hierarchy, glove-boundary): the two
# are different samplings of the same generator, told apart by the kind the loop asks for.
DATASETS: dict[str, dict[str, DatasetEntry]] = {
    "split": {name: _split_entry(name) for name in ds.DATASETS},
    "family": {name: _family_entry(name) for name in families.family_names()},
    "text": _text_entries(),
}


def dataset(name: str, kind: str = "split") -> DatasetEntry:
    """The registered data set ``name`` of ``kind``."""
    try:
        return DATASETS[kind][name]
    except KeyError:
        known = sorted(DATASETS.get(kind, {}))
        raise ValueError(f"unknown {kind} dataset {name!r}; known: {known}") from None


def contenders() -> dict[str, Any]:
    """Every adapter by name (imported on first use: adapters.py imports faiss and hnswlib)."""
    import adapters

    return adapters.ALL_CONTENDERS


# suite name -> (module, what it measures). Each module has DEFAULTS and run(params).
SUITES: dict[str, tuple[str, str]] = {
    "knn": ("bench_knn", "k-NN loop: datasets x contenders (ours, FAISS, hnswlib, NGT) x ef, threads"),
    "families": ("bench_families", "family loop: members x dims x contenders x ef / (epsilon, edge_size)"),
    "code_order": (
        "bench_code_order",
        "the order by float16 / 8-bit codes of the coordinates, exact re-rank",
    ),
    "compressed": (
        "bench_compressed",
        "storage f32/f16/sq8 (mmap open, exact re-rank) against FAISS HNSWFlat, HNSWSQ8 (+refine)",
    ),
    "recall_calibration": (
        "bench_recall_calibration",
        "the recall target's stand-in queries against held-out ones, and the walk/scan cost",
    ),
    "build": ("bench_build", "build time beside FAISS's lifted build, recall at a few ef"),
    "large": ("bench_large", "cost against size, each build in a child process, fitted exponents"),
    "footprint": ("bench_footprint", "bytes per vector (RSS and layout) per contender, child processes"),
    "stream_add": ("bench_stream_add", "peak RSS of a large add (add_from against add)"),
    "open": ("bench_open", "opening a saved index: full, mmap, fast open"),
    "range": ("bench_range", "range_search: flat and HNSW against FAISS IndexFlatL2"),
    "temporal": ("bench_temporal", "fused search_scored and filters against re-rank / post-filter"),
    "fused_glove": ("bench_fused_glove", "the fused walk on GloVe"),
    "custom_decay": ("bench_custom_decay", "CustomDecay against HalfLife in search_scored"),
    "findable": ("bench_findable", "whether a graph finds what it holds, whole and hash halves"),
    "churn": ("bench_churn", "remove and re-add cycles against a fresh build and hnswlib"),
    "sharded": ("bench_sharded", "ShardedIndex on Ray against one index"),
    "fanout": ("bench_fanout", "where a sharded batch spends its time"),
    "time_shards": ("bench_time_shards", "time-partitioned shards"),
    "scaling": ("bench_scaling", "the scaling model: shard and Ray measurements"),
    "hierarchy": ("bench_hierarchy", "Poincaré embeddings of WordNet against gensim"),
    "memory": ("bench_memory", "Memory: add, search latency, hand-built re-rank, tokens, quality"),
    "chat_loop": ("bench_chat_loop", "a chat loop: add then search, per mode"),
    "keyword_engines": ("bench_keyword_engines", "our keyword segments against tantivy"),
    "hybrid": ("bench_hybrid", "hybrid fusion rules on labelled changelog items"),
    "readers": ("bench_readers", "readers following a writer"),
    "retention": ("bench_retention", "retention at 1M memories"),
    "memory_service": ("bench_memory_service", "MemoryService on Ray against Memory in process"),
    "adapters": ("bench_adapters", "LangChain adapter overhead"),
    "inspector": ("bench_inspector", "inspector latency under clients, page load in chromium"),
    "cost_table": ("cost_table", "the seed's window-size vs token-cost table"),
}

# Suite parameters that name data sets, and the kind each names.
DATASET_PARAMS = {"datasets": "split", "dataset": "split", "data": "split", "families": "family"}


def suite(name: str) -> Any:
    """The suite's module (with ``DEFAULTS`` and ``run``)."""
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; known: {sorted(SUITES)}")
    return importlib.import_module(SUITES[name][0])


def check_datasets(params: dict[str, Any], own_data: tuple[str, ...] = ()) -> None:
    """Raise ValueError when a parameter names a data set the registry does not know. (Some
    suites take data of their own under ``data``, e.g. ``one-depth`` or WordNet's ``mammals``;
    those are listed in the suite's ``OWN_DATA``.)"""
    for key, kind in DATASET_PARAMS.items():
        if key not in params or params[key] is None:
            continue
        names = params[key] if isinstance(params[key], list) else [params[key]]
        for name in names:
            if name not in DATASETS[kind] and name not in own_data:
                dataset(name, kind)
