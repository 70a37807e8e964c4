"""Parity by construction: a class that stands in for Memory or Session (AsyncMemory, the
distributed RemoteMemory) gets a member for each of the original's public ones, so a method added
to Memory is offered by every stand-in without a list to keep in step."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["mirror"]


def mirror(
    target: type,
    into: type,
    method: Callable[[str, Callable[..., Any]], Callable[..., Any]],
    read: Callable[[str], Callable[[Any], Any]] | None,
    skip: tuple[str, ...] = (),
) -> None:
    """Gives ``into`` each public member of ``target`` that it does not define itself and that
    ``skip`` does not name: ``method(name, function)`` for a method, a property whose getter is
    ``read(name)`` (with the original's docstring) for a property, static methods as they are.
    With ``read`` None properties are left out (a parity test then reports them missing)."""
    for name in dir(target):
        if name.startswith("_") or name in skip or name in into.__dict__:
            continue
        attr = inspect.getattr_static(target, name)
        if isinstance(attr, property):
            if read is not None:
                setattr(into, name, property(read(name), doc=attr.__doc__))
        elif isinstance(attr, staticmethod):
            setattr(into, name, attr)
        elif inspect.isfunction(attr):
            setattr(into, name, method(name, attr))
