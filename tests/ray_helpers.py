"""Helpers of the Ray tests (their fixtures are in conftest.py): a kill that waits until it has
landed, and a shard's access counts read inside its actor."""

from __future__ import annotations

import time

import ray


def kill_and_wait(actor) -> None:
    """ray.kill and wait until the actor is gone: the kill is asynchronous, and a call sent
    right after it may still be served (CI saw that once)."""
    ray.kill(actor)
    for _ in range(200):
        try:
            ray.get(actor.ntotal.remote(), timeout=5)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return
        time.sleep(0.05)
    raise AssertionError("the killed actor kept answering for 10 s")


def access_total(actor) -> int:
    """The sum of a shard's access counts (read inside the actor)."""
    return int(
        ray.get(
            actor.__ray_call__.remote(lambda self: int(self.index.columns["access_count"].to_numpy().sum()))
        )
    )
