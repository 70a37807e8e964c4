"""Progress bars for long work (tqdm), opt-in: ``progress=True`` on the call."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator


class _Silent:
    def update(self, n: int = 1) -> None:
        return None


@contextmanager
def progress_bar(enabled: Any, total: int | None, what: str, unit: str = "pt") -> Iterator[Any]:
    """A tqdm bar over ``total`` units (None: counted, no total) when ``enabled`` (a bool),
    else one that does nothing."""
    if not isinstance(enabled, bool):
        raise TypeError(f"progress must be True or False, got {type(enabled).__name__}")
    if not enabled:
        yield _Silent()
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=what, unit=unit, unit_scale=True, leave=False)
    try:
        yield bar
    finally:
        bar.close()
