"""Threads, signals and fork: searches while adding, Ctrl-C during add, use after fork."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from reference import brute_force, recall

import poincare_index as pi


@pytest.mark.parametrize("cls", [pi.PoincareIndex, pi.PoincareFlatIndex])
def test_searches_while_adding(cls, tree_data):
    base, queries = tree_data
    index = cls(16, num_threads=2)
    index.add(base[:500])
    errors: list[BaseException] = []
    stop = threading.Event()
    seen_sizes = []

    def searcher(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                q = queries[rng.integers(0, len(queries), size=rng.integers(1, 8))]
                D, I = index.search(q, 5)
                n = index.ntotal
                assert I.shape == (len(q), 5)
                assert np.all((I >= -1) & (I < len(base)))
                assert np.all(np.diff(D, axis=1) >= 0)
                seen_sizes.append(n)
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=searcher, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for start in range(500, len(base), 250):
        index.add(base[start : start + 250])
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert index.ntotal == len(base)
    _, found = index.search(queries, 10)
    _, ref = brute_force(base, queries, 10)
    assert recall(found, ref) >= 0.95


def test_concurrent_adds_from_threads(tree_data):
    base, _ = tree_data
    index = pi.PoincareIndex(16, num_threads=2)
    parts = np.array_split(np.arange(len(base)), 4)
    threads = [threading.Thread(target=index.add, args=(base[p],)) for p in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert index.ntotal == len(base)
    # every id 0..n-1 assigned exactly once
    assert all(i in index for i in range(len(base)))
    assert index.check_integrity()["unreachable"] == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_index_usable_after_fork(tree_data):
    base, queries = tree_data
    index = pi.PoincareIndex(16, num_threads=2)
    index.add(base)
    _, parent = index.search(queries, 5)  # starts the pool's worker threads
    pid = os.fork()
    if pid == 0:  # child: the parent's workers don't exist here; the pool must rebuild itself
        try:
            _, child = index.search(queries, 5)
            index.add(queries[:10] * np.float32(0.5))
            os._exit(0 if np.array_equal(child, parent) else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_hybrid_search_works_in_a_forked_child():
    """Hybrid search runs its vector side on a pool thread; a child forked after the parent used
    the pool has no such thread and must not wait for it forever."""
    mem = pi.Memory(decay=None)
    words = ["refund", "parcel", "late", "courier", "invoice", "label"]
    for i in range(40):
        mem.add(f"{words[i % 6]} {words[(i * 5) % 6]} note {i}", id=f"m{i}")
    parent = [r.id for r in mem.search("late parcel", k=5, mode="hybrid", touch=False)]
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # a hang ends the child by SIGALRM, not the test run
        try:
            child = [r.id for r in mem.search("late parcel", k=5, mode="hybrid", touch=False)]
            os._exit(0 if child == parent else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.slow
def test_ctrl_c_during_long_add_is_honoured(tmp_path):
    script = textwrap.dedent(
        """
        import signal, sys, time
        import numpy as np
        import poincare_index as pi
        # A shell that starts jobs in the background (nohup ... &) makes them ignore SIGINT,
        # and Python then installs no handler: the test restores Ctrl-C's usual meaning.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from poincare_index.datasets import hierarchy
        x = hierarchy(200_000, 32, seed=0).points
        index = pi.PoincareIndex(32, ef_construction=200, num_threads=1)
        print("ready", flush=True)
        try:
            index.add(x)
            print("finished", index.ntotal, flush=True)
        except KeyboardInterrupt:
            n = index.ntotal
            assert 0 <= n < len(x) and n % 8192 == 0, n
            # Every completed chunk was repaired: all of its points are reachable.
            assert index.check_integrity()["unreachable"] == 0
            D, I = index.search(x[:5], 1)
            assert list(I[:, 0]) == [0, 1, 2, 3, 4] or n < 5
            print("interrupted", n, flush=True)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    import time

    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.startswith("interrupted"), (out, err)


@pytest.mark.parametrize("cls", [pi.PoincareIndex, pi.PoincareFlatIndex])
@pytest.mark.parametrize("share", ["walk", "scan"])
def test_filtered_searches_while_adding_with_metadata(cls, share, tree_data):
    """A filter is evaluated on the columns while an add appends rows (their metadata first,
    then the core's points): every search succeeds and returns only rows the filter allows."""
    base, queries = tree_data
    index = cls(16, num_threads=1)
    if share == "scan":
        index.filter_scan_fraction = 0.9  # the allowed slots are scanned, not walked
    else:
        index.filter_scan_fraction = 0.0
    tags = np.where(np.arange(len(base)) % 3 == 0, "a", "b")
    index.add(base[:200], metadata={"tag": tags[:200], "n": np.arange(200)})
    errors: list[BaseException] = []
    stop = threading.Event()
    searches = [0]

    def searcher(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                q = queries[rng.integers(0, len(queries), size=2)]
                r = index.search_scored(q, 5, filters={"tag": "a"}, ef=32)
                got = r.ids[r.ids >= 0]
                assert np.all(got % 3 == 0), got  # ids are rows here: tag "a" rows only
                D, I = index.search(q, 5, filters={"n": {"$gte": 0}})
                assert I.shape == (2, 5)
                searches[0] += 1
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=searcher, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    for start in range(200, len(base), 20):
        end = min(len(base), start + 20)
        index.add(base[start:end], metadata={"tag": tags[start:end], "n": np.arange(start, end)})
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert searches[0] > 0
    assert index.columns.num_rows == len(base)


def test_access_counts_are_not_lost_between_touching_searches_and_writes(tree_data):
    """Searches with touch=True increment counts in the core while Python adds to them (as
    Memory's search does) and copies them (columns): every increment lands."""
    base, queries = tree_data
    index = pi.PoincareIndex(16, num_threads=1)
    index.add(base[:300])
    rows = np.arange(300, dtype=np.int64)
    errors: list[BaseException] = []
    touched = []

    def searcher() -> None:
        try:
            total = 0
            for i in range(150):
                r = index.search_scored(queries[i % len(queries)][None], 5, touch=True, ef=16)
                total += int((r.ids >= 0).sum())
                index.columns  # noqa: B018 - a copy of the counts, racing the increments
            touched.append(total)
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=searcher) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(200):
        index._columns.add_access(rows)
    for t in threads:
        t.join()
    assert not errors, errors
    counts = index.columns.column("access_count").to_numpy().astype(np.int64)
    assert counts.sum() == 200 * 300 + sum(touched)


def test_access_counts_saturate_instead_of_wrapping():
    index = pi.PoincareFlatIndex(2)
    index.add(np.array([[0.1, 0.0], [0.0, 0.1]], dtype=np.float32))
    cols = index._columns
    cols.set_access(np.array([0, 1]), np.array([2**32 - 2, 5]))
    cols.add_access(np.array([0, 0, 0, 1]))
    assert list(cols.access_counts()) == [2**32 - 1, 6]
    with pytest.raises(ValueError, match="out of range"):
        cols.add_access(np.array([2]))
    with pytest.raises(ValueError, match=r"\[0, 2\*\*32 - 1\]"):
        cols.set_access(np.array([0]), np.array([-1]))


def test_a_long_job_of_writes_lets_waiting_readers_in_between_them():
    import threading
    import time

    from poincare_index._rwlock import ReadWriteLock

    lock = ReadWriteLock()
    order = []
    reader_waiting = threading.Event()

    def reader():
        reader_waiting.set()
        with lock.reading():
            order.append("read")

    with lock.writing():
        order.append("write 1")
        t = threading.Thread(target=reader)
        t.start()
        reader_waiting.wait(5)
        deadline = time.monotonic() + 5
        while lock._readers_waiting == 0 and time.monotonic() < deadline:
            time.sleep(0.001)  # until the reader blocks on the lock
    lock.let_readers_in(timeout=5)  # returns once the waiting reader has entered
    assert order[:2] == ["write 1", "read"]
    with lock.writing():
        order.append("write 2")
    t.join(5)
    assert order == ["write 1", "read", "write 2"]
    lock.let_readers_in(timeout=5)  # nobody waiting: returns at once


def test_hybrid_searches_from_threads_while_a_writer_adds_and_deletes():
    """Hybrid searches (each with its vector side on the shared pool) from three threads while a
    writer adds and deletes: no error, no deadlock, and every result is a memory that existed."""
    mem = pi.Memory(decay=pi.HalfLife(hours=24))
    words = ["refund", "parcel", "late", "courier", "invoice", "label", "damaged", "box"]
    rng = np.random.default_rng(12)

    def text(i: int) -> str:
        return " ".join(rng.choice(words, size=3)) + f" note {i}"

    for i in range(300):
        mem.add(text(i), id=f"m{i}")
    ever = {f"m{i}" for i in range(300)}
    ever_lock = threading.Lock()
    errors: list[BaseException] = []
    stop = threading.Event()

    def searcher(seed: int) -> None:
        q_rng = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                q = " ".join(q_rng.choice(words, size=2))
                found = mem.search(q, k=8, mode="hybrid", candidates=int(q_rng.integers(4, 40)))
                with ever_lock:
                    unknown = [r.id for r in found if r.id not in ever]
                assert not unknown, unknown
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=searcher, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(300, 500):
            with ever_lock:
                ever.add(f"m{i}")
            mem.add(text(i), id=f"m{i}")
            if i % 3 == 0:
                mem.delete(f"m{i - 250}")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not any(t.is_alive() for t in threads), "a hybrid search did not finish"
    assert not errors, errors


@pytest.mark.parametrize("cls", [pi.PoincareIndex, pi.PoincareFlatIndex])
def test_overlapping_searches_do_not_starve_an_add(cls):
    """Two threads search back to back, so at almost every moment one of them holds the core's
    read lock. An add must still get its turn: a waiting writer goes before readers that arrive
    after it. (With a lock that lets new readers in while a writer waits, the adds below waited
    for minutes under the sanitizer build.) The time limit only turns a stall into a failure;
    the adds take well under a second."""
    rng = np.random.default_rng(13)
    index = cls(4, num_threads=1)
    now = np.datetime64("2026-06-01T00:00", "us")
    index.add((rng.normal(size=(50, 4)) * 0.2).astype(np.float32), t=now)
    q = (rng.normal(size=(64, 4)) * 0.2).astype(np.float32)
    stop = threading.Event()
    errors: list[BaseException] = []

    def searcher() -> None:
        try:
            while not stop.is_set():
                index.search_scored(q, 5, at_time=now, touch=True)
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    def adder() -> None:
        for _ in range(20):
            index.add((rng.normal(size=(60, 4)) * 0.2).astype(np.float32), t=now)

    searchers = [threading.Thread(target=searcher) for _ in range(2)]
    for th in searchers:
        th.start()
    writing = threading.Thread(target=adder)
    writing.start()
    writing.join(timeout=120)
    stalled = writing.is_alive()
    stop.set()
    for th in searchers:
        th.join()
    writing.join()
    assert not errors, errors
    assert not stalled, "20 adds did not finish in 120 s while two threads searched"
    assert index.ntotal == 50 + 20 * 60
