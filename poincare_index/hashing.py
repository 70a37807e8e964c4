"""The default embedder: deterministic feature hashing of words, word pairs and character
n-grams into signed buckets, mapped to one hyperbolic depth. No model, no download; the same
vector for a text in every process and on every machine (its name, ``hashing-v1``, is what a
store records)."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._validation import as_texts
from .geometry import at_depth

__all__ = ["HashingEmbedder"]

_WORD = re.compile(r"\w+", re.UNICODE)

# Frequent English function words: hashed like any word but with a small weight, so that shared
# "the"/"is" do not make unrelated sentences look alike (a fixed stand-in for IDF, which would make
# a memory's embedding depend on the rest of the store).
_STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have he her his how
    i if in into is it its me my no not of on or our she so than that the their them then there
    these they this those to was we were what when where which who why will with would you your""".split()
)

# Past these sizes a text is read with numpy over its code points instead of one Python string
# per n-gram (~500 B of RAM per character of a word: "x" * 50_000_000 took the process down). The
# features, and the order they are added in, stay those of the per-n-gram computation, so every
# vector is the same bit for bit whichever path made it.
_LONG_WORD = 64  # a longer word: its n-grams counted through a table over its alphabet
_HUGE_WORD = 1 << 20  # a longer word: added chunk by chunk, never held as whole arrays
_LONG_TEXT = 1 << 20  # a longer text: its words read one at a time (two passes), not listed
_CHUNK = 1 << 20  # code points per numpy pass (~50 MB of temporaries)
_TABLE = 1 << 21  # largest n-gram id space (alphabet ** n) held as a table (~36 MB)
_SLOW_CHUNK = 1 << 15  # n-grams per pass where no table is held
_BATCH = 1 << 16  # features per np.add.at
_CACHE_FEATURES = 1 << 22  # features the word cache holds at most (~64 MB)
_CACHE_WORD = 1 << 14  # a word with more features is not cached (one word cannot flush the cache)
# Unicode's white space (str.isspace) lies below U+3001.
_SPACE = np.array([chr(c).isspace() for c in range(0x3001)], dtype=bool)


def _code_points(s: str) -> NDArray[np.uint32]:
    """The code points of ``s`` (lone surrogates included, as the str holds them)."""
    return np.frombuffer(s.encode("utf-32-le", "surrogatepass"), dtype="<u4")


def _decode(cps: NDArray[Any]) -> str:
    return np.ascontiguousarray(cps, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")


def _alphabet(pieces: Iterable[NDArray[np.uint32]]) -> NDArray[np.uint32]:
    """The distinct code points of ``pieces``, ascending: one piece by a sort, more by a presence
    table over Unicode (1.1 MB) rather than a sort of every code point."""
    pieces = iter(pieces)
    first = next(pieces, None)
    if first is None:
        return np.zeros(0, dtype=np.uint32)
    second = next(pieces, None)
    if second is None:
        return np.unique(first)
    present = np.zeros(0x110000, dtype=bool)
    present[first] = True
    present[second] = True
    for cps in pieces:
        present[cps] = True
    return np.flatnonzero(present).astype(np.uint32)


class _GramTable:
    """Bucket and sign of each n-gram over one alphabet, each distinct n-gram hashed once.

    ``lookup(cps)`` answers for the n-grams starting at ``cps[0 .. len - n]``. While
    ``len(alphabet) ** n`` fits ``_TABLE`` an n-gram's id is its digits in base ``len(alphabet)``
    and the answers sit in arrays (numpy gathers; the hash runs for n-grams not seen yet);
    beyond (a huge alphabet, or few n-grams), the n-grams are cut from the decoded text a slice
    at a time and hashed through a per-slice dict: slower (~1 µs an n-gram) but as bounded."""

    def __init__(
        self,
        hasher: HashingEmbedder,
        alphabet: NDArray[np.uint32],
        n: int,
        feature: Callable[[str], str],
        count: int,
    ) -> None:
        self.hasher, self.alphabet, self.n, self.feature = hasher, alphabet, n, feature
        self.base = int(alphabet.shape[0])
        self.size = self.base**n
        # A table costs ~10 ns an entry once, hashing an n-gram in Python ~1 µs: for a few
        # n-grams (``count`` in all) over a large alphabet the table is not worth building.
        self.tabled = self.size <= min(_TABLE, 64 * count)
        if self.tabled:
            self.bucket = np.zeros(self.size, dtype=np.intp)
            self.sign = np.zeros(self.size, dtype=np.float64)
            self.known = np.zeros(self.size, dtype=bool)
            # Code point -> digit by a gather where that table is small beside the work (an
            # ASCII alphabet: 128 entries), ~10x faster than a binary search of the alphabet.
            top = int(alphabet[-1]) + 1 if self.base else 0
            self.digit: NDArray[np.int64] | None = None
            if top <= 64 * count:
                self.digit = np.zeros(top, dtype=np.int64)
                self.digit[alphabet] = np.arange(self.base)

    def lookup(self, cps: NDArray[np.uint32]) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
        m = cps.shape[0] - self.n + 1
        if m <= 0:
            return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float64)
        if not self.tabled:
            return self._lookup_slow(cps, m)
        digits = self.digit[cps] if self.digit is not None else np.searchsorted(self.alphabet, cps)
        ids = digits[:m].copy()
        for k in range(1, self.n):
            ids *= self.base
            ids += digits[k : k + m]
        if not self.known[ids].all():
            seen = np.zeros(self.size, dtype=bool)
            seen[ids] = True
            fresh = np.flatnonzero(seen & ~self.known)
            powers = self.base ** np.arange(self.n - 1, -1, -1, dtype=np.int64)
            text, n = _decode(self.alphabet[(fresh[:, None] // powers) % self.base]), self.n
            hashed = [self.hasher._hash(self.feature(text[j : j + n])) for j in range(0, len(text), n)]
            self.bucket[fresh] = [h[0] for h in hashed]
            self.sign[fresh] = [h[1] for h in hashed]
            self.known[fresh] = True
        return self.bucket[ids], self.sign[ids]

    def _lookup_slow(self, cps: NDArray[np.uint32], m: int) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
        bucket = np.empty(m, dtype=np.intp)
        sign = np.empty(m, dtype=np.float64)
        n = self.n
        for a in range(0, m, _SLOW_CHUNK):
            b = min(a + _SLOW_CHUNK, m)
            text = _decode(cps[a : b + n - 1])
            grams = [text[i : i + n] for i in range(b - a)]
            hashed = {g: self.hasher._hash(self.feature(g)) for g in dict.fromkeys(grams)}
            pairs = [hashed[g] for g in grams]
            bucket[a:b] = [p[0] for p in pairs]
            sign[a:b] = [p[1] for p in pairs]
        return bucket, sign


class HashingEmbedder:
    """Deterministic bag-of-features embedding, mapped to a sphere of hyperbolic radius ``radius``.

    Each text is lower-cased and split into words (Unicode ``\\w+``). Features: every word
    (weight 1), every pair of consecutive words (weight 0.5), and the character 3- and 4-grams of
    each word with ``<``/``>`` boundary marks (weights summing to 1 per word, so "training" and
    "train" overlap). Frequent English function words weigh 0.15. A text without any word (emoji,
    punctuation, zero-width characters alone) is read as if each of its code points, white space
    aside, were a word, so "🔥", "🔥🔥" and "🎉🎉" get points of their own; only an empty or
    all-space text maps to the origin. Features are hashed (BLAKE2b) into ``dim`` signed buckets;
    the sum is normalised to unit length v and mapped to ``expmap0(radius * v)``, a point at
    hyperbolic distance ``radius`` from the origin. All texts share that depth, so the Poincaré
    distance between two texts is a monotone function of the cosine of their feature vectors.

    Time and memory are linear in the text's length whatever its words: the n-grams of a word
    longer than 64 characters are counted with numpy over its code points (each distinct n-gram
    hashed once), a word longer than 2**20 characters is added a chunk at a time and a text
    longer than 2**20 characters is read a word at a time, so beside a few copies of the text
    the work holds fixed-size chunks and tables (~150 MB at most). A 50 MB word over a small
    alphabet (a hex dump, DNA) takes ~2 s; over a large one (base64's 4-grams, random CJK),
    where no table fits, each n-gram is hashed in Python, ~2-3 µs a character. Vectors are
    those of the plain per-n-gram computation, bit for bit.
    """

    # Hybrid search's keyword share with this embedder, chosen on held-out queries
    # (benchmarks/bench_hybrid.py, BENCHMARKS.md "Step 7"): its words and n-grams say little
    # that BM25 does not, so the keyword side leads.
    hybrid_keyword_weight = 0.8

    def __init__(self, dim: int = 256, radius: float = 2.0) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"dim must be an int, got {type(dim).__name__}")
        if dim < 8:
            raise ValueError(f"dim must be >= 8, got {dim}")
        if not isinstance(radius, (int, float)) or not math.isfinite(radius) or not 0 < radius <= 8:
            raise ValueError(f"radius must be in (0, 8], got {radius!r}")
        self.dim = dim
        self.radius = float(radius)
        self.name = f"hashing-v1:dim={dim}:radius={self.radius:g}"
        self._word_cache: dict[str, tuple[NDArray[np.int64], NDArray[np.float64]]] = {}
        self._cached_features = 0

    def _hash(self, feature: str) -> tuple[int, float]:
        data = feature.encode("utf-8", "surrogatepass")
        h = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
        return h % self.dim, (1.0 if (h >> 63) & 1 else -1.0)

    def _hash_parts(self, *parts: str) -> tuple[int, float]:
        """:meth:`_hash` of ``"".join(parts)``, fed to BLAKE2b a chunk at a time: a feature of a
        huge word is never copied whole (nor encoded whole)."""
        digest = hashlib.blake2b(digest_size=8)
        for part in parts:
            for a in range(0, len(part), _CHUNK):
                digest.update(part[a : a + _CHUNK].encode("utf-8", "surrogatepass"))
        h = int.from_bytes(digest.digest(), "little")
        return h % self.dim, (1.0 if (h >> 63) & 1 else -1.0)

    def _word_features(self, word: str) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(buckets, signed weights) of one word: the word, then the 3-grams, then the 4-grams of
        ``<word>``; cached."""
        cached = self._word_cache.get(word)
        if cached is not None:
            return cached
        if len(word) > _LONG_WORD:
            parts = list(self._long_word_features(word))
            idx = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
            val = np.concatenate([p[1] for p in parts])
        else:
            scale = 0.15 if word in _STOPWORDS else 1.0
            feats = [("w:" + word, 1.0)]
            marked = f"<{word}>"
            grams = [marked[i : i + n] for n in (3, 4) for i in range(len(marked) - n + 1)]
            feats += [("c:" + g, 1.0 / len(grams)) for g in grams]
            idx = np.empty(len(feats), dtype=np.int64)
            val = np.empty(len(feats), dtype=np.float64)
            for j, (f, w) in enumerate(feats):
                idx[j], sign = self._hash(f)
                val[j] = sign * w * scale
        if idx.shape[0] <= _CACHE_WORD:
            # Bounded on unbounded vocabularies, by entries and by the features they hold.
            if len(self._word_cache) >= 500_000 or self._cached_features + idx.shape[0] > _CACHE_FEATURES:
                self._word_cache.clear()
                self._cached_features = 0
            self._word_cache[word] = (idx, val)
            self._cached_features += idx.shape[0]
        return idx, val

    def _long_word_features(self, word: str) -> Iterator[tuple[NDArray[np.intp], NDArray[np.float64]]]:
        """:meth:`_word_features` of a long word, in the same order, as chunks of (buckets,
        signed weights) computed over its code points, never one string per n-gram."""
        scale = 0.15 if word in _STOPWORDS else 1.0
        bucket, sign = self._hash_parts("w:", word)
        yield np.array([bucket], dtype=np.intp), np.array([sign * 1.0 * scale])
        length = len(word)
        w = 1.0 / (2 * length - 1)  # 1 / (the number of 3- and 4-grams of "<word>")
        marked_len = length + 2

        def marked(a: int, b: int) -> NDArray[np.uint32]:
            """Code points of ``("<" + word + ">")[a:b]``, without building that string."""
            head = "<" if a == 0 else ""
            tail = ">" if b == marked_len else ""
            return _code_points(head + word[max(a - 1, 0) : min(b - 1, length)] + tail)

        alphabet = _alphabet(marked(a, min(a + _CHUNK, marked_len)) for a in range(0, marked_len, _CHUNK))
        for n in (3, 4):
            starts = marked_len - n + 1
            table = _GramTable(self, alphabet, n, lambda g: "c:" + g, starts)
            for a in range(0, starts, _CHUNK):
                bucket_a, sign_a = table.lookup(marked(a, min(a + _CHUNK, starts) + n - 1))
                yield bucket_a, sign_a * w * scale

    def features(self, text: str) -> NDArray[np.float64]:
        """The unnormalised hashed feature vector of one text (float64, length dim)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        lowered = text.lower()
        if len(lowered) <= _LONG_TEXT:
            words = _WORD.findall(lowered)
            if not words:  # its code points are its words (a long run of them: with numpy)
                if len(lowered) > _LONG_WORD:
                    return self._symbol_features(lowered)
                words = [c for c in lowered if not c.isspace()]
                if not words:
                    return np.zeros(self.dim)
            if max(map(len, words)) <= _LONG_WORD:
                # The common case, in one bincount: the same sums as the in-order np.add.at below.
                parts = [self._word_features(w) for w in words]
                if len(words) > 1:
                    parts.append(self._pairs(words))
                idx, val = [p[0] for p in parts], [p[1] for p in parts]
                return np.bincount(np.concatenate(idx), weights=np.concatenate(val), minlength=self.dim)
            out = np.zeros(self.dim)
            self._add_words(out, words)
            self._add_pairs(out, words)
            return out
        # Too long to list its words: two passes over it, the words, then the pairs.
        out = np.zeros(self.dim)
        count = self._add_words(out, (m.group() for m in _WORD.finditer(lowered)))
        if count == 0:
            return self._symbol_features(lowered)
        if count > 1:
            self._add_pairs(out, (m.group() for m in _WORD.finditer(lowered)))
        return out

    def _add_words(self, out: NDArray[np.float64], words: Iterable[str]) -> int:
        """Adds each word's features to ``out``, in order; returns the number of words."""
        idx: list[NDArray[np.int64]] = []
        val: list[NDArray[np.float64]] = []
        held = count = 0
        for word in words:
            count += 1
            if len(word) > _HUGE_WORD:
                parts: Iterable[tuple[NDArray[Any], NDArray[np.float64]]] = self._long_word_features(word)
            else:
                parts = [self._word_features(word)]
            for i, v in parts:
                idx.append(i)
                val.append(v)
                held += i.shape[0]
                if held >= _BATCH:
                    if len(idx) == 1:  # one large part (a chunk of a huge word): no copy
                        np.add.at(out, i, v)
                    else:
                        np.add.at(out, np.concatenate(idx), np.concatenate(val))
                    idx.clear()
                    val.clear()
                    held = 0
        if idx:
            np.add.at(out, np.concatenate(idx), np.concatenate(val))
        return count

    def _pairs(self, words: Sequence[str]) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(buckets, signed weights) of each pair of consecutive words."""
        bi = [
            self._hash(f"b:{a} {b}") if len(a) + len(b) <= _CHUNK else self._hash_parts("b:", a, " ", b)
            for a, b in zip(words, words[1:])
        ]
        w = [0.15 if (a in _STOPWORDS or b in _STOPWORDS) else 0.5 for a, b in zip(words, words[1:])]
        return np.array([i for i, _ in bi], dtype=np.int64), np.array([s * x for (_, s), x in zip(bi, w)])

    def _add_pairs(self, out: NDArray[np.float64], words: Iterable[str]) -> None:
        """Adds each pair's features to ``out``, in order, ``_BATCH`` pairs at a time."""
        batch: list[str] = []
        for word in words:
            batch.append(word)
            if len(batch) > _BATCH:
                np.add.at(out, *self._pairs(batch))
                batch = batch[-1:]
        if len(batch) > 1:
            np.add.at(out, *self._pairs(batch))

    def _symbol_features(self, lowered: str) -> NDArray[np.float64]:
        """The features of a long text without a word, its code points (white space aside) taken
        as the words: per code point c the word "c" and its one 3-gram "<c>" (weight 1 each), then
        each pair (0.5), as :meth:`features` adds them for words; over numpy chunks."""
        out = np.zeros(self.dim)

        def pieces() -> Iterator[NDArray[np.uint32]]:
            for a in range(0, len(lowered), _CHUNK):
                cps = _code_points(lowered[a : a + _CHUNK])
                yield cps[~(_SPACE[np.minimum(cps, 0x3000)] & (cps <= 0x3000))]

        alphabet = _alphabet(pieces())
        if alphabet.shape[0] == 0:
            return out  # empty or white space alone: the origin
        count = len(lowered)
        word = _GramTable(self, alphabet, 1, lambda g: "w:" + g, count)
        gram = _GramTable(self, alphabet, 1, lambda g: f"c:<{g}>", count)
        for cps in pieces():
            (wb, ws), (gb, gs) = word.lookup(cps), gram.lookup(cps)
            np.add.at(out, np.column_stack([wb, gb]).ravel(), np.column_stack([ws, gs]).ravel())
        pair = _GramTable(self, alphabet, 2, lambda g: f"b:{g[0]} {g[1]}", count)
        last = np.zeros(0, dtype=np.uint32)
        for cps in pieces():
            joined = np.concatenate([last, cps])
            bucket, sign = pair.lookup(joined)
            np.add.at(out, bucket, sign * 0.5)
            last = joined[-1:]
        return out

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        texts = as_texts(texts)
        out = np.zeros((len(texts), self.dim))
        for i, text in enumerate(texts):
            out[i] = self.features(text)
        return at_depth(out, self.radius)

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim}, radius={self.radius:g})"
