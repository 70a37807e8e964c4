"""The inspector: a local web page showing a memory store (or a saved index) in the Poincaré disk,
coloured by time weight at a slider's time, with search and per-point details.

``poincare-index inspect PATH`` or ``Memory.inspect()``; see server.py for the endpoints and
data.py for what is computed (all on the server; the page only draws).
"""

from __future__ import annotations

from typing import Any

from .data import PROJECTION, StoreView, open_store, store_loader
from .server import InspectorServer

__all__ = ["InspectorServer", "StoreView", "open_store", "store_loader", "serve", "PROJECTION"]


def serve(source: Any, port: int = 0, *, touch: bool = False) -> InspectorServer:
    """Starts an inspector for a Memory (or an index) in a background thread; returns the server
    (``.url``, ``.close()``) as soon as it listens. The points are read and projected in another
    thread meanwhile (seconds for a large store): the page says so until they are in, and
    ``.wait_ready()`` waits for them."""
    if isinstance(source, StoreView):
        return InspectorServer(source, port).start()

    def load(report: Any) -> StoreView:
        report("projecting the points into the disk")
        return StoreView(source, touch=touch)

    return InspectorServer(load, port).start()
