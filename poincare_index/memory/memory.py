"""Memory: text in, time-aware recall out, on a PoincareIndex with its time columns."""

from __future__ import annotations

import functools
import importlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .. import _time
from .._rwlock import ReadWriteLock
from .._validation import as_positive_int, as_unit_interval
from ..decay import DecayPolicy
from ..embed import embed_checked
from ..index import PoincareIndex
from .journal import MemoryJournal, batch_json
from .keyword import KeywordIndex
from .log import LogWriter
from .opening import Config, open_config
from .result import MemoryStats, Result
from .retention import Retention, run_retention, write_parquet_durably
from .rows import make_batch
from .search import SearchRequest, run_search
from .state import MemoryState
from .store import NamespaceDir, StoreLockedError
from .tokens import approx_token_count
from .usage import UsageCounter, load_usage, save_usage
from .views import MemoryViews

__all__ = ["Memory", "StoreLockedError"]

_UNSET: Any = object()
_INSPECTOR = "poincare_index.inspector"
_MODES = ("vector", "hybrid", "keyword")


class Memory(MemoryViews, MemoryJournal, MemoryState):
    """A store of memories (text, time, validity window, access count, metadata) with fused search.

    ``Memory(decay=HalfLife(hours=24 * 14))`` keeps everything in this process;
    ``Memory(path=dir)`` persists to ``dir/<namespace>`` (default namespace "default") and reopens
    as it was: configuration from the store's config.json, memories from its snapshot and log.
    Arguments given when reopening replace the saved query settings (decay, depth_bias,
    time_coef, future_weight); the embedder must be the one the store was built with.

    Thread-safe: searches run concurrently, writes are serialised. One process at a time may
    open a namespace for writing (:class:`StoreLockedError` otherwise); ``read_only=True`` opens
    without the lock and refuses writes (a read-only search does not count accesses).

    Durability: every write is in the store's log before the call returns (a killed process
    loses nothing acknowledged); ``fsync=True`` syncs each write to disk (power loss too).

    Deleted memories leave their slots in the graph until more than half of the rows (and at
    least ``compact_min_rows``) are deleted; then the index is rebuilt from the live memories.
    """

    def __init__(
        self,
        decay: DecayPolicy | None = _UNSET,
        embedder: Any = None,
        depth_bias: float = _UNSET,
        time_coef: float = _UNSET,
        path: str | os.PathLike[str] | None = None,
        *,
        namespace: str = "default",
        future_weight: float = _UNSET,
        future_tolerance: timedelta = _UNSET,
        token_counter: Callable[[str], int] | None = None,
        read_only: bool = False,
        fsync: bool = False,
        M: int = 16,
        ef_construction: int = 100,
        ef_search: int = 128,
        num_threads: int | None = None,
        checkpoint_every: int = 20_000,
        compact_min_rows: int = 4096,
        retention: Retention | None = None,
        progress: bool = False,
    ) -> None:
        if not isinstance(progress, bool):
            raise TypeError(f"progress must be True or False, got {type(progress).__name__}")
        self._progress = progress  # bars (tqdm) for opening a store and for compactions
        if token_counter is not None and not callable(token_counter):
            raise TypeError("token_counter must be a callable str -> int")
        if path is None and read_only:
            raise ValueError("read_only=True needs a path")
        if retention is not None and not isinstance(retention, Retention):
            raise TypeError(f"retention must be a Retention(...) or None, got {type(retention).__name__}")
        self._retention = retention
        self._next_retention_us: int | None = None  # None: due at the first write
        self._retaining = False
        self._ns = NamespaceDir(Path(path), namespace) if path is not None else None
        self._read_only = bool(read_only)
        if self._ns is not None and not self._read_only:
            self._ns.lock()
        try:
            given = {
                "decay": decay,
                "depth_bias": depth_bias,
                "time_coef": time_coef,
                "future_weight": future_weight,
                "future_tolerance": future_tolerance,
            }
            self._config: Config = open_config(
                self._ns,
                {k: v for k, v in given.items() if v is not _UNSET},
                embedder,
                M,
                ef_construction,
                read_only,
            )
            self._init_state(num_threads, ef_search)
            self._token_counter = token_counter or approx_token_count
            # Searches count the tokens of the texts they return (stats(), max_tokens=): the same
            # texts recur, and counting ten of them cost ~0.3 ms of a search. A token counter is a
            # function of the text, so its answers are cached by text.
            self._count_tokens = functools.lru_cache(maxsize=16384)(self._token_counter)
            self._checkpoint_every = int(checkpoint_every)
            self._compact_min_rows = int(compact_min_rows)
            self._fsync = bool(fsync)
            self._writer: LogWriter | None = None
            if self._ns is not None:
                self._recover(ef_search)
            self._usage = load_usage(self._ns.dir) if self._ns is not None else UsageCounter()
        except BaseException:
            if self._ns is not None:
                self._ns.unlock()
            raise

    def _init_state(self, num_threads: int | None, ef_search: int) -> None:
        cfg = self._config
        self._index = PoincareIndex(
            cfg.embedder.dim, M=cfg.M, ef_construction=cfg.ef_construction, seed=0, num_threads=num_threads
        )
        self._tune_index(ef_search)
        self._mids: list[str | None] = []  # per row (= index id); None once deleted
        self._texts: list[str | None] = []
        self._row_of: dict[str, int] = {}
        self._lock = ReadWriteLock()  # structure: readers search, writers add/delete
        self._log_lock = threading.Lock()  # log appends and the touch counters
        self._seq = 0  # operations acknowledged (logged, with a path)
        self._since_checkpoint = 0
        self._unlogged_voids: list[int] = []  # rows of rolled-back adds the log has yet to name
        self._pending: Callable[[], None] | None = None  # the cut-off operation's end (_settle_pending)
        self._unlogged_from: int | None = None  # rows from here on: an add not (yet) logged
        self._keyword = KeywordIndex()  # built on the first keyword or hybrid search
        self._version = 0  # bumped by every structural change
        self._touches = 0  # bumped by every access counted
        self._view_cache: tuple[int, pa.Array, pa.Array] | None = None
        self._closed = False
        self._snapshot: str | None = None  # the snapshot the state was loaded from
        self._snapshot_seq = 0  # its sequence number (the writer's: the last one it wrote)
        self._epoch = 0  # compactions since the store began (store.NamespaceDir.current_state)
        self._log_offsets: dict[str, int] = {}  # a reader's position in each log it tails
        self._seen: Any = None  # the store's signature when the state was last brought up to date

    # ---- configuration --------------------------------------------------------------------
    @property
    def decay(self) -> DecayPolicy | None:
        return self._config.decay

    @property
    def embedder(self) -> Any:
        return self._config.embedder

    @property
    def depth_bias(self) -> float:
        return self._config.depth_bias

    @property
    def time_coef(self) -> float:
        return self._config.time_coef

    @property
    def path(self) -> Path | None:
        return self._ns.dir if self._ns is not None else None

    @property
    def index(self) -> PoincareIndex:
        """The underlying index (ids are row numbers; read it, do not modify it)."""
        return self._index

    def __repr__(self) -> str:
        where = f", path={str(self.path)!r}" if self.path else ""
        return f"Memory({len(self)} memories, decay={self.decay!r}{where})"

    # ---- writes ---------------------------------------------------------------------------
    def add(
        self,
        text: str,
        id: str | None = None,
        t: Any = None,
        valid_from: Any = None,
        valid_until: Any = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        vector: Any = None,
    ) -> str:
        """Store one memory and return its id (generated when None; an existing id is a
        ValueError: use :meth:`update`). ``t`` defaults to now; ``vector`` (a point in the
        ball, the embedder's dimension) skips the embedder."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        vectors = None if vector is None else np.asarray(vector, dtype=np.float64).reshape(1, -1)
        return self.add_many(
            [text], None if id is None else [id], t=None if t is None else [t],
            valid_from=None if valid_from is None else [valid_from],
            valid_until=None if valid_until is None else [valid_until],
            metadata=None if metadata is None else [metadata], vectors=vectors,
        )[0]  # fmt: skip

    def add_many(
        self,
        texts: Sequence[str],
        ids: Sequence[str | None] | None = None,
        *,
        t: Any = None,
        valid_from: Any = None,
        valid_until: Any = None,
        metadata: Sequence[Mapping[str, Any] | None] | None = None,
        vectors: Any = None,
        progress: bool = False,
    ) -> list[str]:
        """Store a batch (one embedder call); returns the ids. All or nothing: a bad entry
        raises before anything is stored. Times may be one value for all or one per text.
        ``progress=True``: a progress bar while the index takes them in."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str; use add() for one text")
        texts = list(texts)
        batch = make_batch(texts, ids, t, valid_from, valid_until, metadata, _time.now_micros())
        if vectors is None:
            vecs = embed_checked(self._config.embedder, batch.texts) if len(batch) else None
        else:
            vecs = np.asarray(vectors)
            if vecs.ndim != 2 or vecs.shape != (len(batch), self._config.embedder.dim):
                raise ValueError(
                    f"vectors must have shape ({len(batch)}, {self._config.embedder.dim}), got {vecs.shape}"
                )
        with self._writing():
            for i, mid in enumerate(batch.ids):
                if mid in self._row_of:
                    raise ValueError(f"memory {i}: id {mid!r} already exists (use update)")
            if len(batch) == 0:
                return []
            self._add_logged(
                batch, vecs, lambda rows: {"op": "add", "rows": rows, **batch_json(batch)}, progress=progress
            )
        return batch.ids

    def delete(self, id: str | None = None, *, filters: Any = None) -> int:
        """Delete one memory by id (KeyError when unknown), or every memory matching
        ``filters`` (a dict or a callable on Result). Returns how many were deleted."""
        if (id is None) == (filters is None):
            raise TypeError("delete takes an id or filters=, not both or neither")
        with self._writing():
            rows = [self._row(id)] if id is not None else self._matching_rows(filters, None)
            return self._delete_rows(rows)

    def _delete_rows(self, rows: list[int]) -> int:
        if rows:  # logged first: if the log cannot be written, nothing changes
            self._log_then_apply({"op": "delete", "rows": rows}, lambda: self._apply_delete(rows))
        return len(rows)

    def update(
        self,
        id: str,
        text: str | None = None,
        *,
        t: Any = _UNSET,
        valid_from: Any = _UNSET,
        valid_until: Any = _UNSET,
        metadata: Mapping[str, Any] | None = None,
        vector: Any = None,
    ) -> None:
        """Change a memory in place: fields not given keep their values (None for a window end
        opens it); ``metadata`` keys are merged into the existing ones (a None value removes
        a key). A new text is re-embedded. The access count is kept."""
        with self._writing():
            row = self._row(id)
            old = self._result_rows([row])[0]
            new_text = old.text if text is None else text
            meta = dict(old.metadata)
            if metadata is not None:
                if not isinstance(metadata, Mapping):
                    raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
                for key, value in metadata.items():
                    meta[key] = value
                meta = {k: v for k, v in meta.items() if v is not None}
            batch = make_batch(
                [new_text], [id], [old.t if t is _UNSET else t],
                [old.valid_from if valid_from is _UNSET else valid_from],
                [old.valid_until if valid_until is _UNSET else valid_until],
                [meta], _time.now_micros(),
            )  # fmt: skip
            if vector is None and new_text == old.text:
                # Times and metadata only: changed in place, logged first (as invalidate is);
                # the graph is not touched (re-adding the same vector churned it).
                new_meta = self._row_metadata(row, batch)  # a type clash fails before the log
                self._log_then_apply(
                    {"op": "set", "row": row, **batch_json(batch)},
                    lambda: self._apply_set(row, batch, new_meta),
                )
                return
            if vector is not None:
                vecs = np.asarray(vector, dtype=np.float64).reshape(1, -1)
            else:
                vecs = embed_checked(self._config.embedder, [new_text])
            # The new row is added and logged (row_of[id] -> new row), then the old one goes
            # (`then`, applied once logged whatever happens); an add rolled back gives the id its
            # old row back (`undo`).
            self._add_logged(
                batch, vecs,
                lambda rows: {"op": "update", "old": row, "rows": rows,
                              "access": [old.access_count], **batch_json(batch)},
                access=[old.access_count],
                then=lambda: self._apply_delete([row], forget_id=False),
                undo=lambda: self._row_of.__setitem__(id, row),
            )  # fmt: skip

    def invalidate(self, id: str, at: Any = None) -> None:
        """Close a fact's validity window: valid_until = ``at`` (default now)."""
        at_us = _time.as_time_scalar(at, "at")
        with self._writing():
            row = self._row(id)
            start = int(self._index._columns.valid_from_of(np.array([row]))[0])
            if at_us <= start:
                raise ValueError(
                    f"invalidate: at must be after the memory's valid_from "
                    f"({_time.micros_to_datetime(start)})"
                )
            self._log_then_apply(
                {"op": "invalidate", "row": row, "until": at_us}, lambda: self._apply_invalidate(row, at_us)
            )

    def forget(
        self,
        older_than: timedelta,
        *,
        at_time: Any = None,
        filters: Any = None,
        archive: str | os.PathLike[str] | None = None,
    ) -> int:
        """Retention: delete memories with t < at_time - older_than (and matching ``filters``).

        With ``archive=`` (a .parquet path that must not exist) the rows are written to Parquet
        and fsynced before anything is deleted; if that fails nothing is deleted. Returns the count.
        """
        if not isinstance(older_than, timedelta) or older_than < timedelta(0):
            raise ValueError(f"older_than must be a non-negative timedelta, got {older_than!r}")
        cutoff = _time.as_time_scalar(at_time, "at_time") - older_than // timedelta(microseconds=1)
        with self._writing():
            rows = self._matching_rows(filters, None)
            t = self._index._columns._t
            rows = [r for r in rows if t[r] < cutoff]
            if archive is not None and rows:
                write_parquet_durably(self._table_in_chunks(rows), Path(archive))
            return self._delete_rows(rows)

    def apply_retention(self, at_time: Any = None) -> int:
        """Runs the ``retention`` policy now (at ``at_time``, default its clock): deletes the
        memories older than its max_age, archived first. Returns how many; ValueError without
        a policy. The writer also runs it on its own after writes, every ``retention.every``."""
        if self._retention is None:
            raise ValueError("this Memory has no retention policy (Memory(..., retention=Retention(...)))")
        at_us = self._retention.now_us() if at_time is None else _time.as_time_scalar(at_time, "at_time")
        was, self._retaining = self._retaining, True
        try:
            return run_retention(self, self._retention.max_age, self._retention.archive_dir, at_us)
        finally:
            self._retaining = was

    def session(self, session_id: str | None = None) -> Any:
        """A session scope (see :class:`Session`): ``with mem.session("s1") as s: s.add(...)``."""
        from .session import Session

        return Session(self, session_id)

    # ---- reads ----------------------------------------------------------------------------
    def search(
        self,
        query: str | None = None,
        k: int = 5,
        *,
        at_time: Any = None,
        filters: Any = None,
        touch: bool = True,
        window: timedelta | None = None,
        mode: str = "vector",
        max_tokens: int | None = None,
        vector: Any = None,
        session: str | None = None,
        ef: int | None = None,
        candidates: int = 50,
        keyword_weight: float | None = None,
        decay: DecayPolicy | None = _UNSET,
        time_coef: float = _UNSET,
        depth_bias: float = _UNSET,
        future_tolerance: timedelta = _UNSET,
    ) -> list[Result]:
        """The top ``k`` memories for ``query`` (or a ``vector`` in the ball) at ``at_time``.

        score = -distance + depth_bias * depth + time_coef * log(time_weight) (mode "vector",
        ranked inside the index). mode "keyword": log BM25 + time term; "hybrid": relative score
        fusion over the union of the ``candidates`` best by the fused vector score and by log
        BM25 + time term (so a recent memory is not cut before the fusion), every candidate
        scored on both sides: ``keyword_weight`` x BM25 scaled by the best + the rest x vector
        relevance min-max scaled, then log of it + time term.
        ``keyword_weight`` defaults to the embedder's ``hybrid_keyword_weight`` (measured per
        embedder, benchmarks/bench_hybrid.py; 0.5 for an embedder without one).
        ``filters``: a dict over the columns and metadata (MongoDB operators, pushed into the
        index) or a callable on Result (applied after ranking; more are fetched until k pass).
        ``window``: only memories with t >= at_time - window. ``session``: only that session's
        memories (see :meth:`session`). ``max_tokens``: the longest prefix
        of the ranking whose texts fit the budget. ``touch``: count an access on every result.
        ``decay``, ``time_coef``, ``depth_bias``, ``future_tolerance``: this call's time settings
        in place of the store's (e.g. a higher time_coef to let recency dominate).
        An empty or whitespace-only ``query`` is refused (ValueError); one with no keyword term
        (punctuation, emoji, stop words) matches nothing in mode "keyword" and ranks by the vector
        side alone in mode "hybrid".
        """
        self._check_open()
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        if (query is None) == (vector is None) and mode == "vector":
            raise TypeError("search takes a query text or vector=, exactly one")
        if query is not None and not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        if query is not None and not query.strip():
            raise ValueError(f"query is empty ({query!r}): search takes a text with something to look for")
        if mode != "vector" and query is None:
            raise TypeError(f"mode={mode!r} needs a query text")
        if window is not None and (not isinstance(window, timedelta) or window <= timedelta(0)):
            raise ValueError(f"window must be a positive timedelta, got {window!r}")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
        if ef is not None:
            as_positive_int(ef, "ef")
        if session is not None and not isinstance(session, str):
            raise TypeError(f"session must be a str, got {type(session).__name__}")
        if not isinstance(touch, bool):
            raise TypeError(f"touch must be True or False, got {type(touch).__name__}")
        if keyword_weight is None:
            keyword_weight = getattr(self._config.embedder, "hybrid_keyword_weight", 0.5)
        keyword_weight = as_unit_interval(keyword_weight, "keyword_weight")
        overrides = {
            name: value
            for name, value in (("decay", decay), ("time_coef", time_coef), ("depth_bias", depth_bias),
                                ("future_tolerance", future_tolerance))
            if value is not _UNSET
        }  # fmt: skip
        at_us = _time.as_time_scalar(at_time, "at_time")
        request = SearchRequest(
            query=query, vector=vector, k=k, at_us=at_us, filters=filters, window=window,
            session=session, mode=mode, ef=ef, candidates=candidates, keyword_weight=keyword_weight,
            scoring=self._config.scoring(at_us, overrides),
        )  # fmt: skip
        if request.vector is None and query is not None:
            request.vector = embed_checked(self._config.embedder, [query])
        self.refresh()
        with self._lock.reading():
            results = run_search(self, request)
            if max_tokens is not None:
                results = _fit_budget(results, max_tokens, self._count_tokens)
            if touch and results and not self._read_only:
                results = self._touch(results)
        tokens = sum(self._count_tokens(r.text) for r in results)
        self._usage.record(_time.now_micros(), session, tokens)
        return results

    def get(self, id: str) -> Result | None:
        """The memory with this id, or None."""
        self.refresh()
        with self._lock.reading():
            row = self._row_of.get(id) if isinstance(id, str) else None
            return None if row is None else self._result_rows([row])[0]

    def __getitem__(self, id: str) -> Result:
        result = self.get(id)
        if result is None:
            raise KeyError(f"no memory with id {id!r}")
        return result

    def __contains__(self, id: object) -> bool:
        self.refresh()
        return isinstance(id, str) and id in self._row_of

    def __len__(self) -> int:
        self.refresh()
        return len(self._row_of)

    def __iter__(self) -> Iterator[Result]:
        """Every memory, oldest row first (a snapshot taken when iteration starts)."""
        return iter(self.list())

    def list(self, filters: Any = None, *, limit: int | None = None) -> list[Result]:
        """The memories matching ``filters`` (dict or callable; None: all), in insertion order;
        at most ``limit`` of them."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"limit must be a positive int or None, got {limit!r}")
        self.refresh()
        with self._lock.reading():
            rows = self._matching_rows(filters, limit)
            return self._result_rows(rows)

    def to_arrow(self) -> pa.Table:
        """All live memories as a table: id, text, t, valid_from, valid_until, access_count,
        then the metadata columns."""
        self.refresh()
        with self._lock.reading():
            return self._table([r for r, m in enumerate(self._mids) if m is not None])

    def stats(self, since: Any = None) -> MemoryStats:
        """Retrieval counts (all, or from the hour holding ``since`` on; a persistent store's
        last across reopening, saved at checkpoints and on close) and the tokens stored."""
        since_us = None if since is None else _time.as_time_scalar(since, "since")
        self.refresh()
        with self._lock.reading():
            stored = sum(
                self._token_counter(t) for t, m in zip(self._texts, self._mids) if m is not None and t
            )
            total, sessions = self._usage.total(since_us)
            return MemoryStats(
                len(self),
                total.retrievals,
                total.tokens_retrieved,
                total.tokens_per_retrieval,
                stored,
                sessions,
            )

    # ---- persistence ----------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Write a snapshot and start a fresh log (also done automatically every
        ``checkpoint_every`` writes and on close)."""
        self._check_open()
        if self._ns is None or self._read_only:
            return
        with self._lock.writing():
            self._settle_pending()  # before the log lock: a roll-back takes it
            with self._log_lock:
                self._checkpoint_locked()

    def close(self) -> None:
        """Checkpoint (when anything changed), close the log and release the writer lock."""
        if self._closed:
            return
        try:
            if self._ns is not None and not self._read_only:
                if self._since_checkpoint:
                    self.checkpoint()  # saves the usage counters too
                else:
                    save_usage(self._ns.dir, self._usage)  # searches since the last checkpoint
        finally:
            self._closed = True
            self._keyword.close()
            if self._writer is not None:
                self._writer.close()
            if self._ns is not None and not self._read_only:
                self._ns.unlock()

    def __del__(self) -> None:
        # Everything acknowledged is in the log already; a Memory dropped without close() still
        # gives its writer lock back, so the store can be opened again.
        try:
            if not getattr(self, "_closed", True):
                if getattr(self, "_writer", None) is not None:
                    self._writer.close()
                if self._ns is not None and not self._read_only:
                    self._ns.unlock()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def inspect(self, port: int = 0, *, open_browser: bool = False, touch: bool = False) -> Any:
        """Serves the inspector for this Memory on 127.0.0.1 (port 0: a free one) from a
        background thread; returns the server (``.url``, ``.close()``). Searches from the page
        count accesses only with ``touch=True``."""
        # The inspector is a layer above the memory: found by name when asked, never imported
        # from here (modules import downward; DESIGN.md).
        serve = importlib.import_module(_INSPECTOR).serve
        server = serve(self, port, touch=touch)
        if open_browser:
            import webbrowser

            webbrowser.open(server.url)
        return server

    @staticmethod
    def namespaces(path: str | os.PathLike[str]) -> list[str]:
        """The namespaces stored under ``path``."""
        root = Path(path)
        if not root.is_dir():
            return []
        return sorted(p.name for p in root.iterdir() if (p / "config.json").exists())

    @staticmethod
    def stored_embedder(path: str | os.PathLike[str], namespace: str = "default") -> tuple[str, int]:
        """(name, dim) of the embedder the store at ``path`` was built with (what reopening it
        checks); FileNotFoundError if there is none, IndexFormatError for a bad config."""
        ns = NamespaceDir(Path(path), namespace)
        if not ns.exists:
            raise FileNotFoundError(f"no memory store at {ns.dir}")
        spec = ns.read_config()["embedder"]
        return str(spec["name"]), int(spec["dim"])

    # ---- internals ------------------------------------------------------------------------
    @contextmanager
    def _writing(self) -> Iterator[None]:
        """The writer lock for one write; a checkpoint follows when due (still under the lock,
        after the write is complete and logged)."""
        if self._read_only:
            raise PermissionError("this Memory was opened read_only=True")
        self._check_open()
        with self._lock.writing():
            self._settle_pending()
            yield
            self._maybe_compact()
            self._maybe_checkpoint()
        self._maybe_retain()

    def _maybe_retain(self) -> None:
        """After a write: the retention run, when one is due (its own write, not nested)."""
        policy = self._retention
        if policy is None or self._retaining:
            return
        now_us = policy.now_us()
        if self._next_retention_us is not None and now_us < self._next_retention_us:
            return
        self._retaining = True
        try:
            self.apply_retention(_time.micros_to_datetime(now_us))
        finally:
            self._retaining = False
            self._next_retention_us = now_us + policy.every // timedelta(microseconds=1)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("this Memory is closed")

    def _row(self, id: Any) -> int:
        if not isinstance(id, str):
            raise TypeError(f"id must be a str, got {type(id).__name__}")
        row = self._row_of.get(id)
        if row is None:
            raise KeyError(f"no memory with id {id!r}")
        return row


def _fit_budget(results: list[Result], budget: int, counter: Callable[[str], int]) -> list[Result]:
    out, used = [], 0
    for r in results:
        used += int(counter(r.text))
        if used > budget:
            break
        out.append(r)
    return out
