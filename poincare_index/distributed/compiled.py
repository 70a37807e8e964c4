"""The low-latency path of a search that goes to every shard: a Ray Compiled Graph (beta in Ray)
from the driver to all shard actors, which skips Ray's per-call task submission (about 1 ms per
call on the machine of BENCHMARKS.md). It is an optimisation only: when it is busy (another
thread holds it), the shards changed, or anything fails, the caller takes the plain path, which
does the error handling (restoration, naming a dead shard, partial results)."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["CompiledFanout"]

_MAX_FAILURES = 3  # then the compiled path stays off for this index


class CompiledFanout:
    """One compiled graph ``inputs -> [shard.query(method, args) for each shard]`` for the current
    actor handles, rebuilt when they change (a shard restored, a time shard opened or dropped)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._graph: Any = None
        self._actors: tuple[Any, ...] = ()
        self.failures = 0
        self._closed = False  # a search still running after close() takes the plain path

    def run(self, actors: list[Any], method: str, args: tuple[Any, ...], timeout: float) -> list[Any] | None:
        """Every shard's answer to ``method(*args)``, in order; None when this path cannot answer
        now (the caller then makes plain calls)."""
        import ray

        if self.failures >= _MAX_FAILURES or not actors or not self._lock.acquire(blocking=False):
            return None
        try:
            if self._closed:
                return None
            if (
                self._graph is None
                or len(actors) != len(self._actors)
                or any(a is not b for a, b in zip(actors, self._actors))
            ):
                self._teardown()
                self._graph, self._actors = _compile(actors), tuple(actors)
            return list(ray.get(self._graph.execute(method, args), timeout=timeout))
        except Exception as exc:  # noqa: BLE001 - any failure: the plain path answers and reports it
            if isinstance(exc, ray.exceptions.RayTaskError):  # the shard's own error: graph intact
                return None
            self.failures += 1
            self._teardown()
            return None
        finally:
            self._lock.release()

    def _teardown(self) -> None:
        graph, self._graph, self._actors = self._graph, None, ()
        if graph is not None:
            try:
                graph.teardown()
            except Exception:  # noqa: BLE001 - a graph with a dead actor may not tear down cleanly
                pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._teardown()


def _compile(actors: list[Any]) -> Any:
    from ray.dag import InputNode, MultiOutputNode

    with InputNode() as inp:
        graph = MultiOutputNode([a.query.bind(inp[0], inp[1]) for a in actors])
    return graph.experimental_compile()
