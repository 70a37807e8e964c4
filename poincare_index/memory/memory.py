"""Memory: text in, time-aware recall out, on a PoincareIndex with its time columns.

A front over parts it owns, each with its own contract: the rows (state.py), the journal
(journal.py: log, snapshots, replay, readers), the searcher (search.py), the usage counters and
the retention run. The Memory validates calls, holds the readers-writer lock and delegates.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .. import _time
from .._closing import ClosedError, refuse_when_closed
from .._rwlock import ReadWriteLock
from .._validation import as_flag
from ..decay import DecayPolicy
from ..embed import embed_checked
from ..index import PoincareIndex
from .journal import Journal, batch_json
from .opening import check_arguments, open_config
from .result import MemoryStats, Result
from .retention import Retention, RetentionRun, run_retention, write_parquet_durably
from .rows import make_batch, merged_metadata
from .search import SearchRequest, fit_budget, run_search
from .state import MemoryRows
from .store import NamespaceDir, StoreLockedError, namespaces_under
from .tokens import approx_token_count
from .usage import UsageCounter, load_usage, save_usage

__all__ = ["Memory", "StoreLockedError"]

_UNSET: Any = object()
_INSPECTOR = "poincare_index.inspector"


@refuse_when_closed("Memory")
class Memory:
    """A store of memories (text, time, validity window, access count, metadata) with fused search.

    ``Memory(decay=HalfLife(hours=24 * 14))`` keeps everything in this process;
    ``Memory(path=dir)`` persists to ``dir/<namespace>`` (default namespace "default") and reopens
    as it was: configuration from the store's config.json, memories from its snapshot and log.
    Arguments given when reopening replace the saved query settings (decay, depth_bias,
    time_coef, future_weight); the embedder and ``storage`` must be the ones it was built with.
    ``storage`` ("f32", "f16" or "sq8"; default "f32") is what the graph walk reads; results are
    re-ranked exactly from float32 (docs/compressed_storage.md).

    Thread-safe: searches run concurrently, writes are serialised. One process at a time may
    open a namespace for writing (:class:`StoreLockedError` otherwise); ``read_only=True`` opens
    without the lock and refuses writes (a read-only search does not count accesses).

    Durability: every write is in the store's log before the call returns (a killed process
    loses nothing acknowledged); ``fsync=True`` syncs each write to disk (power loss too).
    Opening cuts off a record torn by a crash (never acknowledged) with a ``RecoveryWarning``;
    a log damaged otherwise, or missing, refuses to open (``LogDamageError``): ``recover=True``
    opens it with every operation up to the damage, sets the damaged logs aside and says what
    it dropped (docs/reliability.md).

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
        storage: str = _UNSET,
        ef_search: int | None = None,
        num_threads: int | None = None,
        checkpoint_every: int = 20_000,
        compact_min_rows: int = 4096,
        retention: Retention | None = None,
        progress: bool = False,
        recover: bool = False,
    ) -> None:
        self._closed = True  # until the store is open (close() and __del__ then do nothing)
        check_arguments(progress, token_counter, path, read_only, retention)
        recover = as_flag(recover, "recover")
        if recover and (path is None or read_only):
            raise ValueError("recover=True repairs a store on disk: it needs a path and read_only=False")
        self._retention = None if retention is None else RetentionRun(retention)
        self._ns = NamespaceDir(Path(path), namespace) if path is not None else None
        self._read_only = bool(read_only)
        if self._ns is not None and not self._read_only:
            self._ns.lock()
        try:
            given = {
                "decay": decay, "depth_bias": depth_bias, "time_coef": time_coef,
                "future_weight": future_weight, "future_tolerance": future_tolerance, "storage": storage,
            }  # fmt: skip
            config = open_config(
                self._ns, {k: v for k, v in given.items() if v is not _UNSET}, embedder, M, ef_construction,
                read_only,
            )  # fmt: skip
            self._token_counter = token_counter or approx_token_count
            # Searches count the tokens of the texts they return (stats(), max_tokens=): the same
            # texts recur, and counting ten of them cost ~0.3 ms of a search. A token counter is a
            # function of the text, so its answers are cached by text.
            self._count_tokens = functools.lru_cache(maxsize=16384)(self._token_counter)
            self._compact_min_rows = int(compact_min_rows)
            self._lock = ReadWriteLock()  # structure: readers search, writers add/delete
            self._rows = MemoryRows(config, num_threads, ef_search, progress)
            self._usage = load_usage(self._ns.dir) if self._ns is not None else UsageCounter()
            self._journal = Journal(
                self._ns, self._rows, self._lock, read_only=self._read_only, fsync=bool(fsync),
                checkpoint_every=int(checkpoint_every), usage=self._usage, progress=progress,
            )  # fmt: skip
            self._closed = False
            if self._ns is not None:
                self._journal.recover(ef_search, repair=recover)
        except BaseException:
            self._closed = True
            if self._ns is not None and not self._read_only:
                self._ns.unlock()
            raise

    # ---- configuration --------------------------------------------------------------------
    @property
    def decay(self) -> DecayPolicy | None:
        return self._rows.config.decay

    @property
    def embedder(self) -> Any:
        return self._rows.config.embedder

    @property
    def depth_bias(self) -> float:
        return self._rows.config.depth_bias

    @property
    def time_coef(self) -> float:
        return self._rows.config.time_coef

    @property
    def future_weight(self) -> float:
        return self._rows.config.future_weight

    @property
    def change_token(self) -> tuple[int, int]:
        """Changes whenever memories change (writes, compactions, a reader taking in the writer's)
        or an access is counted: two equal tokens mean a view of the store is still current."""
        return (self._rows.version, self._rows.touches)

    @property
    def path(self) -> Path | None:
        return self._ns.dir if self._ns is not None else None

    @property
    def index(self) -> PoincareIndex:
        """The underlying index (ids are row numbers; read it, do not modify it)."""
        return self._rows.index

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
        batch = make_batch(list(texts), ids, t, valid_from, valid_until, metadata, _time.now_micros())
        dim = self.embedder.dim
        if vectors is None:
            vecs = embed_checked(self.embedder, batch.texts) if len(batch) else None
        else:
            vecs = np.asarray(vectors)
            if vecs.ndim != 2 or vecs.shape != (len(batch), dim):
                raise ValueError(f"vectors must have shape ({len(batch)}, {dim}), got {vecs.shape}")
        with self._writing():
            for i, mid in enumerate(batch.ids):
                if mid in self._rows.row_of:
                    raise ValueError(f"memory {i}: id {mid!r} already exists (use update)")
            if len(batch) == 0:
                return []
            self._journal.add_logged(
                batch, vecs, lambda rows: {"op": "add", "rows": rows, **batch_json(batch)}, progress=progress
            )
        return batch.ids

    def delete(self, id: str | None = None, *, filters: Any = None) -> int:
        """Delete one memory by id (KeyError when unknown), or every memory matching
        ``filters`` (a dict or a callable on Result). Returns how many were deleted."""
        if (id is None) == (filters is None):
            raise TypeError("delete takes an id or filters=, not both or neither")
        with self._writing():
            rows = [self._rows.row(id)] if id is not None else self._rows.matching_rows(filters, None)
            return self._delete_rows(rows)

    def _delete_rows(self, rows: list[int]) -> int:
        """Deletes live rows (writer lock held); logged first: if the log cannot be written,
        nothing changes."""
        if rows:
            self._journal.log_then_apply(
                {"op": "delete", "rows": rows}, lambda: self._rows.apply_delete(rows)
            )
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
            row = self._rows.row(id)
            old = self._rows.results([row])[0]
            new_text = old.text if text is None else text
            meta = merged_metadata(old.metadata, metadata)
            batch = make_batch(
                [new_text], [id], [old.t if t is _UNSET else t],
                [old.valid_from if valid_from is _UNSET else valid_from],
                [old.valid_until if valid_until is _UNSET else valid_until],
                [meta], _time.now_micros(),
            )  # fmt: skip
            if vector is None and new_text == old.text:
                # Times and metadata only: changed in place, logged first (as invalidate is);
                # the graph is not touched (re-adding the same vector churned it).
                new_meta = self._rows.row_metadata(row, batch)  # a type clash fails before the log
                self._journal.log_then_apply(
                    {"op": "set", "row": row, **batch_json(batch)},
                    lambda: self._rows.apply_set(row, batch, new_meta),
                )
                return
            if vector is not None:
                vecs = np.asarray(vector, dtype=np.float64).reshape(1, -1)
            else:
                vecs = embed_checked(self.embedder, [new_text])
            # The new row is added and logged (row_of[id] -> new row), then the old one goes
            # (`then`, applied once logged whatever happens); an add rolled back gives the id its
            # old row back (`undo`).
            self._journal.add_logged(
                batch, vecs,
                lambda rows: {"op": "update", "old": row, "rows": rows,
                              "access": [old.access_count], **batch_json(batch)},
                access=[old.access_count],
                then=lambda: self._rows.apply_delete([row], forget_id=False),
                undo=lambda: self._rows.row_of.__setitem__(id, row),
            )  # fmt: skip

    def invalidate(self, id: str, at: Any = None) -> None:
        """Close a fact's validity window: valid_until = ``at`` (default now)."""
        at_us = _time.as_time_scalar(at, "at")
        with self._writing():
            row = self._rows.row(id)
            start = self._rows.valid_from_of(row)
            if at_us <= start:
                since = _time.micros_to_datetime(start)
                raise ValueError(f"invalidate: at must be after the memory's valid_from ({since})")
            self._journal.log_then_apply(
                {"op": "invalidate", "row": row, "until": at_us},
                lambda: self._rows.apply_invalidate(row, at_us),
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
            t = self._rows.index._columns._t
            rows = [r for r in self._rows.matching_rows(filters, None) if t[r] < cutoff]
            if archive is not None and rows:
                write_parquet_durably(self._rows.table_in_chunks(rows), Path(archive))
            return self._delete_rows(rows)

    def apply_retention(self, at_time: Any = None) -> int:
        """Runs the ``retention`` policy now (at ``at_time``, default its clock): deletes the
        memories older than its max_age, archived first. Returns how many; ValueError without
        a policy. The writer also runs it on its own after writes, every ``retention.every``."""
        run = self._retention
        if run is None:
            raise ValueError("this Memory has no retention policy (Memory(..., retention=Retention(...)))")
        at_us = run.policy.now_us() if at_time is None else _time.as_time_scalar(at_time, "at_time")
        with run.running():
            return run_retention(self._rows, self._lock, self._writing, self._delete_rows, run.policy, at_us)

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
        recall: float | None = None,
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
        ``window``: only memories with at_time - window <= t <= at_time (+ ``future_tolerance``,
        as the decay reads "now"). ``session``: only that session's
        memories (see :meth:`session`). ``max_tokens``: the longest prefix
        of the ranking whose texts fit the budget. ``touch``: count an access on every result.
        ``decay``, ``time_coef``, ``depth_bias``, ``future_tolerance``: this call's time settings
        in place of the store's (e.g. a higher time_coef to let recency dominate).
        ``recall``: the recall@k to reach against the exact ranking by this score (default the
        index's ``recall_target``, 0.95; docs/recall.md); ``ef`` fixes the walk's width instead.
        An empty or whitespace-only ``query`` is refused (ValueError); one with no keyword term
        (punctuation, emoji, stop words) matches nothing in mode "keyword" and ranks by the vector
        side alone in mode "hybrid".
        """
        overrides = {
            name: value
            for name, value in (("decay", decay), ("time_coef", time_coef), ("depth_bias", depth_bias),
                                ("future_tolerance", future_tolerance))
            if value is not _UNSET
        }  # fmt: skip
        if keyword_weight is None:
            keyword_weight = getattr(self.embedder, "hybrid_keyword_weight", 0.5)
        request = SearchRequest(
            query=query, vector=vector, k=k, filters=filters, window=window, session=session, mode=mode,
            ef=ef, recall=recall, candidates=candidates, keyword_weight=keyword_weight, max_tokens=max_tokens,
            touch=touch,
            scoring=self._rows.config.scoring(_time.as_time_scalar(at_time, "at_time"), overrides),
        )  # fmt: skip
        if request.vector is None and query is not None:
            request.vector = embed_checked(self.embedder, [query])
        self.refresh()
        with self._lock.reading():
            results = run_search(self._rows, request, self._journal.log_lock)
            if max_tokens is not None:
                results = fit_budget(results, max_tokens, self._count_tokens)
            if touch and results and not self._read_only:
                results = self._journal.touch(results)
        tokens = sum(self._count_tokens(r.text) for r in results)
        self._usage.record(_time.now_micros(), session, tokens)
        return results

    def get(self, id: str) -> Result | None:
        """The memory with this id, or None."""
        self.refresh()
        with self._lock.reading():
            row = self._rows.row_of.get(id) if isinstance(id, str) else None
            return None if row is None else self._rows.results([row])[0]

    def __getitem__(self, id: str) -> Result:
        result = self.get(id)
        if result is None:
            raise KeyError(f"no memory with id {id!r}")
        return result

    def __contains__(self, id: object) -> bool:
        self.refresh()
        return isinstance(id, str) and id in self._rows.row_of

    def __len__(self) -> int:
        self.refresh()
        return len(self._rows.row_of)

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
            return self._rows.results(self._rows.matching_rows(filters, limit))

    def vectors(self, ids: Sequence[str]) -> np.ndarray:
        """The stored points (ball coordinates, float32) of the memories ``ids``, (len(ids),
        dim), in that order, read at one moment; KeyError naming the first unknown id."""
        if isinstance(ids, str):
            raise TypeError("ids must be a sequence of str; use vectors([id]) for one")
        self.refresh()
        with self._lock.reading():
            return self._rows.vectors(ids)

    def to_arrow(self, *, vectors: bool = False) -> pa.Table:
        """All live memories as a table: id, text, t, valid_from, valid_until, access_count,
        then the metadata columns; ``vectors=True`` adds their stored points (``vector``,
        fixed-size lists of float32), read at the same moment as the rest."""
        as_flag(vectors, "vectors")
        self.refresh()
        with self._lock.reading():
            return self._rows.live_table(vectors)

    def has_metadata(self, key: str) -> bool:
        """Whether some memory was ever added with the metadata key ``key`` (TypeError: not a str)."""
        self.refresh()
        return self._rows.has_column(key)

    def stats(self, since: Any = None) -> MemoryStats:
        """Retrieval counts (all, or from the hour holding ``since`` on; a persistent store's
        last across reopening, saved at checkpoints and on close) and the tokens stored."""
        since_us = None if since is None else _time.as_time_scalar(since, "since")
        self.refresh()
        with self._lock.reading():
            rows = self._rows
            stored = sum(self._token_counter(t) for t, m in zip(rows.texts, rows.mids) if m is not None and t)
            total, sessions = self._usage.total(since_us)
            return MemoryStats(
                len(rows.row_of), total.retrievals, total.tokens_retrieved, total.tokens_per_retrieval,
                stored, sessions,
            )  # fmt: skip

    # ---- persistence ----------------------------------------------------------------------
    def refresh(self) -> bool:
        """A read-only Memory: take in what the writer acknowledged since the last look (see
        :meth:`Journal.refresh`); returns whether anything changed. Called on its own before
        every read. A writer's Memory is always current: it returns False."""
        return self._journal.refresh(self._reopen)

    def _reopen(self) -> Memory:
        assert self._ns is not None
        return type(self)(
            path=self._ns.dir.parent, namespace=self._ns.dir.name, read_only=True,
            num_threads=self._rows.index.num_threads, ef_search=self._rows.index.ef_search,
        )  # fmt: skip

    def checkpoint(self) -> None:
        """Write a snapshot and start a fresh log (also done automatically every
        ``checkpoint_every`` writes and on close)."""
        self._journal.checkpoint()

    def close(self) -> None:
        """Checkpoint (when anything changed), close the log and release the writer lock. Every
        call after it raises ClosedError (a ValueError) naming the call; closing again does
        nothing."""
        if self._closed:
            return
        try:
            if self._ns is not None and not self._read_only:
                if self._journal.since_checkpoint:
                    self.checkpoint()  # saves the usage counters too
                else:
                    save_usage(self._ns.dir, self._usage)  # searches since the last checkpoint
        finally:
            self._closed = True
            self._rows.keyword.close()
            self._rows.index.close()  # its memory (and mapped files) go now, not when collected
            if self._journal.writer is not None:
                self._journal.writer.close()
            if self._ns is not None and not self._read_only:
                self._ns.unlock()

    def __del__(self) -> None:
        # Everything acknowledged is in the log already; a Memory dropped without close() still
        # gives its writer lock back, so the store can be opened again.
        try:
            if not getattr(self, "_closed", True):
                if self._journal.writer is not None:
                    self._journal.writer.close()
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
        # A layer above the memory: found by name, never imported from here (DESIGN.md).
        serve = importlib.import_module(_INSPECTOR).serve
        server = serve(self, port, touch=touch)
        if open_browser:
            import webbrowser

            webbrowser.open(server.url)
        return server

    @staticmethod
    def namespaces(path: str | os.PathLike[str]) -> list[str]:
        """The namespaces stored under ``path``."""
        return namespaces_under(Path(path))

    @staticmethod
    def stored_embedder(path: str | os.PathLike[str], namespace: str = "default") -> tuple[str, int]:
        """(name, dim) of the embedder the store at ``path`` was built with (what reopening it
        checks); FileNotFoundError if there is none, IndexFormatError for a bad config."""
        return NamespaceDir(Path(path), namespace).stored_embedder()

    # ---- internals ------------------------------------------------------------------------
    @contextmanager
    def _writing(self) -> Iterator[None]:
        """The writer lock for one write; a compaction and a checkpoint follow when due (still
        under the lock, after the write is complete and logged), then the retention run."""
        if self._read_only:
            raise PermissionError("this Memory was opened read_only=True")
        with self._lock.writing():
            if self._closed:  # closed while this write waited for the lock
                raise ClosedError(f"{type(self).__name__}: this Memory was closed during the call")
            self._journal.settle_pending()
            yield
            # A retention run names rows between its deletes: they are not renumbered meanwhile.
            if self._retention is None or not self._retention.in_progress:
                self._journal.maybe_compact(self._compact_min_rows)
            self._journal.maybe_checkpoint()
        if self._retention is not None:  # after the write: the retention run when due (not nested)
            self._retention.when_due(lambda now_us: self.apply_retention(_time.micros_to_datetime(now_us)))
