"""What the framework adapters share: documents' metadata stored in a Memory, filters on it,
and maximal marginal relevance by Poincaré distance.

A framework's metadata is any JSON-like dict, datetimes and dates included (LangChain's own
retrievers store them). The Memory keeps all of it as one JSON text column (datetimes and dates
tagged, so everything comes back as given: a date a date, naive datetimes naive), and each
top-level scalar value (str, int, float, bool, datetime) also as a column named
``metadata.<key>``, which is what filters read: a filter ``{"page": 3}`` is evaluated as
``{"metadata.page": 3}`` inside the search. A date (not a datetime) goes to a column
``metadata_date.<key>`` as its day number (days since 1970-01-01, int64: a Memory holds no
Arrow date type), and a filter on that key compares day numbers, its operands (dates,
datetimes, ISO-8601 strings) turned into day numbers as on a date column
(:func:`poincare_index.filters.day_numbers`). Numbers (int or float) share one float64 column
per key; a key holding values of two kinds (str, number, bool, datetime, date) in two documents
is refused before anything is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from ..filters import day_numbers
from ..geometry import BALL_MARGIN, distance

__all__ = [
    "encode_metadata", "decode_metadata", "check_kinds", "metadata_filter", "resolve_missing",
    "mmr_select", "upsert", "write_copy", "check_unique_ids", "check_in_ball",
    "MAX_TANGENT_NORM",
    "scale_advice",
]  # fmt: skip

JSON_COLUMN = "metadata_json"
PREFIX = "metadata."
DATE_PREFIX = "metadata_date."  # dates, as day numbers (see the module docstring)
_EPOCH_DAY = date(1970, 1, 1).toordinal()
_DATETIME, _DATE = "__poincare_datetime__", "__poincare_date__"  # tags of the JSON text
# expmap0 of a tangent vector longer than this rounds onto the ball's boundary in float32 (the
# index refuses it): measured 8.74 at 384-d, 9.02 at 1-d.
MAX_TANGENT_NORM = 8.5


def encode_metadata(metadata: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """A framework document's metadata as Memory metadata (see the module docstring);
    TypeError naming ``where`` and the key for a value JSON cannot carry."""
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"{where}: metadata must be a dict, got {type(metadata).__name__}")
    try:
        text = json.dumps(dict(metadata), ensure_ascii=False, allow_nan=False, default=_tagged)
    except (TypeError, ValueError) as exc:
        bad = next((k for k, v in metadata.items() if not _json_ok(v)), None)
        raise TypeError(
            f"{where}: metadata {bad!r} cannot be stored ({exc}); use JSON values "
            "(str, int, float, bool, None, datetime, date, lists and dicts of them)"
        ) from None
    out: dict[str, Any] = {JSON_COLUMN: text}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"{where}: metadata keys must be str, got {key!r}")
        if isinstance(value, bool) or isinstance(value, (str, datetime)):
            out[PREFIX + key] = value
        elif isinstance(value, date):
            out[DATE_PREFIX + key] = value.toordinal() - _EPOCH_DAY
        elif isinstance(value, (int, float)) and math.isfinite(float(value)):
            # Every number is one float64 column, so 1 and 1.5 under one key never clash
            # (the JSON keeps ints exact; a filter compares them as numbers).
            out[PREFIX + key] = float(value)
    return out


def _tagged(value: Any) -> Any:
    if isinstance(value, datetime):
        return {_DATETIME: value.isoformat()}
    if isinstance(value, date):
        return {_DATE: value.isoformat()}
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _untagged(obj: dict[str, Any]) -> Any:
    if len(obj) == 1:
        if _DATETIME in obj:
            return datetime.fromisoformat(obj[_DATETIME])
        if _DATE in obj:
            return date.fromisoformat(obj[_DATE])
    return obj


def _json_ok(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False, default=_tagged)
    except (TypeError, ValueError):
        return False
    return True


def decode_metadata(memory_metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The framework's metadata back from a Memory result's metadata."""
    text = memory_metadata.get(JSON_COLUMN)
    return dict(json.loads(text, object_hook=_untagged)) if text else {}


def metadata_filter(condition: Any) -> Any:
    """A framework filter dict on metadata keys as a Memory filter on the stored columns:
    field names get the column prefix, operators (``$and``, ``$in``, ...) stay."""
    if condition is None:
        return None
    if isinstance(condition, Mapping):
        out: dict[str, Any] = {}
        for key, value in condition.items():
            if not isinstance(key, str):
                raise TypeError(f"filter keys must be str, got {key!r}")
            if key.startswith("$"):
                if key in ("$and", "$or"):
                    if not isinstance(value, (list, tuple)):
                        raise TypeError(f"{key} takes a list of filters, got {type(value).__name__}")
                    out[key] = [metadata_filter(v) for v in value]
                elif key == "$not":
                    out[key] = metadata_filter(value)
                else:
                    raise ValueError(f"filter operator {key!r} must sit under a field name")
            else:
                out[PREFIX + key] = value
        return out
    raise TypeError(f"filter must be a dict, got {type(condition).__name__}")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, float):
        return "number"
    if isinstance(value, datetime):
        return "datetime"
    if isinstance(value, date):
        return "date"
    return "str"


def _kind_of_type(t: pa.DataType) -> str:
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_floating(t) or pa.types.is_integer(t):
        return "number"
    if pa.types.is_timestamp(t):
        return "datetime"
    return "str"


def _key_and_kind(column: str, typ: pa.DataType | None, value: Any = None) -> tuple[str | None, str]:
    """The metadata key a stored column holds and the kind of its values (from the column's type
    or from a value); key None for a column that holds none."""
    if column.startswith(DATE_PREFIX):
        return column[len(DATE_PREFIX) :], "date"
    if not column.startswith(PREFIX):
        return None, ""
    return column[len(PREFIX) :], _kind_of_type(typ) if typ is not None else _kind(value)


def check_kinds(encoded: Sequence[Mapping[str, Any]], schema: pa.Schema | None, what: str) -> None:
    """ValueError naming the first ``what`` (e.g. "text 3") whose filterable value under a key
    is of another kind (str, number, bool, datetime, date) than the store's column or an earlier
    entry of the batch: checked before anything is written."""
    kinds = dict(_key_and_kind(f.name, f.type) for f in schema) if schema is not None else {}
    for i, meta in enumerate(encoded):
        for column, value in meta.items():
            key, kind = _key_and_kind(column, None, value)
            if key is None or value is None:
                continue
            seen = kinds.setdefault(key, kind)
            if seen != kind:
                raise ValueError(
                    f"{what} {i}: metadata {key!r} is a {kind}, but the store holds "
                    f"{seen} values under that key; one key takes one kind (numbers of any type mix)"
                )


# Conditions that hold on every stored row, or on none (the id column is never null).
ALWAYS = {"id": {"$exists": True}}
NEVER = {"id": {"$exists": False}}


def resolve_missing(condition: Any, has_column: Any) -> Any:
    """``condition`` (a dict filter on stored columns) with every test of a column no document
    has replaced by what the same test gives on a null value: a key never stored behaves as a
    key stored as null, so a filter answers the same before and after the first document that
    has the key. (Our filters refuse an unknown column by name; a framework's filter on a key
    no document has yet is normal.) A test of a key stored as dates reads its date column, its
    operands as day numbers (see the module docstring)."""
    if condition is None or not isinstance(condition, Mapping):
        return condition
    parts = []
    for key, value in condition.items():
        if key in ("$and", "$or", "$nor"):
            parts.append({key: [resolve_missing(v, has_column) for v in value]})
        elif key == "$not":
            parts.append({key: resolve_missing(value, has_column)})
        elif key.startswith("$") or key == "id" or has_column(key):
            parts.append({key: value})
        elif key.startswith(PREFIX) and has_column(DATE_PREFIX + key[len(PREFIX) :]):
            name = key[len(PREFIX) :]
            parts.append({DATE_PREFIX + name: day_numbers(value, f"filters.{name}")})
        else:
            parts.append(ALWAYS if _holds_on_null(key, value) else NEVER)
    return parts[0] if len(parts) == 1 else {"$and": parts}


def _holds_on_null(column: str, test: Any) -> bool:
    """Whether ``test`` holds on a null value: our filters evaluated on one null row whose type
    follows the values the test names."""
    from ..filters import compile_filter

    sample = _first_scalar(test)
    kind = _kind(float(sample) if isinstance(sample, int) and not isinstance(sample, bool) else sample)
    if kind == "date":
        test, kind = day_numbers(test, f"filters.{column[len(PREFIX) :]}"), "number"
    arrow = {"bool": pa.bool_(), "number": pa.float64(), "datetime": pa.timestamp("us", tz="UTC")}
    table = pa.table({column: pa.array([None], type=arrow.get(kind, pa.string()))})
    return bool(compile_filter({column: test}, table)[0])


def _first_scalar(test: Any) -> Any:
    if isinstance(test, Mapping):
        for v in test.values():
            found = _first_scalar(v)
            if found is not None:
                return found
        return None
    if isinstance(test, (list, tuple)):
        return next((x for x in test if x is not None), None)
    return test


def mmr_select(query: NDArray[Any], candidates: NDArray[Any], k: int, lambda_mult: float) -> list[int]:
    """Maximal marginal relevance over ``candidates`` (points in the ball, best-first by
    relevance): positions of ``k`` picks, each maximising ``lambda_mult * sim(query, x) -
    (1 - lambda_mult) * max sim(x, picked)`` with ``sim = exp(-Poincaré distance)``."""
    if not 0.0 <= lambda_mult <= 1.0 or not math.isfinite(lambda_mult):
        raise ValueError(f"lambda_mult must be in [0, 1], got {lambda_mult!r}")
    n = candidates.shape[0]
    if n == 0 or k <= 0:
        return []
    pts = candidates.astype(np.float64)
    to_query = np.exp(-distance(query.astype(np.float64)[None, :], pts))
    between = np.exp(-distance(pts[:, None, :], pts[None, :, :]))
    picked = [int(np.argmax(to_query))]
    redundancy = between[picked[0]].copy()
    while len(picked) < min(k, n):
        score = lambda_mult * to_query - (1.0 - lambda_mult) * redundancy
        score[picked] = -np.inf
        best = int(np.argmax(score))
        picked.append(best)
        redundancy = np.maximum(redundancy, between[best])
    return picked


def write_copy(memory: Any, embedder: Any, path: Any, **memory_options: Any) -> None:
    """Writes every memory of ``memory`` (text, id, time, metadata, stored point) as a new
    persistent store at ``path`` (a store there is refused by Memory's lock or mismatch)."""
    from ..memory import Memory

    with Memory(decay=None, embedder=embedder, path=path, **memory_options) as copy:
        results = memory.list()
        if results:
            ids = [r.id for r in results]
            copy.add_many(
                [r.text for r in results], ids, t=[r.t for r in results],
                metadata=[dict(r.metadata) for r in results], vectors=memory.vectors(ids),
            )  # fmt: skip


def upsert(memory: Any, ids: Sequence[str], texts: Sequence[str], metas: Sequence[Mapping[str, Any]],
           points: NDArray[Any]) -> None:  # fmt: skip
    """Stores each document, replacing one with the same id (an id given twice: the last
    wins): the new ones in one ``add_many``, then each replaced one by ``update`` (its old
    metadata keys that the new document lacks removed)."""
    last = {doc_id: i for i, doc_id in enumerate(ids)}
    new = [i for doc_id, i in last.items() if doc_id not in memory]
    if new:
        memory.add_many(
            [texts[i] for i in new], [ids[i] for i in new], metadata=[metas[i] for i in new],
            vectors=points[new],
        )  # fmt: skip
    added = set(new)
    for doc_id, i in last.items():
        if i not in added:
            old = memory[doc_id].metadata
            replacement = {key: None for key in old if key not in metas[i]} | dict(metas[i])
            memory.update(doc_id, texts[i], metadata=replacement, vector=points[i])


def check_unique_ids(ids: Sequence[str], where: str = "ids") -> None:
    """ValueError naming the first id given more than once and its positions: within one call an
    id names one document (an id already stored is replaced, as LangChain's stores do)."""
    seen: set[str] = set()
    for doc_id in ids:
        if doc_id in seen:
            at = [j for j, other in enumerate(ids) if other == doc_id]
            places = ", ".join(f"{where}[{j}]" for j in at[:-1]) + f" and {where}[{at[-1]}]"
            raise ValueError(
                f"id {doc_id!r} is given {len(at)} times in one call ({places}); each id may appear "
                "once per call (an id already in the store is replaced)"
            )
        seen.add(doc_id)


def check_in_ball(points: NDArray[Any], label: Callable[[int], str], why: Callable[[int], str]) -> None:
    """ValueError naming the first row of ``points`` that is not finite or not strictly inside
    the Poincaré ball (the index's own margin), with ``why(i)``: what the user can change."""
    p = np.asarray(points, dtype=np.float64)
    sq = np.einsum("ij,ij->i", p, p)
    bad = np.flatnonzero(~(sq < 1.0 - BALL_MARGIN))
    if bad.size:
        i = int(bad[0])
        if not np.isfinite(sq[i]):
            raise ValueError(f"{label(i)}: its embedding contains NaN or Inf")
        raise ValueError(f"{label(i)}: {why(i)}")


def scale_advice(raw: NDArray[Any], i: int, normalize: bool, scale: float) -> str:
    """Why row ``i`` of the Euclidean embeddings ``raw`` lands on the ball's boundary, in the
    terms of a store's ``normalize`` and ``scale`` options (what an integration's user sets;
    never project(), which such a user does not call)."""
    if normalize:
        return (
            f"scale={scale:g} puts every embedding on the boundary of the Poincaré ball; "
            f"use a scale below {MAX_TANGENT_NORM:g}"
        )
    norms = np.linalg.norm(raw, axis=1)
    fits = MAX_TANGENT_NORM / float(norms.max()) if norms.max() > 0 else scale
    return (
        f"its embedding has norm {norms[i]:.4g}, and with normalize=False a vector whose norm "
        f"times scale (here {scale:g}) exceeds {MAX_TANGENT_NORM:g} lands on the boundary of the "
        f"Poincaré ball; use normalize=True (the default), or scale={fits:.2g} or less to shrink "
        "the embeddings"
    )
