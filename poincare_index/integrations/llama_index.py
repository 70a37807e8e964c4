"""LlamaIndex: ``PoincareVectorStore``, a ``BasePydanticVectorStore`` on the Poincaré index.
Needs the ``[llama-index]`` extra.

Nodes arrive with their embeddings (LlamaIndex embeds them), Euclidean vectors that are mapped
into the ball as :class:`~poincare_index.embed.CallableEmbedder` maps them (unit length, then
``expmap0``; ``normalize=False`` keeps the norms, ``scale=`` multiplies first). The nodes live in
a :class:`~poincare_index.Memory` without decay, text included (``stores_text``), so
``VectorStoreIndex`` needs no separate docstore; ``path=`` makes it persistent, ``persist`` /
``from_persist_path`` copy it as LlamaIndex's ``SimpleVectorStore`` does.

Our own embedders work as LlamaIndex embedding models through :class:`PoincareEmbedding`; their
vectors are points in the ball already, so give the store ``input_space="ball"`` to use them as
they are.

Query modes: ``DEFAULT`` (vector; similarities ``exp(-Poincaré distance)``), ``MMR``
(``mmr_threshold`` is the relevance weight, default 0.5), ``TEXT_SEARCH`` (BM25 on
``query_str``; similarities are the BM25 scores) and ``HYBRID`` (our fusion; ``alpha`` 1 is
vector only, 0 keyword only; similarities are the fused scores in [0, 1]). ``MetadataFilters``
become our filters inside the search; operators without an equivalent are refused by name.
"""

from __future__ import annotations

import math
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

try:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.schema import BaseNode, MetadataMode
    from llama_index.core.vector_stores.types import (
        BasePydanticVectorStore,
        FilterCondition,
        FilterOperator,
        MetadataFilter,
        MetadataFilters,
        VectorStoreQuery,
        VectorStoreQueryMode,
        VectorStoreQueryResult,
    )
    from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'poincare_index.integrations.llama_index needs LlamaIndex: pip install ".[llama-index]" '
        "(from a checkout of poincare_index)"
    ) from exc

from ..embed import CallableEmbedder, embedding_rows
from ..memory import Memory
from ..memory.store import NamespaceDir
from ._documents import (
    PREFIX,
    check_in_ball,
    check_kinds,
    decode_metadata,
    encode_metadata,
    mmr_select,
    resolve_missing,
    scale_advice,
    upsert,
    write_copy,
)

__all__ = ["PoincareVectorStore", "PoincareEmbedding", "metadata_filters_to_dict"]

_EMBEDDER_NAME = "llama-index:node-embeddings"
_OPERATORS = {
    FilterOperator.EQ: "$eq", FilterOperator.NE: "$ne", FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte", FilterOperator.LT: "$lt", FilterOperator.LTE: "$lte",
    FilterOperator.IN: "$in", FilterOperator.NIN: "$nin",
}  # fmt: skip


class PoincareEmbedding(BaseEmbedding):
    """One of our embedders (default :class:`~poincare_index.embed.HashingEmbedder`) as a
    LlamaIndex embedding model: each text becomes a point in the Poincaré ball. Pair it with
    ``PoincareVectorStore(input_space="ball")``."""

    _embedder: Any = PrivateAttr(default=None)

    def __init__(self, embedder: Any = None, **kwargs: Any) -> None:
        from ..embed import HashingEmbedder

        super().__init__(model_name=getattr(embedder, "name", "hashing"), **kwargs)
        self._embedder = embedder if embedder is not None else HashingEmbedder()

    @classmethod
    def class_name(cls) -> str:
        return "PoincareEmbedding"

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._embedder.embed(list(texts)).astype(float).tolist()  # type: ignore[no-any-return]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._get_text_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


def _check_replaceable(target: Path) -> None:
    """persist may replace ``target`` only when it is a store directory (an older copy)."""
    if not target.exists():
        return
    if not target.is_dir():
        raise FileExistsError(f"{target} is a file, not a store persist() wrote; choose another path")
    names = set(Memory.namespaces(target))
    others = [p.name for p in target.iterdir() if p.name not in names]
    if not names or others:
        raise FileExistsError(
            f"{target} holds files that are not a memory store ({', '.join(sorted(others)[:3]) or 'empty'}); "
            "persist() replaces only a store it wrote"
        )


def _alpha(value: Any) -> float:
    """VectorStoreQuery.alpha checked: the vector share of a hybrid query, in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"alpha must be a number in [0, 1], got {type(value).__name__}")
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"alpha must be in [0, 1], got {value:g}")
    return float(value)


def _no_embedding(texts: list[str]) -> Any:
    raise ValueError("the LlamaIndex store embeds nothing itself: nodes must carry their embeddings")


def metadata_filters_to_dict(filters: MetadataFilters | None) -> dict[str, Any] | None:
    """LlamaIndex ``MetadataFilters`` as our dict filter on the stored metadata columns. ``==``
    ``!=`` ``>`` ``>=`` ``<`` ``<=`` ``in`` ``nin`` ``is_empty`` and the conditions and / or /
    not map one to one; ``any`` ``all`` ``contains`` (array values) and ``text_match`` are
    refused with a ValueError naming them: array values are kept but not indexed for filters."""
    if filters is None:
        return None
    parts = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            sub = metadata_filters_to_dict(f)
            if sub is not None:
                parts.append(sub)
            continue
        parts.append(_one_filter(f))
    if not parts:
        return None
    condition = filters.condition or FilterCondition.AND
    if condition == FilterCondition.AND:
        return parts[0] if len(parts) == 1 else {"$and": parts}
    if condition == FilterCondition.OR:
        return parts[0] if len(parts) == 1 else {"$or": parts}
    if condition == FilterCondition.NOT:
        # LlamaIndex's NOT holds when none of its filters does: not(f1 or f2 ...).
        return _negate(parts[0] if len(parts) == 1 else {"$or": parts})
    raise ValueError(f"filter condition {condition!r} is not supported")


def _negate(condition: dict[str, Any]) -> dict[str, Any]:
    """not(condition): a field condition negated with $not; and/or by De Morgan."""
    if "$and" in condition:
        return {"$or": [_negate(c) for c in condition["$and"]]}
    if "$or" in condition:
        return {"$and": [_negate(c) for c in condition["$or"]]}
    (field, test), *rest = condition.items()
    if rest:
        return {"$or": [_negate({k: v}) for k, v in condition.items()]}
    if not isinstance(test, dict):
        test = {"$eq": test}
    return {field: {"$not": test}}


def _one_filter(f: MetadataFilter) -> dict[str, Any]:
    column = PREFIX + f.key
    if f.operator in _OPERATORS:
        value = f.value
        if f.operator in (FilterOperator.IN, FilterOperator.NIN):
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise TypeError(
                    f"metadata filter {f.operator.value!r} on {f.key!r} needs a list, got {value!r}"
                )
            value = list(value)
        return {column: {_OPERATORS[f.operator]: value}}
    if f.operator == FilterOperator.IS_EMPTY:
        return {column: {"$exists": False}}
    raise ValueError(
        f"metadata filter operator {f.operator.value!r} (on {f.key!r}) is not supported: array "
        "values are stored but not indexed for filters, and text matching is the TEXT_SEARCH mode"
    )


class PoincareVectorStore(BasePydanticVectorStore):
    """A LlamaIndex vector store over the Poincaré HNSW index (see the module docstring).

    ``PoincareVectorStore(dim=None, path=None, namespace="default", normalize=True, scale=1.0,
    input_space="euclidean", M=16, ef_construction=100, ef_search=None, num_threads=None)``
    (``ef_search`` None: searches at the index's recall target, 0.95): with
    ``dim=None`` the dimension is taken from the first node added (or from the store at
    ``path``); ``input_space="ball"`` takes node and query embeddings as points in the ball (from
    :class:`PoincareEmbedding`), checked to lie inside it, instead of mapping them there.
    """

    stores_text: bool = True
    flat_metadata: bool = False

    dim: int | None = None
    path: str | None = None
    namespace: str = "default"
    normalize: bool = True
    scale: float = 1.0
    input_space: str = "euclidean"
    M: int = 16
    ef_construction: int = 100
    ef_search: int | None = None
    num_threads: int | None = None

    _memory: Any = PrivateAttr(default=None)
    _embedder: Any = PrivateAttr(default=None)

    def __init__(self, dim: int | None = None, path: str | os.PathLike[str] | None = None, **kwargs: Any):
        super().__init__(dim=dim, path=None if path is None else str(path), **kwargs)
        if self.input_space not in ("euclidean", "ball"):
            raise ValueError(f"input_space must be 'euclidean' or 'ball', got {self.input_space!r}")
        if self.path is not None and Memory.namespaces(self.path).count(self.namespace):
            name, stored_dim = Memory.stored_embedder(self.path, self.namespace)
            if self.dim is not None and self.dim != stored_dim:
                raise ValueError(f"dim={self.dim}, but the store at {self.path} holds dimension {stored_dim}")
            self._open(stored_dim)
        elif self.dim is not None:
            self._open(self.dim)

    @classmethod
    def class_name(cls) -> str:
        return "PoincareVectorStore"

    def _open(self, dim: int) -> None:
        # The mapping settings are part of the name a store records, so reopening it with
        # other settings is refused instead of mixing two mappings in one index.
        name = f"{_EMBEDDER_NAME}:{self.input_space}:normalize={self.normalize}:scale={self.scale:g}"
        self._embedder = CallableEmbedder(
            _no_embedding, int(dim), name, scale=self.scale, normalize=self.normalize
        )
        self.dim = int(dim)
        self._memory = Memory(
            decay=None, embedder=self._embedder, path=self.path, namespace=self.namespace, M=self.M,
            ef_construction=self.ef_construction, ef_search=self.ef_search, num_threads=self.num_threads,
        )  # fmt: skip

    @property
    def client(self) -> Memory | None:
        """The Memory holding the nodes (None until the dimension is known)."""
        return self._memory

    # ---- writes -------------------------------------------------------------------------
    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Adds the nodes (replacing any with the same node_id); returns their ids."""
        nodes = list(nodes)
        if not nodes:
            return []
        raw = []
        for i, node in enumerate(nodes):
            emb = node.embedding
            if emb is None:
                raise ValueError(f"node {i} ({node.node_id}) has no embedding")
            raw.append(emb)

        def label(i: int) -> str:
            return f"nodes[{i}] ({nodes[i].node_id!r})"

        raw_arr = embedding_rows(raw, len(raw), "the nodes' embeddings are", label)
        if self._memory is None:
            self._open(raw_arr.shape[1])
        elif raw_arr.shape[1] != self.dim:
            raise ValueError(
                f"{label(0)}: its embedding has length {raw_arr.shape[1]}, but the store holds "
                f"dimension {self.dim}"
            )
        points = self._points(raw_arr, label)
        texts = [node.get_content(metadata_mode=MetadataMode.NONE) for node in nodes]
        metas = [
            encode_metadata(node_to_metadata_dict(node, remove_text=True, flat_metadata=False), f"node {i}")
            for i, node in enumerate(nodes)
        ]
        ids = [node.node_id for node in nodes]
        mem = self._memory
        table = mem.index._columns.metadata
        check_kinds(metas, None if table is None else table.schema, "node")
        upsert(mem, ids, texts, metas, points)
        return ids

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Deletes every node of the source document ``ref_doc_id``."""
        if not isinstance(ref_doc_id, str):
            raise TypeError(f"ref_doc_id must be a str, got {type(ref_doc_id).__name__}")
        mem = self._memory
        if mem is not None and len(mem):
            mem.delete(filters=resolve_missing({PREFIX + "ref_doc_id": ref_doc_id}, mem.has_metadata))

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        """Deletes the nodes with these ids that match ``filters`` (either may be None)."""
        mem = self._memory
        if mem is None or len(mem) == 0 or (node_ids is None and filters is None):
            return
        condition = self._condition(node_ids, filters)
        if condition is not None:
            mem.delete(filters=condition)

    def clear(self) -> None:
        if self._memory is not None and len(self._memory):
            self._memory.delete(filters=lambda r: True)

    def _condition(self, node_ids: Sequence[str] | None, filters: MetadataFilters | None) -> Any:
        parts = []
        if node_ids is not None:
            parts.append({"id": {"$in": [str(i) for i in node_ids]}})
        mapped = metadata_filters_to_dict(filters)
        if mapped is not None:
            parts.append(mapped)
        if not parts:
            return None
        condition = parts[0] if len(parts) == 1 else {"$and": parts}
        return resolve_missing(condition, self._memory.has_metadata)

    # ---- reads --------------------------------------------------------------------------
    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        mem = self._memory
        if mem is None or len(mem) == 0 or (node_ids is not None and len(node_ids) == 0):
            return []
        return [self._node(r) for r in mem.list(self._condition(node_ids, filters))]

    def _node(self, result: Any) -> BaseNode:
        node = metadata_dict_to_node(decode_metadata(result.metadata), text=result.text)
        return node

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        mem = self._memory
        if mem is None or len(mem) == 0:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        k = query.similarity_top_k
        # An empty node_ids / doc_ids list restricts nothing (VectorStoreIndex passes one).
        condition = self._condition(query.node_ids or None, query.filters)
        if query.doc_ids:
            by_doc = resolve_missing({PREFIX + "ref_doc_id": {"$in": list(query.doc_ids)}}, mem.has_metadata)
            condition = by_doc if condition is None else {"$and": [condition, by_doc]}
        mode = query.mode
        if mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.MMR):
            point = self._query_point(query)
            fetch = k if mode == VectorStoreQueryMode.DEFAULT else max(4 * k, 20)
            results = mem.search(None, k=fetch, vector=point, mode="vector", filters=condition, touch=False)
            if mode == VectorStoreQueryMode.MMR and results:
                weight = 0.5 if query.mmr_threshold is None else float(query.mmr_threshold)
                picked = mmr_select(point[0], mem.vectors([r.id for r in results]), k, weight)
                results = [results[i] for i in picked]
            similarities = [float(np.exp(-r.distance)) for r in results]
        elif mode in (VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.HYBRID):
            if not query.query_str:
                raise ValueError(f"query mode {mode.value!r} needs query_str")
            if mode == VectorStoreQueryMode.TEXT_SEARCH:
                results = mem.search(query.query_str, k=k, mode="keyword", filters=condition, touch=False,
                                     vector=np.zeros((1, self.dim or 1), dtype=np.float32))  # fmt: skip
            else:
                alpha = 0.5 if query.alpha is None else _alpha(query.alpha)
                results = mem.search(
                    query.query_str, k=query.hybrid_top_k or k, mode="hybrid", filters=condition, touch=False,
                    vector=self._query_point(query), keyword_weight=1.0 - alpha,
                )  # fmt: skip
            similarities = [float(np.exp(r.relevance)) for r in results]
        else:
            raise ValueError(
                f"query mode {mode.value!r} is not supported: use default, mmr, text_search or hybrid"
            )
        nodes = [self._node(r) for r in results]
        return VectorStoreQueryResult(nodes=nodes, similarities=similarities, ids=[r.id for r in results])

    def _query_point(self, query: VectorStoreQuery) -> np.ndarray:
        if query.query_embedding is None:
            raise ValueError("this query mode needs query_embedding")
        raw = np.asarray([query.query_embedding], dtype=np.float64)
        if raw.ndim != 2 or raw.shape[1] != self.dim:
            raise ValueError(
                f"query_embedding has length {raw.shape[-1]}, but the store holds dimension {self.dim}"
            )
        return self._points(raw, lambda i: "query_embedding")

    def _points(self, raw: np.ndarray, label: Callable[[int], str]) -> np.ndarray:
        """Embeddings (of the store's dimension) as points in the ball: mapped there, or
        (input_space="ball") as given; ValueError naming ``label(row)`` for a point that is not
        inside the ball, saying which option to change."""
        if self.input_space == "ball":
            points = raw.astype(np.float32)

            def why(i: int) -> str:
                return (
                    f"its embedding has norm {np.linalg.norm(raw[i]):.4g}: with input_space='ball' "
                    "embeddings must be points inside the Poincaré ball (norm below 1, as "
                    "PoincareEmbedding's are); use input_space='euclidean' for other models"
                )

        else:
            points = self._embedder.to_ball(raw, raw.shape[0])

            def why(i: int) -> str:
                return scale_advice(raw, i, self.normalize, self.scale)

        check_in_ball(points, label, why)
        return points  # type: ignore[no-any-return]

    # ---- files --------------------------------------------------------------------------
    def persist(self, persist_path: str, fs: Any = None) -> None:
        """Writes the nodes as a store at ``persist_path`` (a directory; an older one there is
        replaced only once the new one is complete). The store's own ``path`` is checkpointed."""
        if fs is not None and type(fs).__name__ != "LocalFileSystem":
            raise ValueError("persist writes to the local file system only")
        mem = self._memory
        if mem is None:
            return
        target = Path(persist_path)
        if self.path is not None and target.resolve() == (Path(self.path) / "").resolve():
            mem.checkpoint()
            return
        _check_replaceable(target)
        staging = target.with_name(f"{target.name}.tmp-{uuid.uuid4().hex}")
        write_copy(
            mem, self._embedder, staging, namespace=self.namespace, M=self.M,
            ef_construction=self.ef_construction, ef_search=self.ef_search,
        )  # fmt: skip
        if not target.exists():
            staging.rename(target)
            return
        # Replacing an older copy: its namespaces' writer locks are held across the swap, so a
        # store open on it for writing refuses the swap (StoreLockedError) instead of losing
        # its later writes; the old copy is removed only once the new one is in place.
        held = [NamespaceDir(target, name) for name in Memory.namespaces(target)]
        try:
            for ns in held:
                ns.lock()
            old = target.with_name(f"{target.name}.old-{uuid.uuid4().hex}")
            target.rename(old)
            staging.rename(target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        finally:
            for ns in held:
                ns.unlock()
        shutil.rmtree(old)

    @classmethod
    def from_persist_path(cls, persist_path: str, fs: Any = None, **kwargs: Any) -> PoincareVectorStore:
        """The store ``persist`` wrote, opened for writing."""
        if not Path(persist_path).is_dir():
            raise FileNotFoundError(f"no store at {persist_path}")
        return cls(path=persist_path, **kwargs)

    def close(self) -> None:
        if self._memory is not None:
            self._memory.close()
