"""LangChain: a ``VectorStore`` on the Poincaré index, a time-aware retriever on ``Memory``, and
our embedders as LangChain ``Embeddings``. Needs the ``[langchain]`` extra.

- :class:`PoincareVectorStore` takes any LangChain ``Embeddings``; its Euclidean vectors are
  mapped into the ball as :class:`~poincare_index.embed.CallableEmbedder` maps them (each row
  scaled to unit length, then ``expmap0``; ``normalize=False`` keeps the norms, ``scale=``
  multiplies first). Scores are Poincaré distances (lower is nearer); relevance scores are
  ``exp(-distance)``. Documents live in a :class:`~poincare_index.Memory` (no decay): ``path=``
  makes the store persistent (every write logged, reopened by the same call), ``save_local`` /
  ``load_local`` copy it to and from a folder as LangChain's FAISS store does.
- :class:`MemoryRetriever` replaces LangChain's ``TimeWeightedVectorStoreRetriever``: one
  ``Memory.search`` ranks by relevance and time together inside the index (its decay policy),
  and counts the accesses, instead of fetching by similarity and re-ranking in Python.
- :class:`PoincareEmbeddings` offers our embedders (hashing, MiniLM) as LangChain ``Embeddings``
  (lists of floats: points in the ball); a store given one uses its points as they are.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Callable

import numpy as np

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.vectorstores import VectorStore
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'poincare_index.integrations.langchain needs LangChain: pip install ".[langchain]" '
        "(from a checkout of poincare_index)"
    ) from exc

from ..embed import CallableEmbedder, HashingEmbedder, as_texts, embedding_rows
from ..memory import Memory
from ._documents import (
    check_in_ball,
    check_kinds,
    check_unique_ids,
    decode_metadata,
    encode_metadata,
    metadata_filter,
    mmr_select,
    resolve_missing,
    scale_advice,
    upsert,
    write_copy,
)

__all__ = ["PoincareVectorStore", "MemoryRetriever", "PoincareEmbeddings"]


class PoincareEmbeddings(Embeddings):
    """One of our embedders (default :class:`~poincare_index.embed.HashingEmbedder`) as a
    LangChain ``Embeddings``: each text becomes a point in the Poincaré ball."""

    def __init__(self, embedder: Any = None) -> None:
        self.embedder = embedder if embedder is not None else HashingEmbedder()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embedder.embed(list(texts)).astype(float).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


class PoincareVectorStore(VectorStore):
    """A LangChain vector store over the Poincaré HNSW index (see the module docstring).

    ``PoincareVectorStore(embedding=<Embeddings>, **index_options)``: ``path`` and ``namespace``
    (a persistent store), ``M``, ``ef_construction``, ``ef_search`` (default None: the index's
    recall target), ``num_threads`` (the index),
    ``normalize``, ``scale`` (the mapping into the ball), ``dim`` (the embedding's dimension; by
    default learnt from the first texts added, or from one probe call when ``path`` is given).
    Filters are dicts on metadata keys with our operators (``$eq $ne $gt $gte $lt $lte $in $nin
    $exists $not $and $or``) applied inside the search, or a callable on ``Document``.
    A key of dates compares by day with a date, a datetime or an ISO-8601 string operand. Ints and
    floats under one key share a float64 column; any other mix of types under a key is refused.
    """

    def __init__(
        self,
        embedding: Embeddings,
        *,
        path: str | os.PathLike[str] | None = None,
        namespace: str = "default",
        dim: int | None = None,
        normalize: bool = True,
        scale: float = 1.0,
        M: int = 16,
        ef_construction: int = 100,
        ef_search: int | None = None,
        num_threads: int | None = None,
        fsync: bool = False,
    ) -> None:
        if not isinstance(embedding, Embeddings):
            raise TypeError(f"embedding must be a LangChain Embeddings, got {type(embedding).__name__}")
        self._embedding = embedding
        self._normalize, self._scale = normalize, scale
        self._memory_options: dict[str, Any] = {
            "path": path, "namespace": namespace, "M": M, "ef_construction": ef_construction,
            "ef_search": ef_search, "num_threads": num_threads, "fsync": fsync,
        }  # fmt: skip
        self._memory: Memory | None = None
        self._embedder: Any = None
        if isinstance(embedding, PoincareEmbeddings):
            self._open(embedding.embedder)
        elif dim is not None or path is not None:
            if path is not None and namespace in Memory.namespaces(path):
                dim = self._stored_dim(path, namespace, dim)
            self._open(self._callable_embedder(dim if dim is not None else self._probe_dim()))

    # ---- the Memory underneath ----------------------------------------------------------
    def _probe_dim(self) -> int:
        return len(self._embedding.embed_query("dimension probe"))

    def _embedder_name(self) -> str:
        cls = type(self._embedding)
        # The mapping settings are part of the name a store records: reopening with others is
        # refused instead of mixing two mappings in one index.
        return (
            f"langchain:{cls.__module__}.{cls.__qualname__}:normalize={self._normalize}:scale={self._scale:g}"
        )

    def _stored_dim(self, path: str | os.PathLike[str], namespace: str, dim: int | None) -> int:
        """The dimension of the store at ``path``, checked against these embeddings (by the
        name the store records: no embedding call when it matches) and ``dim``."""
        stored_name, stored_dim = Memory.stored_embedder(path, namespace)
        name = self._embedder_name()
        if name != stored_name:
            # Refused either way; one probe call makes the message say what these embeddings give.
            given = dim if dim is not None else self._probe_dim()
            raise ValueError(
                f"embedder mismatch: the store at {path} (namespace {namespace!r}) was built with "
                f"embedder {stored_name!r} of dim {stored_dim}; the given embeddings are {name!r}, "
                f"of dim {given}"
            )
        if dim is not None and dim != stored_dim:
            raise ValueError(
                f"dim={dim}, but the store at {path} (namespace {namespace!r}) holds dimension {stored_dim}"
            )
        return stored_dim

    def _callable_embedder(self, dim: int) -> CallableEmbedder:
        return CallableEmbedder(
            self._raw_documents, int(dim), self._embedder_name(), scale=self._scale, normalize=self._normalize
        )

    def _open(self, embedder: Any) -> Memory:
        self._embedder = embedder
        self._memory = Memory(decay=None, embedder=embedder, **self._memory_options)
        return self._memory

    @property
    def memory(self) -> Memory | None:
        """The Memory holding the documents (None until the dimension is known)."""
        return self._memory

    @property
    def embeddings(self) -> Embeddings:
        return self._embedding

    def _raw_documents(self, texts: list[str]) -> np.ndarray:
        """The embeddings' vectors of ``texts``, checked: one per text, all of one length (the
        store's, once it has one)."""
        what = f"{type(self._embedding).__name__}.embed_documents"
        raw = embedding_rows(
            self._embedding.embed_documents(texts), len(texts), f"{what} returned",
            lambda i: f"row {i} (texts[{i}])",
        )  # fmt: skip
        if self._embedder is not None and raw.shape[1] != self._embedder.dim:
            raise ValueError(
                f"{what} returned vectors of length {raw.shape[1]}, but the store holds dimension "
                f"{self._embedder.dim} (built with {self._embedder.name!r})"
            )
        return raw

    def _embed_documents(self, texts: list[str]) -> np.ndarray:
        if isinstance(self._embedding, PoincareEmbeddings):
            return self._embedder.embed(texts)  # type: ignore[no-any-return]
        raw = self._raw_documents(texts)
        if self._embedder is None:
            self._open(self._callable_embedder(raw.shape[1]))
        points = self._embedder.to_ball(raw, len(texts))
        self._check_in_ball(points, raw, lambda i: f"texts[{i}]")
        return points  # type: ignore[no-any-return]

    def _to_ball(self, vector: Sequence[float]) -> np.ndarray:
        """A query vector of the embedding, in the ball (ours are there already)."""
        if isinstance(self._embedding, PoincareEmbeddings):
            return np.asarray([vector], dtype=np.float32)
        raw = np.asarray([vector], dtype=np.float64)
        if raw.ndim != 2:
            raise ValueError(f"the query embedding must be a list of numbers, got shape {raw.shape[1:]}")
        if self._embedder is None:
            self._open(self._callable_embedder(raw.shape[1]))
        elif raw.shape[1] != self._embedder.dim:
            raise ValueError(
                f"the query embedding has length {raw.shape[1]}, but the store holds dimension "
                f"{self._embedder.dim} (built with {self._embedder.name!r})"
            )
        points = self._embedder.to_ball(raw, 1)
        self._check_in_ball(points, raw, lambda i: "the query embedding")
        return points  # type: ignore[no-any-return]

    def _check_in_ball(self, points: np.ndarray, raw: np.ndarray, label: Callable[[int], str]) -> None:
        """A point on the ball's boundary, said in the terms of this store's options (a LangChain
        user sets normalize and scale, and never calls project())."""

        def why(i: int) -> str:
            return scale_advice(raw, i, self._normalize, self._scale)

        check_in_ball(points, label, why)

    # ---- writes -------------------------------------------------------------------------
    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str | None] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Adds (or, for an id already stored, replaces) each text with its metadata; returns
        the ids (new ones are uuid4 hex). An id given twice in one call is refused (ValueError);
        texts, ids and metadata are validated before anything is written."""
        texts = as_texts(texts)  # TypeError naming texts[i]
        n = len(texts)
        for name, given in (("metadatas", metadatas), ("ids", ids)):
            if given is not None and len(given) != n:
                raise ValueError(f"{name} has {len(given)} entries for {n} texts")
        out_ids = [i if i is not None else uuid.uuid4().hex for i in (ids or [None] * n)]
        for i, doc_id in enumerate(out_ids):
            if not isinstance(doc_id, str):
                raise TypeError(f"text {i}: id must be a str, got {type(doc_id).__name__}")
        check_unique_ids(out_ids)
        encoded = [encode_metadata((metadatas or [None] * n)[i], f"text {i}") for i in range(n)]
        if n == 0:
            return []
        vectors = self._embed_documents(texts)
        mem = self._memory
        assert mem is not None
        check_kinds(encoded, _metadata_schema(mem), "text")
        upsert(mem, out_ids, texts, encoded, vectors)
        return out_ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Deletes the documents with these ids (unknown ids are ignored); None: every one."""
        mem = self._memory
        if mem is None:
            return True
        if ids is None:
            mem.delete(filters=lambda r: True)
            return True
        if isinstance(ids, (str, bytes)):
            raise TypeError("ids must be a list of str; use delete([id]) for one")
        ids = list(ids)
        if any(not isinstance(i, str) for i in ids):
            raise TypeError("ids must be str")
        known = [i for i in dict.fromkeys(ids) if i in mem]
        if known:
            mem.delete(filters={"id": {"$in": known}})
        return True

    # ---- reads --------------------------------------------------------------------------
    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored documents among ``ids``, in that order; unknown ids are skipped."""
        mem = self._memory
        if mem is None:
            return []
        out = []
        for doc_id in ids:
            r = mem.get(doc_id)
            if r is not None:
                out.append(Document(id=r.id, page_content=r.text, metadata=decode_metadata(r.metadata)))
        return out

    def similarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, filter: Any = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` nearest documents to an embedding of the store's model, with their
        Poincaré distances (ascending)."""
        mem = self._memory
        if mem is None or len(mem) == 0:
            return []
        results = self._search(self._to_ball(embedding), k, filter)
        return [(_document(r), float(r.distance)) for r in results]

    def _search(self, vector: np.ndarray, k: int, filter: Any) -> list[Any]:
        mem = self._memory
        assert mem is not None
        if callable(filter):
            condition = filter

            def keep(r: Any) -> bool:
                return bool(condition(_document(r)))

            filters: Any = keep
        else:
            filters = resolve_missing(metadata_filter(filter), mem.has_metadata)
        return mem.search(None, k=k, vector=vector, mode="vector", filters=filters, touch=False)

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: Any = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        if self._memory is None or len(self._memory) == 0:
            return []
        return self.similarity_search_with_score_by_vector(
            self._embedding.embed_query(query), k, filter, **kwargs
        )

    def similarity_search(self, query: str, k: int = 4, filter: Any = None, **kwargs: Any) -> list[Document]:
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: Any = None, **kwargs: Any
    ) -> list[Document]:
        return [doc for doc, _ in self.similarity_search_with_score_by_vector(embedding, k, filter, **kwargs)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return _relevance_of_distance

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Any = None,
        **kwargs: Any,
    ) -> list[Document]:
        """``k`` documents among the ``fetch_k`` nearest, chosen for relevance and diversity by
        Poincaré distance (see :func:`~poincare_index.integrations._documents.mmr_select`)."""
        mem = self._memory
        if mem is None or len(mem) == 0:
            return []
        query = self._to_ball(embedding)
        results = self._search(query, max(fetch_k, k), filter)
        points = mem.vectors([r.id for r in results])
        picked = mmr_select(query[0], points, k, lambda_mult)
        return [_document(results[i]) for i in picked]

    def max_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, filter: Any = None,
        **kwargs: Any,
    ) -> list[Document]:  # fmt: skip
        if self._memory is None or len(self._memory) == 0:
            return []
        return self.max_marginal_relevance_search_by_vector(
            self._embedding.embed_query(query), k, fetch_k, lambda_mult, filter, **kwargs
        )

    # ---- construction and files ---------------------------------------------------------
    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> PoincareVectorStore:
        store = cls(embedding, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    def save_local(self, folder_path: str | os.PathLike[str]) -> None:
        """Writes every document (text, id, metadata, point) as a persistent store in
        ``folder_path`` (made if missing); ``load_local`` opens it. As LangChain's FAISS store
        overwrites its files, a store saved there before (same namespace) is replaced, and only
        once the new copy is complete; other files in the folder stay. A store open for writing
        there refuses it (StoreLockedError); this store's own ``path`` is checkpointed."""
        import shutil

        from .._durable import fsync_dir
        from ..memory.store import NamespaceDir

        mem = self._memory
        if mem is None:
            raise ValueError("nothing to save: the store has never held a document")
        target = Path(folder_path)
        options = dict(self._memory_options, path=target)
        own = self._memory_options["path"]
        if own is not None and target.resolve() == Path(own).resolve():
            mem.checkpoint()
            return
        old = NamespaceDir(target, options["namespace"])  # a file or a saved index: FileExistsError
        if not old.exists:
            write_copy(mem, self._embedder, **options)
            return
        staging = target / f".save-{uuid.uuid4().hex}"  # beside it: the renames stay on one disk
        retired = target / f".old-{uuid.uuid4().hex}"
        try:
            write_copy(mem, self._embedder, **dict(options, path=staging))
            old.lock()  # held across the swap: a writer on the old copy cannot lose writes in it
            try:
                old.dir.rename(retired)
                try:
                    (staging / old.dir.name).rename(old.dir)
                except BaseException:
                    retired.rename(old.dir)
                    raise
                fsync_dir(target)
            finally:
                old.unlock()
            shutil.rmtree(retired)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    @classmethod
    def load_local(
        cls, folder_path: str | os.PathLike[str], embeddings: Embeddings, **kwargs: Any
    ) -> PoincareVectorStore:
        """The store ``save_local`` wrote (or any ``path=`` store), opened for writing;
        FileNotFoundError naming the folder when it holds no store (of ``namespace``)."""
        from ..memory.store import NamespaceDir

        folder = Path(folder_path)
        if not folder.is_dir():
            raise FileNotFoundError(f"no store at {folder}: the folder does not exist")
        namespace = kwargs.get("namespace", "default")
        if not NamespaceDir(folder, namespace).exists:
            raise FileNotFoundError(f"no store at {folder}: it holds none in namespace {namespace!r}")
        return cls(embeddings, path=folder_path, **kwargs)

    def close(self) -> None:
        """Closes the Memory (a persistent store is checkpointed and unlocked)."""
        if self._memory is not None:
            self._memory.close()


def _metadata_schema(mem: Memory) -> Any:
    table = mem.index._columns.metadata
    return None if table is None else table.schema


def _relevance_of_distance(d: float) -> float:
    return float(np.exp(-d))


def _document(result: Any) -> Document:
    return Document(id=result.id, page_content=result.text, metadata=decode_metadata(result.metadata))


class MemoryRetriever(BaseRetriever):
    """LangChain retriever over a :class:`~poincare_index.Memory`: ``Memory.search`` with the
    store's decay policy (or ``decay=`` here), so recency and relevance are ranked together in
    one call inside the index, as ``TimeWeightedVectorStoreRetriever`` ranks them by hand.

    Each document's metadata holds the memory's own metadata plus ``id``, ``t`` (when it was
    stored, aware UTC), ``access_count`` and ``score``. ``touch=True`` (the default, as the
    Memory's) counts each retrieval, which raises a retrieved memory under an access-based
    policy such as ``Ebbinghaus``. ``at_time``: the time to rank at (default now). ``decay``
    and ``time_coef`` override the store's for this retriever (None: the store's;
    ``time_coef=0`` ranks by relevance alone).
    """

    memory: Any
    k: int = 4
    mode: str = "vector"
    decay: Any = None
    time_coef: float | None = None
    touch: bool = True
    at_time: Any = None
    filters: Any = None

    model_config = {"arbitrary_types_allowed": True}

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        options: dict[str, Any] = {}
        if self.decay is not None:
            options["decay"] = self.decay
        if self.time_coef is not None:
            options["time_coef"] = self.time_coef
        results = self.memory.search(
            query, k=self.k, mode=self.mode, touch=self.touch, at_time=self.at_time,
            filters=self.filters, **options,
        )  # fmt: skip
        out = []
        for r in results:
            extra = {"id": r.id, "t": r.t, "access_count": r.access_count, "score": r.score}
            out.append(Document(id=r.id, page_content=r.text, metadata={**r.metadata, **extra}))
        return out
