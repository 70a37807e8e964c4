"""Closed objects refuse every call with one ClosedError naming the class and the call.

The public surface of each class is enumerated here with ``inspect`` (not from the decorator's
own bookkeeping), and every entry is called after ``close()``: a method added later is covered
without a list to keep in step, and the test fails if the class stops refusing. The index's own
close releases its core and mapped files, and is safe against searches and adds running in other
threads (tests/test_save_safety.py covers what a save after close leaves on disk)."""

from __future__ import annotations

import inspect
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import poincare_index as pi
from poincare_index import _interrupts
from poincare_index._closing import ClosedError, Released, refuse_when_closed

# Members a closed object still answers (see poincare_index/_closing.py).
ALLOWED = {"close", "closed", "__exit__"}
GUARDED_DUNDERS = ("__len__", "__iter__", "__contains__", "__getitem__", "__setitem__", "__delitem__",
                   "__enter__")  # fmt: skip


def public_surface(cls: type) -> dict[str, object]:
    """Every public member of ``cls`` and its bases, plus the container dunders it defines (not
    object's), as ``inspect.getattr_static`` finds them."""
    names = {n for n in dir(cls) if not n.startswith("_")}
    names |= {n for n in GUARDED_DUNDERS if any(n in vars(k) for k in cls.__mro__ if k is not object)}
    return {n: inspect.getattr_static(cls, n) for n in sorted(names - ALLOWED)}


def _placeholders(method: object) -> tuple[tuple[None, ...], dict[str, None]]:
    """None for every argument ``method`` requires: the closed-check comes before any argument
    is looked at, so any value will do."""
    params = list(inspect.signature(method).parameters.values())[1:]  # type: ignore[arg-type]
    required = [p for p in params if p.default is inspect.Parameter.empty]
    args = tuple(None for p in required if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    return args, {p.name: None for p in required if p.kind == p.KEYWORD_ONLY}


def assert_refuses_every_call(obj: object, what: str) -> list[str]:
    """Calls every entry of the public surface of a closed ``obj`` (methods with None for each
    required argument) and expects ClosedError "<Class>.<name>: ..." holding ``what``. Returns
    the names called."""
    cls = type(obj)
    called = []
    for name, member in public_surface(cls).items():
        prefix = f"{cls.__name__}.{name}: "
        if isinstance(member, (staticmethod, classmethod)):
            continue  # no instance involved (load, from_dataset, namespaces)
        if isinstance(member, property):
            with pytest.raises(ClosedError, match=what) as got:
                getattr(obj, name)
            assert str(got.value).startswith(prefix), str(got.value)
            if member.fset is not None:
                with pytest.raises(ClosedError, match=what):
                    setattr(obj, name, 1)
        elif callable(member):
            args, kwargs = _placeholders(member)
            with pytest.raises(ClosedError, match=what) as got:
                getattr(obj, name)(*args, **kwargs)
            assert str(got.value).startswith(prefix), str(got.value)
        else:  # a plain class attribute: data (kind, filter_scan_fraction), not a call
            assert not callable(member) and not hasattr(member, "__get__"), name
            continue
        called.append(name)
    assert obj.closed is True  # type: ignore[attr-defined]
    assert "closed" in repr(obj)
    if hasattr(obj, "close"):  # a session closes with its memory: it has none of its own
        obj.close()  # idempotent
    return called


def in_threads(calls: list) -> object:
    """Starts each of ``calls`` in a thread of its own; returns ``join(timeout)``, which waits for
    them and gives the exceptions they raised (a call stops at its first)."""
    errors: list[BaseException] = []

    def run(call) -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for th in threads:
        th.start()

    def join(timeout: float) -> list[BaseException]:
        for th in threads:
            th.join(timeout)
        return errors

    return join


def answered_or_refused(call) -> str:
    """ "answered" when ``call()`` returns, "refused" when it raises ClosedError; any other
    exception goes on (a closing object may refuse a call, never fail it otherwise)."""
    try:
        call()
    except ClosedError:
        return "refused"
    return "answered"


def _points(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return pi.expmap0(rng.normal(size=(n, dim)) * 0.3).astype(np.float32)


def _index(kind: str, n: int = 200, dim: int = 8):
    index = pi.PoincareIndex(dim, M=8, ef_construction=32, num_threads=2) if kind == "hnsw" else (
        pi.PoincareFlatIndex(dim, num_threads=2))  # fmt: skip
    index.add(_points(n, dim), metadata={"tag": [f"t{i % 3}" for i in range(n)]})
    return index


@pytest.mark.parametrize("kind", ["hnsw", "flat"])
@pytest.mark.parametrize("mmap", [False, True])
def test_a_closed_index_refuses_every_public_call(tmp_path, kind, mmap):
    index = _index(kind)
    if mmap:
        index.save(tmp_path / "a")
        index = pi.read_index(tmp_path / "a", mmap=True)
    index.close()
    called = assert_refuses_every_call(index, "this index is closed")
    # the surface really was walked: the calls users make most, the FAISS ones and the dunders
    expected = {"add", "add_with_ids", "search", "search_scored", "remove_ids", "save", "reset", "ntotal",
                "dim", "columns", "reconstruct", "range_search", "merge_from", "train", "__len__",
                "__contains__", "__enter__", "num_threads", "memory_usage", "verify"}  # fmt: skip
    assert expected <= set(called)
    assert repr(index) == f"<{type(index).__name__} (closed)>"
    if kind == "hnsw":  # a setter is refused too
        with pytest.raises(ClosedError, match=r"^PoincareIndex\.ef_search: this index is closed$"):
            index.ef_search = 10


def test_with_closes_the_index_and_a_closed_one_cannot_be_entered():
    with pi.PoincareFlatIndex(8) as index:
        index.add(_points(10))
        assert not index.closed and len(index) == 10
    assert index.closed
    with pytest.raises(ClosedError, match=r"PoincareFlatIndex.__enter__: this index is closed"):
        with index:
            pass
    with pytest.raises(ValueError, match="closed"):  # ClosedError is a ValueError, as a closed file's
        len(index)


def test_merging_a_closed_index_names_it():
    into, other = _index("flat"), _index("flat")
    other.close()
    message = r"^PoincareFlatIndex\.merge_from: other \(PoincareFlatIndex\) is closed$"
    with pytest.raises(ClosedError, match=message):
        into.merge_from(other)
    assert into.ntotal == 200


def test_a_subclass_and_its_own_methods_are_covered():
    class Mine(pi.PoincareFlatIndex):
        def extra(self) -> int:
            return self.ntotal

        @property
        def twice(self) -> int:
            return 2 * self.ntotal

    index = Mine(8)
    index.add(_points(5))
    assert index.extra() == 5 and index.twice == 10
    index.close()
    called = assert_refuses_every_call(index, "this index is closed")
    assert {"extra", "twice", "search"} <= set(called)


def _mapped(path: Path) -> list[str]:
    """The lines of /proc/self/maps mapping a file under ``path``."""
    return [line for line in Path("/proc/self/maps").read_text().splitlines() if str(path) in line]


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
@pytest.mark.parametrize("kind", ["hnsw", "flat"])
def test_close_lets_go_of_the_mapped_files(tmp_path, kind):
    _index(kind, n=3000, dim=16).save(tmp_path / "a")
    index = pi.read_index(tmp_path / "a", mmap=True)
    assert index.mapped and _mapped(tmp_path / "a")
    index.search(_points(3, 16), 5)
    index.close()
    assert _mapped(tmp_path / "a") == []


def test_close_waits_for_a_running_add():
    index = _index("hnsw")
    inside, release = threading.Event(), threading.Event()

    def hold(step: str) -> None:  # the add holds the write lock here until released
        if step == "index.add:core":
            inside.set()
            release.wait(10)

    added: list[object] = []
    _interrupts.set_fault_hook(hold)
    try:
        adder = threading.Thread(target=lambda: added.append(index.add(_points(50, seed=1))))
        adder.start()
        assert inside.wait(10)
        closer = threading.Thread(target=index.close)
        closer.start()
        closer.join(0.3)
        assert closer.is_alive() and not index.closed  # waiting for the add
        release.set()
        adder.join(10)
        closer.join(10)
    finally:
        _interrupts.set_fault_hook(None)
    assert added == [None] and index.closed  # the add completed, then the index closed


@pytest.mark.parametrize("mmap", [False, True])
def test_close_during_searches_never_crashes_and_each_search_answers_or_refuses(tmp_path, mmap):
    dim, n = 16, 20_000
    index = pi.PoincareFlatIndex(dim, num_threads=2)
    index.add(_points(n, dim), t=np.datetime64("2026-01-01", "us"), metadata={"g": np.arange(n) % 4})
    if mmap:
        index.save(tmp_path / "a")
        index = pi.read_index(tmp_path / "a", mmap=True)
    queries = _points(64, dim, seed=2)
    outcomes: list[str] = []
    started = threading.Barrier(5)

    def plain() -> None:
        D, I = index.search(queries, 10)
        assert I.shape == (64, 10) and np.all(I >= 0)

    def scored() -> None:
        r = index.search_scored(queries, 10, decay=pi.HalfLife(24), filters={"g": {"$ne": 1}})
        assert np.all(r.ids % 4 != 1)

    def search(i: int) -> None:
        started.wait()
        for _ in range(200):
            outcomes.append(answered_or_refused(plain if i % 2 else scored))

    join = in_threads([lambda i=i: search(i) for i in range(4)])
    started.wait()
    time.sleep(0.05)  # searches are running
    index.close()
    errors = join(60)
    assert not errors, errors[:3]
    assert "answered" in outcomes and "refused" in outcomes
    if mmap:
        assert _mapped(tmp_path / "a") == []  # freed once the last running search returned


def test_released_parts_raise_closed_error():
    gone = Released("PoincareIndex: this index was closed during the call")
    with pytest.raises(ClosedError, match="closed during the call"):
        gone.search  # noqa: B018
    with pytest.raises(ClosedError):
        len(gone)


def test_the_decorator_on_a_class_of_its_own():
    @refuse_when_closed("widget", allow=("status",))
    class Widget:
        def __init__(self) -> None:
            self._closed: bool | str = False
            self._size = 1

        def grow(self, by: int) -> int:
            self._size += by
            return self._size

        def status(self) -> str:
            return "closed" if self._closed else "open"

        @property
        def size(self) -> int:
            return self._size

        @size.setter
        def size(self, value: int) -> None:
            self._size = value

        @staticmethod
        def unit() -> int:
            return 1

        def __len__(self) -> int:
            return self._size

        def close(self) -> None:
            self._closed = True

    w = Widget()
    assert w.grow(2) == 3 and len(w) == 3 and not w.closed
    w.size = 5
    assert Widget.grow.__name__ == "grow" and inspect.signature(Widget.grow).parameters["by"]
    w.close()
    assert w.status() == "closed" and Widget.unit() == 1  # allowed, static
    for call in (lambda: w.grow(1), lambda: w.size, lambda: setattr(w, "size", 2), lambda: len(w)):
        with pytest.raises(ClosedError, match=r"^Widget\.\w+: this widget is closed$"):
            call()
    w._closed = "its parent was closed"  # a reason given as a str is the message
    with pytest.raises(ClosedError, match=r"^Widget\.grow: its parent was closed$"):
        w.grow(1)
    # applied twice, nothing is wrapped twice
    refuse_when_closed("widget")(Widget)
    assert Widget.grow.__wrapped__.__name__ == "grow" and not hasattr(Widget.grow.__wrapped__, "__wrapped__")


def test_closed_error_is_a_value_error_exported_by_the_package():
    assert pi.ClosedError is ClosedError and "ClosedError" in pi.__all__
    assert issubclass(ClosedError, ValueError)  # as Python's "I/O operation on closed file"


def test_a_guarded_method_takes_and_passes_on_its_arguments_as_the_original_does():
    # The wrapper is written with the method's own parameters (no *args/**kwargs to pack).
    class Many:
        def __init__(self) -> None:
            self._closed = False

        def mixed(self, a, /, b, c=[3], *rest, d, e=5, **more):  # noqa: B006 - its identity is checked
            return a, b, c, rest, d, e, more

        def keywords(self, *, only):
            return only

    refuse_when_closed()(Many)
    m = Many()
    unguarded = Many.mixed.__wrapped__
    for args, kwargs in (((1, 2), {"d": 4}), ((1, 2, 9, 10, 11), {"d": 4, "e": 6, "z": 7})):
        assert m.mixed(*args, **kwargs) == unguarded(m, *args, **kwargs)
    assert m.mixed(1, b=2, d=0)[2] is unguarded.__defaults__[0]  # the default object itself
    assert m.keywords(only=7) == 7
    assert inspect.signature(Many.mixed) == inspect.signature(unguarded)
    search = pi.PoincareIndex.search
    assert inspect.signature(search) == inspect.signature(search.__wrapped__)
    with pytest.raises(TypeError):
        m.mixed(a=1, b=2, d=3)  # positional-only stays positional-only
    m._closed = True
    with pytest.raises(ClosedError, match=r"^Many\.mixed: this Many is closed$"):
        m.mixed(1, 2, d=3)
