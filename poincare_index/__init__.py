"""poincare_index: a time-aware hyperbolic vector index (Poincaré ball), FAISS-style API.

>>> import numpy as np, poincare_index as pi
>>> index = pi.PoincareIndex(dim=8)
>>> index.add(pi.project(np.random.default_rng(0).normal(size=(100, 8)) * 0.1))
>>> D, I = index.search(index.reconstruct(3).reshape(1, -1), k=5)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _core
from ._closing import ClosedError
from ._core import IndexFormatError
from ._interrupts import InconsistentStateError
from ._time import NaiveTimeWarning
from .custom_decay import CustomDecay
from .decay import (
    DecayPolicy,
    Ebbinghaus,
    Exponential,
    HalfLife,
    Product,
    ValidityWindow,
    generative_agents_recency,
)
from .factory import index_factory
from .faiss_surface import SearchParameters
from .geometry import BALL_MARGIN, depth, distance, expmap0, logmap0, mobius_add, project
from .index import PoincareFlatIndex, PoincareIndex
from .io import read_index, write_index
from .scored import ScoredResults

if TYPE_CHECKING:
    from .memory import AsyncMemory, Memory, Result, Session, StoreLockedError

__version__ = "0.1.0"

__all__ = [
    "CustomDecay",
    "PoincareIndex",
    "PoincareFlatIndex",
    "SearchParameters",
    "index_factory",
    "write_index",
    "read_index",
    "IndexFormatError",
    "InconsistentStateError",
    "ClosedError",
    "NaiveTimeWarning",
    "ScoredResults",
    "Memory",
    "AsyncMemory",
    "Result",
    "Session",
    "StoreLockedError",
    "DecayPolicy",
    "HalfLife",
    "Ebbinghaus",
    "ValidityWindow",
    "Exponential",
    "Product",
    "generative_agents_recency",
    "distance",
    "depth",
    "expmap0",
    "mobius_add",
    "logmap0",
    "project",
    "BALL_MARGIN",
    "kernel_name",
    "__version__",
]


def kernel_name() -> str:
    """The SIMD kernel family chosen for this CPU at import ("avx512", "avx2" or "portable")."""
    return str(_core.kernel_name())


# The memory layer (and its keyword engine) loads on first use: ``import poincare_index`` for the
# index alone stays light.
_LAZY = ("Memory", "AsyncMemory", "Result", "Session", "StoreLockedError")


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import memory

    value = getattr(memory, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
