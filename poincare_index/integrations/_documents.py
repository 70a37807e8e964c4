"""What the framework adapters share: documents' metadata stored in a Memory, filters on it,
and maximal marginal relevance by Poincaré distance.

A framework's metadata is any JSON-like dict, datetimes and dates included (LangChain's own
retrievers store them). The Memory keeps all of it as one JSON text column (datetimes tagged,
so everything comes back as given, naive datetimes naive), and each top-level scalar value (str,
int, float, bool, datetime) also as a column named ``metadata.<key>``, which is what filters
read: a filter ``{"page": 3}`` is evaluated as ``{"metadata.page": 3}`` inside the search.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..geometry import distance

__all__ = [
    "encode_metadata", "decode_metadata", "metadata_filter", "resolve_missing", "mmr_select", "write_copy",
]  # fmt: skip

JSON_COLUMN = "metadata_json"
PREFIX = "metadata."
_SCALARS = (str, bool, int, float, datetime)
_DATETIME, _DATE = "__poincare_datetime__", "__poincare_date__"  # tags of the JSON text
_INT64 = (-(2**63), 2**63 - 1)


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
        too_big = isinstance(value, int) and not _INT64[0] <= value <= _INT64[1]
        if isinstance(value, _SCALARS) and not too_big:  # a huge int stays in the JSON only
            out[PREFIX + key] = value
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


# Conditions that hold on every stored row, or on none (the id column is never null).
ALWAYS = {"id": {"$exists": True}}
NEVER = {"id": {"$exists": False}}
_TRUE_WHEN_MISSING = ("$ne", "$nin")


def resolve_missing(condition: Any, has_column: Any) -> Any:
    """``condition`` (a dict filter on stored columns) with every test of a column no document
    has replaced by its value there: a metadata key that was never stored matches nothing,
    except ``$ne``, ``$nin`` and ``$exists: False``, which match every row. (Our filters refuse
    an unknown column by name; a framework's filter on a key no document has yet is normal.)"""
    if condition is None or not isinstance(condition, Mapping):
        return condition
    parts = []
    for key, value in condition.items():
        if key in ("$and", "$or"):
            parts.append({key: [resolve_missing(v, has_column) for v in value]})
        elif key.startswith("$") or key == "id" or has_column(key):
            parts.append({key: value})
        else:
            parts.append(ALWAYS if _holds_when_missing(value) else NEVER)
    return parts[0] if len(parts) == 1 else {"$and": parts}


def _holds_when_missing(test: Any) -> bool:
    if not isinstance(test, Mapping):
        return False  # equality
    verdicts = []
    for op, arg in test.items():
        if op == "$exists":
            verdicts.append(not arg)
        elif op == "$not":
            verdicts.append(not _holds_when_missing(arg))
        else:
            verdicts.append(op in _TRUE_WHEN_MISSING)
    return all(verdicts)


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
