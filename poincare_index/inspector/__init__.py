"""The inspector: a local web page showing a memory store (or a saved index) in the Poincaré disk,
coloured by time weight at a slider's time, with search and per-point details.

``poincare-index inspect PATH`` or ``Memory.inspect()``; see server.py for the endpoints and
data.py for what is computed (all on the server; the page only draws).
"""

from __future__ import annotations

from typing import Any

from .data import PROJECTION, StoreView, open_store
from .server import InspectorServer

__all__ = ["InspectorServer", "StoreView", "open_store", "serve", "PROJECTION"]


def serve(source: Any, port: int = 0, *, touch: bool = False) -> InspectorServer:
    """Starts an inspector for a Memory (or an index) in a background thread; returns the server
    (``.url``, ``.close()``)."""
    view = source if isinstance(source, StoreView) else StoreView(source, touch=touch)
    return InspectorServer(view, port).start()
