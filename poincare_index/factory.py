"""``index_factory(d, "HNSW32")``: an index from a FAISS-style description string."""

from __future__ import annotations

import re
from typing import Any

from ._validation import as_positive_int
from .index import PoincareFlatIndex, PoincareIndex

__all__ = ["index_factory"]

_HNSW = re.compile(r"HNSW(\d+)?")
# Options after the kind, as name=value: the constructor argument each one sets and its type.
_OPTIONS: dict[str, tuple[str, type]] = {
    "Curvature": ("curvature", float),
    "efConstruction": ("ef_construction", int),
    "efSearch": ("ef_search", int),
    "seed": ("seed", int),
}
# FAISS's names for the coded storage of an HNSW index: what the graph walk reads.
_STORAGE = {"SQ8": "sq8", "SQfp16": "f16"}


def index_factory(d: int, description: str, **kwargs: Any) -> PoincareIndex | PoincareFlatIndex:
    """An index of dimension ``d`` from a description: ``"Flat"`` (exact) or ``"HNSW<M>"``
    (graph, M links per node, default 32 as FAISS's), then comma-separated options: FAISS's
    ``SQ8`` or ``SQfp16`` (HNSW only: ``storage="sq8"`` / ``"f16"``, the walk reads codes and
    re-ranks from float32), ``Curvature=<c>``, ``efConstruction=<n>``, ``efSearch=<n>``,
    ``seed=<n>`` (the last two, and efConstruction, HNSW only). E.g.
    ``index_factory(64, "HNSW32,SQ8,Curvature=0.5")``.
    ``kwargs`` go to the constructor (``num_threads=``). ValueError for anything else: the
    string names the part it could not read."""
    dim = as_positive_int(d, "d")
    if not isinstance(description, str):
        raise TypeError(f"description must be a str, got {type(description).__name__}")
    kind, *options = [part.strip() for part in description.split(",")]
    match = _HNSW.fullmatch(kind)
    if kind != "Flat" and match is None:
        raise ValueError(
            f"index_factory: unknown index kind {kind!r} in {description!r} "
            "(this library builds 'Flat' and 'HNSW<M>', the latter with ',SQ8' or ',SQfp16' codes; "
            "no IVF or PQ)"
        )
    args: dict[str, Any] = {}
    for option in options:
        if option in _STORAGE:
            if kind == "Flat":
                raise ValueError(
                    f"index_factory: {option} applies to HNSW, not Flat (the flat scan is exact)"
                )
            args["storage"] = _STORAGE[option]
            continue
        name, sep, value = option.partition("=")
        if not sep or name not in _OPTIONS:
            known = ", ".join([*_STORAGE, *_OPTIONS])
            raise ValueError(f"index_factory: unknown option {option!r} in {description!r} (known: {known})")
        if kind == "Flat" and name != "Curvature":
            raise ValueError(f"index_factory: {name} applies to HNSW, not Flat")
        arg, kind_of = _OPTIONS[name]
        try:
            args[arg] = kind_of(value)
        except ValueError:
            raise ValueError(f"index_factory: {name} must be a {kind_of.__name__}, got {value!r}") from None
    if match is None:
        return PoincareFlatIndex(dim, **args, **kwargs)
    return PoincareIndex(dim, M=int(match.group(1) or 32), **args, **kwargs)
