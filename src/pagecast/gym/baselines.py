"""Reference placement policies for the environment, and the episode runner that scores them.

A policy is a callable ``(env, obs) -> target`` returning the boolean set of chunks it wants
in the fast tier; ``to_action`` turns that into the env's action format. All baselines fill
the capacity greedily by their score, so none is handicapped by the env's capacity rule.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pagecast.gym._kernels import first_fit
from pagecast.gym.env import TieredPlacementEnv

Policy = Callable[[TieredPlacementEnv, np.ndarray], np.ndarray]


def fill(env: TieredPlacementEnv, scores: np.ndarray, positive_only: bool = True) -> np.ndarray:
    """Chunks by decreasing score (ties: resident first), first fit, until the capacity is full.

    Scores should be per page (accesses / chunk pages): the capacity is in pages, so that is
    the greedy order that serves the most accesses."""
    order = np.lexsort((~env.resident, -np.asarray(scores, dtype=np.float64)))
    if positive_only:
        order = order[np.asarray(scores)[order] > 0]
    return first_fit(order.astype(np.int64), env.ep.chunk_pages, env.ep.capacity_pages)


def all_slow(env: TieredPlacementEnv, obs: np.ndarray) -> np.ndarray:
    return np.zeros(env.cfg.n_chunks, dtype=bool)


def all_fast(env: TieredPlacementEnv, obs: np.ndarray) -> np.ndarray:
    return np.ones(env.cfg.n_chunks, dtype=bool)


def make_random(seed: int = 0) -> Policy:
    rng = np.random.default_rng(seed)

    def random_fill(env: TieredPlacementEnv, obs: np.ndarray) -> np.ndarray:
        return fill(env, rng.random(env.cfg.n_chunks) + 1e-9)

    return random_fill


def hottest_last(env: TieredPlacementEnv, obs: np.ndarray) -> np.ndarray:
    """The chunks most accessed per page in the last window (causal)."""
    return fill(env, env.last_counts() / np.maximum(env.ep.chunk_pages, 1))


def oracle_next(env: TieredPlacementEnv, obs: np.ndarray) -> np.ndarray:
    """The chunks most accessed in the window about to play (knows the future; ignores
    migration cost, so it bounds placement quality, not necessarily total time)."""
    return fill(env, env.next_counts() / np.maximum(env.ep.chunk_pages, 1))


def to_action(env: TieredPlacementEnv, target: np.ndarray) -> np.ndarray:
    target = np.asarray(target, dtype=bool)
    if env.cfg.action_mode == "target":
        return target.astype(np.int8)
    return np.where(target & ~env.resident, 1, np.where(env.resident & ~target, 2, 0)).astype(np.int64)


def run_episode(
    env: TieredPlacementEnv,
    policy: Policy | None = None,
    *,
    trace: int = 0,
    predict: Callable[[np.ndarray], Any] | None = None,
) -> dict[str, Any]:
    """Play one whole trace; ``policy`` gives targets, or ``predict`` gives raw env actions."""
    obs, _ = env.reset(options={"trace": trace})
    total_reward = 0.0
    done = False
    while not done:
        action = predict(obs) if predict is not None else to_action(env, policy(env, obs))
        obs, reward, done, _, _ = env.step(action)
        total_reward += reward
    tot = dict(env.totals)
    tot["total_ns"] = tot["estimated_ns"] + tot["migration_ns"]
    tot["reward"] = total_reward
    tot["trace"] = env.ep.name
    return tot


BASELINES: dict[str, Callable[[], Policy]] = {
    "all-slow": lambda: all_slow,
    "all-fast": lambda: all_fast,
    "random": lambda: make_random(0),
    "hottest-last": lambda: hottest_last,
    "oracle-next": lambda: oracle_next,
}
