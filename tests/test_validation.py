"""The input contract: every bad input raises the right exception, names the problem and the row,
and changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

import poincare_index as pi

INDEXES = [pi.PoincareIndex, pi.PoincareFlatIndex]


@pytest.fixture(params=INDEXES)
def index(request):
    idx = request.param(4)
    idx.add(np.array([[0.1, 0, 0, 0], [0, 0.1, 0, 0]], dtype=np.float32))
    return idx


def unchanged(index, before=2):
    assert index.ntotal == before
    D, I = index.search(np.zeros((1, 4), dtype=np.float32), 2)
    assert set(I[0]) == {0, 1}


def test_nan_and_inf_name_the_row(index):
    x = np.full((3, 4), 0.1, dtype=np.float32)
    x[2, 1] = np.nan
    with pytest.raises(ValueError, match="row 2 contains NaN or Inf"):
        index.add(x)
    x[2, 1] = np.inf
    with pytest.raises(ValueError, match="row 2"):
        index.add_with_ids(x, [10, 11, 12])
    with pytest.raises(ValueError, match="row 0 contains NaN"):
        index.search(np.full((1, 4), np.nan), 1)
    with pytest.raises(ValueError, match="NaN or Inf"):
        index.add(np.array([[1e300, 0, 0, 0]]))  # overflows float32
    unchanged(index)


def test_outside_ball(index):
    x = np.zeros((4, 4), dtype=np.float32)
    x[3, 0] = 1.0
    with pytest.raises(ValueError, match="row 3 lies on or outside the Poincare ball"):
        index.add(x)
    with pytest.raises(ValueError, match="outside the Poincare ball"):
        index.search(np.array([[0.6, 0.6, 0.6, 0.0]]), 1)
    unchanged(index)


def test_margin_after_float32_cast(index):
    # float32 points at norm 0.9999 (and up to 1 - 6e-8) are accepted ...
    ok = np.zeros((2, 4), dtype=np.float32)
    ok[0, 0] = 0.9999
    ok[1, 1] = np.nextafter(np.float32(1), np.float32(0))  # 1 - 5.96e-8: c|x|^2 = 1 - 1.19e-7
    index.add(ok)
    assert index.ntotal == 4
    # ... while a float64 value that rounds to 1.0 in float32 is judged as stored: refused.
    bad = np.zeros((1, 4))
    bad[0, 2] = 1 - 1e-9
    with pytest.raises(ValueError, match="outside"):
        index.add(bad)
    assert index.ntotal == 4


def test_shapes_and_types(index):
    with pytest.raises(ValueError, match="2-dimensional"):
        index.add(np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="reshape"):
        index.search(np.zeros(4), 1)
    with pytest.raises(ValueError, match="dimension 3, the index has dimension 4"):
        index.add(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="2-dimensional"):
        index.add(np.zeros((2, 2, 4)))
    with pytest.raises(TypeError, match="numeric"):
        index.add([["a", "b", "c", "d"]])
    with pytest.raises(TypeError, match="numeric"):
        index.add("abcd")
    with pytest.raises(TypeError, match="numeric"):
        index.add(np.zeros((1, 4), dtype=bool))
    with pytest.raises(TypeError, match="numeric"):
        index.add(np.zeros((1, 4), dtype=complex))
    with pytest.raises(ValueError, match="rectangular"):
        index.add([[0.1, 0.1, 0.1, 0.1], [0.1]])
    # integer input is fine (here: the origin)
    index.add(np.zeros((1, 4), dtype=np.int32))
    assert index.ntotal == 3


def test_k_and_ef(index):
    q = np.zeros((1, 4))
    for k in (0, -1):
        with pytest.raises(ValueError, match="k must be >= 1"):
            index.search(q, k)
    with pytest.raises(TypeError, match="k must be an integer"):
        index.search(q, 1.5)
    with pytest.raises(TypeError, match="k must be an integer"):
        index.search(q, True)
    with pytest.raises(ValueError, match="ef must be >= 1"):
        index.search(q, 1, ef=0)


def test_ids(index):
    x = np.full((2, 4), 0.2, dtype=np.float32)
    with pytest.raises(ValueError, match="ids row 1: id 7 appears more than once"):
        index.add_with_ids(x, [7, 7])
    with pytest.raises(ValueError, match="ids row 0: id 1 is already in the index"):
        index.add_with_ids(x, [1, 9])
    with pytest.raises(ValueError, match="reserved"):
        index.add_with_ids(x, [-1, 9])
    with pytest.raises(ValueError, match="2 rows but ids has 3"):
        index.add_with_ids(x, [3, 4, 5])
    with pytest.raises(TypeError, match="integers"):
        index.add_with_ids(x, [0.5, 1.5])
    with pytest.raises(TypeError, match="integers"):
        index.add_with_ids(x, ["a", "b"])
    with pytest.raises(ValueError, match="int64 range"):
        index.add_with_ids(x, np.array([2**63, 5], dtype=np.uint64))
    unchanged(index)
    index.add_with_ids(x, np.array([2**62, -7]))
    assert -7 in index and 2**62 in index


def test_reconstruct_and_remove_errors(index):
    with pytest.raises(KeyError, match="id 99 is not in the index"):
        index.reconstruct(99)
    with pytest.raises(TypeError):
        index.reconstruct("0")
    with pytest.raises(KeyError, match="id 99 is not in the index"):
        index.reconstruct_batch([0, 99, 1])
    with pytest.raises(TypeError, match="integers"):
        index.reconstruct_batch([0.5])
    with pytest.raises(ValueError, match="1-dimensional"):
        index.reconstruct_batch([[0]])
    assert index.reconstruct_batch([]).shape == (0, index.dim)
    got = index.reconstruct_batch(np.array([1, 0, 1]))
    assert got.dtype == np.float32 and got.shape == (3, index.dim)
    for row, i in zip(got, [1, 0, 1]):
        np.testing.assert_array_equal(row, index.reconstruct(i))
    with pytest.raises(TypeError):
        index.remove_ids([0.5])
    assert index.remove_ids([]) == 0
    assert index.remove_ids(12345) == 0
    assert "x" not in index


def test_constructor_errors():
    with pytest.raises(ValueError, match="dim"):
        pi.PoincareIndex(0)
    with pytest.raises(TypeError, match="dim"):
        pi.PoincareFlatIndex(2.5)
    with pytest.raises(ValueError, match="M must be in"):
        pi.PoincareIndex(4, M=1)
    with pytest.raises(ValueError, match="ef_construction"):
        pi.PoincareIndex(4, ef_construction=0)
    with pytest.raises(ValueError, match="curvature"):
        pi.PoincareIndex(4, curvature=0.0)
    with pytest.raises(ValueError, match="curvature"):
        pi.PoincareFlatIndex(4, curvature=float("nan"))
    with pytest.raises(ValueError, match="num_threads"):
        pi.PoincareFlatIndex(4, num_threads=0)
    with pytest.raises(ValueError, match=r"num_threads must be in \[1, 1024\], got 100000"):
        pi.PoincareIndex(4, num_threads=100_000)  # before: RuntimeError from the core's thread pool
    with pytest.raises(ValueError, match="seed"):
        pi.PoincareIndex(4, seed=-1)


def test_curvature_other_than_one():
    c = 4.0
    x = np.array([[0.1, 0.0], [0.0, 0.45], [0.3, 0.3]], dtype=np.float32)
    index = pi.PoincareFlatIndex(2, curvature=c)
    index.add(x)
    D, I = index.search(np.array([[0.05, 0.05]]), 3)
    want = pi.distance(np.array([0.05, 0.05], dtype=np.float32), x[I[0]], curvature=c)
    np.testing.assert_allclose(D[0], want, rtol=1e-6)
    with pytest.raises(ValueError, match="outside"):
        index.add(np.array([[0.5, 0.0]]))  # c|x|^2 = 1


def test_times_outside_the_supported_range_are_refused():
    """A valid datetime64 far from now overflowed at_us - t and weighed inf, ranking first."""
    from poincare_memory import HalfLife, Memory

    index = pi.PoincareIndex(4)
    x = np.full((2, 4), 0.1, dtype=np.float32)
    far = np.datetime64(-(2**63) + 10, "us")
    with pytest.raises(ValueError, match="t row 1 .*outside the supported times"):
        index.add(x, t=np.array([np.datetime64("2026-01-01", "us"), far]))
    with pytest.raises(ValueError, match="valid_until.*outside"):
        index.add(x, t=np.datetime64("2026-01-01", "us"), valid_until=np.datetime64("2300-01-01", "us"))
    index.add(x, t=np.datetime64("1700-01-01", "us"))
    with pytest.raises(ValueError, match="at_time.*outside"):
        index.search_scored(x, 1, decay=pi.HalfLife(hours=1), at_time=far)
    r = index.search_scored(x, 2, decay=pi.HalfLife(hours=1), at_time=np.datetime64("2261-12-31", "us"))
    assert np.all(r.time_weights <= 1.0)
    mem = Memory(decay=HalfLife(hours=24))
    with pytest.raises(ValueError, match="outside"):
        mem.add("a fact", t=far)


def test_k_beyond_what_a_call_can_hold_is_refused_and_memory_clamps_it():
    from poincare_memory import Memory

    index = pi.PoincareIndex(4)
    index.add(np.full((3, 4), 0.1, dtype=np.float32))
    q = np.zeros((2, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="lower k or search in batches"):
        index.search(q, 10**9)
    with pytest.raises(ValueError, match="lower k"):
        index.search_scored(q, 10**9)
    D, I = index.search(q, 5)  # padding below the limit stays as in FAISS
    assert (I[:, 3:] == -1).all()
    mem = Memory()
    mem.add("one", id="a")
    mem.add("two", id="b")
    assert [r.id for r in mem.search("one", k=10**9, touch=False)] == ["a", "b"]


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_empty_text_is_refused(text):
    from poincare_memory import Memory

    mem = Memory()
    with pytest.raises(ValueError, match="empty or only whitespace"):
        mem.add(text)
    assert len(mem) == 0


def test_automatic_ids_past_the_largest_int64_say_the_id_space_is_exhausted():
    x = np.zeros((1, 4), np.float32)
    for start in (2**63 - 1, 2**63 - 3):
        index = pi.PoincareIndex(4)
        index.add_with_ids(x, [start])
        index.add(np.zeros((2**63 - 1 - start, 4), np.float32))  # the ids left, if any
        with pytest.raises(
            ValueError, match="automatic ids are exhausted.*largest id ever stored is 9223372036854775807"
        ):
            index.add(x)
        index.add_with_ids(x, [5])  # ids given by the caller still go in


@pytest.mark.parametrize("M", [0, 1, 257, -3])
def test_every_m_outside_its_range_gets_the_same_message(M):
    with pytest.raises(ValueError, match=r"M must be in \[2, 256\], got"):
        pi.PoincareIndex(4, M=M)


@pytest.mark.parametrize("cls", [pi.PoincareIndex, pi.PoincareFlatIndex])
def test_the_direct_call_for_float32_queries_agrees_with_the_checked_path(cls):
    """A C-contiguous float32 (n, dim) query goes to the core without Python's copies and
    checks; every other input takes the checked path; both answer alike, and bad input still
    gets the checked path's errors."""
    rng = np.random.default_rng(3)
    x = pi.expmap0(rng.normal(size=(300, 8)) * 0.3).astype(np.float32)
    index = cls(8, num_threads=1)
    index.add(x)
    q = x[:4].copy()
    D, I = index.search(q, 5)
    D2, I2 = index.search(q.astype(np.float64).tolist(), 5)
    np.testing.assert_array_equal(I, I2)
    np.testing.assert_array_equal(D, D2)
    with pytest.raises(ValueError, match="dimension 4, the index has dimension 8"):
        index.search(np.zeros((1, 4), np.float32), 5)
    for k in (0, -1):
        with pytest.raises(ValueError, match="k must be >= 1"):
            index.search(q, k)
    with pytest.raises(TypeError):
        index.search(q, True)
    with pytest.raises(ValueError, match="NaN|finite"):
        index.search(np.full((1, 8), np.nan, np.float32), 5)
    with pytest.raises(ValueError, match="results"):
        index.search(q, 2**27)
