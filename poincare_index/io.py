"""Saving and loading indexes: ``write_index`` / ``read_index`` as in FAISS (a saved index is a
directory; its layout and checks are described in ``poincare_index._index_files``)."""

from __future__ import annotations

from . import index as _index  # registers both index kinds with the file format
from ._core import IndexFormatError
from ._index_files import FORMAT_NAME, FORMAT_VERSION, MANIFEST, PathLike, read_index, write_index

__all__ = [
    "write_index",
    "read_index",
    "IndexFormatError",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST",
    "PathLike",
]

del _index
