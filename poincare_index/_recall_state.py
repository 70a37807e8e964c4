"""An HNSW index's side of the recall target: its current calibration, the width a target asks
for, the width a fused search's reach asks for, and the calibration's part of a saved manifest
(the measuring itself is recall.py's)."""

from __future__ import annotations

from typing import Any

from ._core import IndexFormatError
from ._validation import as_positive_int
from .recall import (
    DEFAULT_RECALL_TARGET,
    STALE_SHARE,
    Beam,
    RecallTable,
    as_recall,
    calibrate,
    on_grid,
    scan_is_cheaper,
)

__all__ = ["RecallCalibrated"]

# The width a scan is recorded as having used (wider than any walk).
_SCAN_WIDTH = 2**31 - 1
# Distinct (target, k) pairs whose beams one calibration remembers.
_BEAMS_KEPT = 1024


class _Calibration:
    """A recall table with what it was measured at (live points, the index's change count) and
    the beams asked of it so far."""

    __slots__ = ("table", "points", "changes", "beams")

    def __init__(self, table: RecallTable | None, points: int, changes: int) -> None:
        self.table = table
        self.points = points
        self.changes = changes
        self.beams: dict[tuple[float, int], Beam] = {}

    def stale(self, changes: int) -> bool:
        return changes - self.changes >= STALE_SHARE * max(self.points, 1)


class RecallCalibrated:
    """Mixin of PoincareIndex: ``recall_table``, ``calibrate()``, ``expected_recall()`` and the
    beams the search calls ask for (see recall.py)."""

    # Provided by the index.
    _core: Any
    _write_lock: Any
    _changes: int
    M: int
    ntotal: int
    # An index made by the constructor or loaded sets its own; these hold for one made bare.
    _recall_target: float = DEFAULT_RECALL_TARGET
    _calibration: _Calibration | None = None

    @property
    def recall_table(self) -> RecallTable | None:
        """What this index measured of its own recall (:class:`~poincare_index.recall.RecallTable`),
        measured now if it never was or enough points changed since; None while the index is
        small enough that every target is met by an exact scan."""
        return self._current_calibration().table

    def calibrate(self) -> RecallTable | None:
        """Measures the recall table now (a search does when the table is missing or stale: call
        this after a bulk load to keep that cost out of the first search). Returns it."""
        with self._write_lock:
            self._forget_calibration()
            return self._current_calibration().table

    def expected_recall(self, k: int = 10, *, ef: int | None = None, recall: float | None = None) -> float:
        """The recall target a ``search(x, k, ef=ef, recall=recall)`` call meets, from the recall
        table (:meth:`~poincare_index.recall.RecallTable.meets`: held-out-like queries reach it,
        stored points and points near them are missed at most a fifth as often): 1.0 where the
        call scans exactly, 0.0 for a width below the table's."""
        k = as_positive_int(k, "k")
        beam = self._beam(k, ef, recall)  # type: ignore[attr-defined]
        if beam.exact:
            return 1.0
        table = self._current_calibration().table
        if table is None:  # a fixed width on an index too small to measure: every point is seen
            return 1.0 if beam.ef >= self.ntotal else 0.0
        return table.expected(k, max(beam.ef, k))

    def _forget_calibration(self) -> None:
        """Drops the table after a change to how the walk reads (storage, switches): the next
        search that needs it measures again."""
        self._calibration = None

    def _walk_search(self, q: Any, k: int, ef: int, first_part: bool = False) -> Any:
        """The graph search at width ``ef`` (of each list's first part with ``first_part``),
        whatever the index's target (for measuring it)."""
        return self._core.search(q, k, ef, first_part)

    def _current_calibration(self) -> _Calibration:
        cal = self._calibration
        if cal is not None and not cal.stale(self._changes):
            return cal
        with self._write_lock:  # one measuring at a time, and no add or removal during it
            cal = self._calibration
            if cal is None or cal.stale(self._changes):
                table = calibrate(self)  # type: ignore[arg-type]
                cal = _Calibration(table, int(self._core.ntotal), self._changes)
                self._calibration = cal
            return cal

    def _target_beam(self, target: float, k: int) -> Beam:
        """The beam for a search of the k best at ``target``: the table's width, or a scan."""
        cal = self._current_calibration()
        beam = cal.beams.get((target, k))
        if beam is None:
            width = None if cal.table is None else cal.table.ef_for(target, k)
            if width is None or scan_is_cheaper(width, cal.points, self.M):
                beam = Beam(k, target, exact=True)
            else:
                beam = Beam(width, target, first_part=cal.table.first_part)
            if len(cal.beams) >= _BEAMS_KEPT:
                cal.beams.clear()
            cal.beams[(target, k)] = beam
        return beam

    def _width_for_reach(self, target: float, k: int, reach: int, used: int) -> tuple[int, bool]:
        """See IndexBase._width_for_reach: the width the table gives for the ``reach`` nearest
        (reach past ``used``: at least twice ``used``), or a scan where none reaches the target
        or a scan is cheaper."""
        cal = self._calibration
        if reach == 0 or cal is None or cal.table is None:
            return used, False
        if reach <= used:
            need = cal.table.ef_for(target, max(k, reach))
            if need is not None and need <= used:
                return used, False
        else:
            found = cal.table.ef_for(target, used + 1)
            need = None if found is None else max(2 * used, found)
        if need is None or scan_is_cheaper(need, cal.points, self.M):
            return _SCAN_WIDTH, True
        return on_grid(need), False

    def _saved_recall(self) -> dict[str, Any]:
        """The manifest's recall entries: the target, and the table (measured now if missing or
        stale, so a loaded index never measures before its first search) with the changes since
        it was measured."""
        out: dict[str, Any] = {"recall_target": self._recall_target}
        cal = self._current_calibration()
        if cal.table is not None:
            out["recall_table"] = cal.table.as_dict()
            out["recall_changes"] = self._changes - cal.changes
        return out

    def _restore_recall(self, params: dict[str, Any], where: str) -> None:
        """Reads what _saved_recall wrote (manifests before the target hold none of it)."""
        if "recall_target" in params:
            try:
                self._recall_target = as_recall(params["recall_target"], "recall_target")
            except (TypeError, ValueError) as exc:
                raise IndexFormatError(f"{where}: {exc}") from None
        if "recall_table" in params:
            table = RecallTable.from_dict(params["recall_table"], where)
            changes = params.get("recall_changes")
            if type(changes) is not int or not 0 <= changes < 2**40:
                raise IndexFormatError(f"{where}: recall_changes must be an integer >= 0, got {changes!r}")
            self._changes = changes
            self._calibration = _Calibration(table, table.points, 0)
