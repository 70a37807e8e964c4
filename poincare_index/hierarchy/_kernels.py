"""The trainer's inner loop, compiled with numba (``nopython``): one epoch of Riemannian SGD on
the loss of Nickel & Kiela (2017). Imported only by :mod:`.train`, after numba was found.

Everything is float64 inside; the caller keeps the points in float64 between epochs and hands
out float32 at the end.
"""

from __future__ import annotations

import numba
import numpy as np

# Points are kept this far inside the unit sphere after each step (the paper's projection).
BOUNDARY_EPS = 1e-5
# sqrt(gamma^2 - 1) is clamped here: at gamma = 1 (two equal points) the gradient of arcosh is
# unbounded while the distance itself is 0.
_MIN_SQRT = 1e-10


@numba.njit(cache=True, nogil=True)
def _splitmix(state: np.uint64) -> tuple[np.uint64, np.uint64]:
    """One step of splitmix64: (next state, output). A counter-based generator keeps each
    thread's stream a pure function of the seed, its chunk and the epoch."""
    state = state + np.uint64(0x9E3779B97F4A7C15)
    z = state
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return state, z ^ (z >> np.uint64(31))


@numba.njit(cache=True, nogil=True)
def _related(indptr, indices, u, v) -> bool:
    """Whether v is among u's sorted parents (binary search)."""
    lo, hi = indptr[u], indptr[u + 1]
    while lo < hi:
        mid = (lo + hi) // 2
        if indices[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo < indptr[u + 1] and indices[lo] == v


@numba.njit(cache=True, nogil=True)
def _draw(state, cumulative, n_nodes):
    """A node drawn from ``cumulative`` (a CDF over nodes; empty: uniform)."""
    state, r = _splitmix(state)
    if cumulative.shape[0] == 0:
        return state, np.int64(r % np.uint64(n_nodes))
    x = (r >> np.uint64(11)) * (1.0 / 9007199254740992.0) * cumulative[-1]
    return state, np.int64(np.searchsorted(cumulative, x, side="right"))


@numba.njit(cache=True, nogil=True)
def _step_point(theta, row, grad, lr):
    """theta[row] -= lr * (1 - |theta|^2)^2 / 4 * grad, then back inside the ball."""
    dim = theta.shape[1]
    sq = 0.0
    for k in range(dim):
        sq += theta[row, k] * theta[row, k]
    scale = lr * (1.0 - sq) * (1.0 - sq) / 4.0
    sq = 0.0
    for k in range(dim):
        theta[row, k] -= scale * grad[k]
        sq += theta[row, k] * theta[row, k]
    limit = 1.0 - BOUNDARY_EPS
    if sq >= limit * limit:
        f = limit / np.sqrt(sq)
        for k in range(dim):
            theta[row, k] *= f


@numba.njit(cache=True, nogil=True)
def _sample_negatives(cand, u, state, cumulative, n_nodes, indptr, indices):
    """Fills ``cand[1:]`` with negatives for u (-1 where none was found); returns the new state.
    Rejection sampling: a node related to nearly everything gives up after 64 tries and keeps
    the last draw unless it is u itself or related to it (then the slot is -1: the positive
    repeated with zero weight)."""
    for j in range(1, cand.shape[0]):
        s = u
        for _try in range(64):
            state, s = _draw(state, cumulative, n_nodes)
            if s != u and not _related(indptr, indices, u, s):
                break
        if s == u or _related(indptr, indices, u, s):
            s = -1
        cand[j] = s
    return state


@numba.njit(cache=True, nogil=True)
def _train_chunk(theta, edges, order, start, stop, indptr, indices, cumulative, negatives, lr, seed):
    """SGD over edges ``order[start:stop]``: for child u and parent v, the loss
    d(u, v) + log sum over {v} and ``negatives`` sampled partners s of exp(-d(u, s)); every point
    involved takes its Riemannian step at once (as the reference code does). Returns the summed
    loss. Negatives are nodes other than u that are not u's parents in the pairs (the paper's
    N(u)); u's descendants may be drawn."""
    n_nodes, dim = theta.shape
    cand = np.empty(negatives + 1, dtype=np.int64)
    dist = np.empty(negatives + 1)
    gamma = np.empty(negatives + 1)
    gu = np.zeros(dim)
    gs = np.empty(dim)
    state = np.uint64(seed)
    total = 0.0
    for e in range(start, stop):
        u = np.int64(edges[order[e], 0])
        cand[0] = edges[order[e], 1]
        state = _sample_negatives(cand, u, state, cumulative, n_nodes, indptr, indices)
        uu = 0.0
        for k in range(dim):
            uu += theta[u, k] * theta[u, k]
        alpha = 1.0 - uu
        # Distances and the softmax over -d (max-shifted).
        best = np.inf
        for j in range(negatives + 1):
            s = cand[j]
            if s < 0:
                dist[j] = np.inf
                continue
            ss = 0.0
            diff = 0.0
            for k in range(dim):
                ss += theta[s, k] * theta[s, k]
                t = theta[u, k] - theta[s, k]
                diff += t * t
            g = 1.0 + 2.0 * diff / (alpha * (1.0 - ss))
            gamma[j] = g
            dist[j] = np.log(g + np.sqrt(max(g * g - 1.0, 0.0)))
            best = min(best, dist[j])
        z = 0.0
        for j in range(negatives + 1):
            if dist[j] < np.inf:
                z += np.exp(best - dist[j])
        total += dist[0] - best + np.log(z)
        for k in range(dim):
            gu[k] = 0.0
        for j in range(negatives + 1):
            s = cand[j]
            if s < 0:
                continue
            # dL/dd_j = [j == 0] - softmax(-d)_j
            w = (1.0 if j == 0 else 0.0) - np.exp(best - dist[j]) / z
            if w == 0.0:
                continue
            ss = 0.0
            us = 0.0
            for k in range(dim):
                ss += theta[s, k] * theta[s, k]
                us += theta[u, k] * theta[s, k]
            beta = 1.0 - ss
            root = max(np.sqrt(max(gamma[j] * gamma[j] - 1.0, 0.0)), _MIN_SQRT)
            # d d(u, s) / du = 4 / (beta * root) * ((|s|^2 - 2<u,s> + 1) / alpha^2 * u - s / alpha)
            cu = 4.0 / (beta * root)
            a_u = (ss - 2.0 * us + 1.0) / (alpha * alpha)
            a_s = (uu - 2.0 * us + 1.0) / (beta * beta)
            cs = 4.0 / (alpha * root)
            for k in range(dim):
                gu[k] += w * cu * (a_u * theta[u, k] - theta[s, k] / alpha)
                gs[k] = w * cs * (a_s * theta[s, k] - theta[u, k] / beta)
            _step_point(theta, s, gs, lr)
        _step_point(theta, u, gu, lr)
    return total


@numba.njit(cache=True, nogil=True, parallel=True)
def train_epoch(theta, edges, order, indptr, indices, cumulative, negatives, lr, seeds):
    """One pass over ``edges`` in ``order``, split into ``len(seeds)`` contiguous chunks run in
    parallel (one chunk: serial, reproducible). Chunks update the shared points without locks
    (Hogwild!), so with more than one chunk the result depends on the threads' timing."""
    chunks = seeds.shape[0]
    m = order.shape[0]
    losses = np.zeros(chunks)
    for c in numba.prange(chunks):
        start = (m * c) // chunks
        stop = (m * (c + 1)) // chunks
        losses[c] = _train_chunk(
            theta, edges, order, start, stop, indptr, indices, cumulative, negatives, lr, seeds[c]
        )
    return losses.sum()
