"""Objects that refuse every call once closed, with one error.

A class opts in with one line, ``@refuse_when_closed("index")`` (the word names the object in
the message), and keeps its state in ``self._closed``: false while open, true once closed (or a
str: the reason shown, for a handle closed because its parent was). Every public method and
property of the class and of its bases (getter, setter, deleter), and the container dunders
(``__len__``, ``__iter__``, ``__contains__``, ``__getitem__``, ``__setitem__``,
``__delitem__``) and ``__enter__``, then check the flag first and raise :class:`ClosedError`,
"PoincareIndex.search: this index is closed" (``bool(obj)`` too where it is ``__len__``).
``close``, ``closed`` and ``__exit__`` are never refused; a ``closed`` property is added where
the class has none, and a ``__repr__`` the class defines answers ``<PoincareIndex (closed)>``
once closed. ``self._closed`` must be set before ``__init__`` makes a guarded call. Subclasses
are covered as they are defined, their own methods included. Static and class methods are left
alone (they use no instance), and so are plain class attributes (data, not calls).

The check is one attribute read and a branch in a wrapper with the method's own parameters:
0.06-0.08 us a call (``ntotal``: 0.27 us against 0.20), lost in the noise of a one-query search
of a 1,000-point index (16-20 us); measured on Python 3.11, interleaved with the unwrapped
function.

What ``close`` releases is replaced by a :class:`Released` stand-in: a call that passed the
check before ``close`` ran and reaches for it afterwards gets the same ClosedError instead of
whatever a missing attribute would raise. The objects themselves are let go by reference: a
call still running holds its own reference to them (a C++ search keeps its core alive until it
returns), so nothing is freed under it.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any, Callable, TypeVar

__all__ = ["ClosedError", "Released", "refuse_when_closed", "refuse_if_closed"]

_T = TypeVar("_T", bound=type)

# Never refused: what a caller uses to close, to ask, and to leave a ``with`` block.
_ALWAYS_ALLOWED = frozenset({"close", "closed", "__exit__"})
# Dunders that are calls on the object's contents (``len(obj)``, ``x in obj``, ``with obj``);
# the others (``__eq__``, ``__hash__``, pickling, ``__del__``) concern the object itself.
_GUARDED_DUNDERS = frozenset(
    {"__len__", "__iter__", "__contains__", "__getitem__", "__setitem__", "__delitem__", "__enter__"}
)


class ClosedError(ValueError):
    """A call on an object after its ``close()``: a ValueError, as Python's "I/O operation on
    closed file" is. The message names the class and the call."""


def _message(obj: Any, call: str, what: str | None, state: Any) -> str:
    owner = type(obj).__name__
    reason = state if isinstance(state, str) else f"this {what or owner} is closed"
    return f"{owner}.{call}: {reason}"


def refuse_if_closed(obj: Any, call: str, what: str | None = None) -> None:
    """The decorator's check and message, for code outside the guarded methods that must check
    again (a save that waited for a lock while the object was closed)."""
    state = obj._closed
    if state:
        raise ClosedError(_message(obj, call, what, state))


class Released:
    """Stands in for what a closed object let go of (an index's core, its columns): any use
    raises ClosedError with ``message``."""

    __slots__ = ("_message",)

    def __init__(self, message: str) -> None:
        self._message = message

    def __getattr__(self, name: str) -> Any:
        raise ClosedError(self._message)

    def __len__(self) -> int:
        raise ClosedError(self._message)

    def __repr__(self) -> str:
        return f"<released: {self._message}>"


def _is_guard(fn: Any) -> bool:
    # functools.wraps copies a function's __dict__ into a wrapper of it (a forwarding method
    # built from a guarded one): the mark counts only on the function it was set on.
    return getattr(fn, "__closed_guard__", None) is fn


def _guard_function(fn: Callable[..., Any], call: str, what: str | None) -> Callable[..., Any]:
    def refuse(obj: Any) -> None:
        raise ClosedError(_message(obj, call, what, obj._closed))

    guarded = _same_parameters(fn, refuse)
    if guarded is None:

        def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self._closed:
                refuse(self)
            return fn(self, *args, **kwargs)

    functools.update_wrapper(guarded, fn)
    guarded.__closed_guard__ = guarded  # type: ignore[attr-defined]
    return guarded


_P = inspect.Parameter


class _Default:
    """Stands for a default value in the wrapper's source; the real defaults are set after."""

    def __repr__(self) -> str:
        return "None"


_GENERATED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "<closed-check>")


def _same_parameters(fn: Callable[..., Any], refuse: Callable[[Any], None]) -> Any:
    """The check in a wrapper that takes ``fn``'s own parameters and hands them on as they
    came, or None where it cannot be written (then one with ``*args, **kwargs`` is used).
    CPython calls through such a wrapper for ~5 ns more than ``fn`` itself; packing ``*args``
    and ``**kwargs`` cost ~120 ns a call (measured on Python 3.11), a share of a one-query search
    worth saving. The wrapper's defaults are ``fn``'s own objects."""
    if not inspect.isfunction(fn):
        return None
    signature = inspect.signature(fn, follow_wrapped=False)
    params = list(signature.parameters.values())
    if not params or params[0].kind not in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD):
        return None
    if {p.name for p in params} & {"_fn", "_refuse"}:
        return None
    placeholder = _Default()
    declared = signature.replace(
        parameters=[
            p.replace(annotation=_P.empty, default=_P.empty if p.default is _P.empty else placeholder)
            for p in params
        ],
        return_annotation=inspect.Signature.empty,
    )
    passed = [
        f"*{p.name}" if p.kind == _P.VAR_POSITIONAL
        else f"**{p.name}" if p.kind == _P.VAR_KEYWORD
        else f"{p.name}={p.name}" if p.kind == _P.KEYWORD_ONLY
        else p.name
        for p in params
    ]  # fmt: skip
    me = params[0].name
    source = (
        f"def guarded{declared}:\n"
        f"    if {me}._closed:\n"
        f"        _refuse({me})\n"
        f"    return _fn({', '.join(passed)})\n"
    )
    namespace: dict[str, Any] = {"_fn": fn, "_refuse": refuse}
    # Built from parameter names only, as dataclasses builds __init__; named as a file of this
    # package, so what walks the stack for the user's frame (warnings) passes over it.
    exec(compile(source, _GENERATED, "exec"), namespace)
    guarded = namespace["guarded"]
    guarded.__defaults__ = fn.__defaults__
    guarded.__kwdefaults__ = fn.__kwdefaults__
    return guarded


def _guard_repr(fn: Callable[..., str]) -> Callable[..., str]:
    @functools.wraps(fn)
    def guarded(self: Any) -> str:
        if getattr(self, "_closed", False):
            return f"<{type(self).__name__} (closed)>"
        return fn(self)

    guarded.__closed_guard__ = guarded  # type: ignore[attr-defined]
    return guarded


def _guard_property(prop: property, call: str, what: str | None) -> property:
    def wrap(fn: Any) -> Any:
        return fn if fn is None or _is_guard(fn) else _guard_function(fn, call, what)

    return property(wrap(prop.fget), wrap(prop.fset), wrap(prop.fdel), prop.__doc__)


def _guarded(name: str, attr: Any, what: str | None) -> Any:
    """``attr`` with the check, or None when it needs none (or has it already)."""
    if name == "__repr__":
        return None if _is_guard(attr) or not inspect.isfunction(attr) else _guard_repr(attr)
    if isinstance(attr, property):
        accessors = [f for f in (attr.fget, attr.fset, attr.fdel) if f is not None]
        return None if all(_is_guard(f) for f in accessors) else _guard_property(attr, name, what)
    if inspect.isfunction(attr) and not _is_guard(attr):
        return _guard_function(attr, name, what)
    return None  # static and class methods, class attributes, nested classes


def _guard_class(cls: type, what: str | None, allowed: frozenset[str]) -> None:
    seen: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        for name, attr in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)  # the first definition along the MRO is the one instances see
            if name in allowed or (name.startswith("_") and name not in _GUARDED_DUNDERS | {"__repr__"}):
                continue
            replacement = _guarded(name, attr, what)
            if replacement is not None:
                setattr(cls, name, replacement)
    if not any("closed" in vars(k) for k in cls.__mro__):
        cls.closed = property(  # type: ignore[attr-defined]
            lambda self: bool(self._closed),
            doc="True once :meth:`close` has run; every other call then raises ClosedError.",
        )


def refuse_when_closed(what: str | None = None, *, allow: tuple[str, ...] = ()) -> Callable[[_T], _T]:
    """The class decorator (see the module docstring). ``what`` names the object in messages
    ("this index is closed"; default the class name); ``allow`` lists more members that stay
    callable once closed. Applied again (to a class given members later), it guards the new
    ones only."""
    allowed = _ALWAYS_ALLOWED | frozenset(allow)

    def decorate(cls: _T) -> _T:
        _guard_class(cls, what, allowed)
        if "__closed_subclasses__" not in vars(cls):
            _cover_subclasses(cls, what, allowed)
        return cls

    return decorate


def _cover_subclasses(cls: type, what: str | None, allowed: frozenset[str]) -> None:
    """Guards every subclass of ``cls`` as it is defined (its own methods included)."""
    own = vars(cls).get("__init_subclass__")

    def __init_subclass__(sub: type, **kwargs: Any) -> None:
        if own is not None:
            own.__func__(sub, **kwargs)
        else:
            super(cls, sub).__init_subclass__(**kwargs)  # type: ignore[misc]
        _guard_class(sub, what, allowed)

    cls.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]
    cls.__closed_subclasses__ = True  # type: ignore[attr-defined]
