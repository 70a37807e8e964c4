"""Token counting for ``max_tokens=`` budgets and ``stats()``: offline and replaceable.

The default, :func:`approx_token_count`, approximates a GPT-style BPE tokenizer without any
vocabulary file: every run of punctuation characters counts one token each, and every word
(Unicode ``\\w+``) counts ``ceil(len(word) / 4)`` tokens (BPE averages about four characters per
English token; short common words are one token). Pass ``token_counter=`` to :class:`Memory` to
use an exact tokenizer instead, e.g. ``lambda s: len(enc.encode(s))`` with tiktoken.
"""

from __future__ import annotations

import re

__all__ = ["approx_token_count"]

_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def approx_token_count(text: str) -> int:
    """Approximate BPE token count of ``text`` (see the module docstring)."""
    return sum((len(p) + 3) // 4 if p[0].isalnum() or p[0] == "_" else 1 for p in _PIECE.findall(text))
