"""Reference placement policies for the environment, and the episode runner that scores them.

A policy is a callable ``(env, obs) -> target`` returning the boolean set of chunks it wants
in the fast tier; ``to_action`` turns that into the env's action format. All baselines fill
the capacity greedily by their score, so none is handicapped by the env's capacity rule.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from numba import njit

from pagecast.errors import PagecastError
from pagecast.gym._kernels import first_fit
from pagecast.gym.env import Episode, TieredPlacementEnv
from pagecast.gym.estimator import _boundaries, _touched_pages, load_demand

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


@njit(cache=True)
def _chunk_keys_at_windows(nb_key, eparams, chunk, given, bounds, n_chunks):
    """Per window start: each chunk's key after the rows before it (the key of its latest
    access, from the eviction's kernel), and whether it was touched yet."""
    keys = np.zeros(n_chunks, np.int64)
    seen = np.zeros(n_chunks, np.bool_)
    out = np.zeros((len(bounds) - 1, n_chunks), np.int64)
    touched = np.zeros((len(bounds) - 1, n_chunks), np.bool_)
    for w in range(len(bounds) - 1):
        out[w] = keys
        touched[w] = seen
        for i in range(bounds[w], bounds[w + 1]):
            c = chunk[i]
            keys[c] = nb_key(eparams, i, given[i], keys[c], True)
            seen[c] = True
    return out, touched


@njit(cache=True)
def _recency_key(eparams, gi, given, prev, demand):
    # LRU as a key: the chunk touched longest ago has the largest key
    return -gi


def eviction_window_keys(spec: str, ep: Episode, n_chunks: int, window) -> tuple[np.ndarray, np.ndarray]:
    """An eviction of the registry (a keyed one: ``min``, ``lfu``, ``reuse:trace=…``,
    ``learned:model=…``; or ``lru``, whose recency order is a key too) run over the
    episode's trace at the fast tier's capacity: each chunk's key at every window start,
    and which chunks were touched by then."""
    from pagecast.sim.engine import INF, next_use_backward
    from pagecast.sim.simulate import ahead_values, resolve_eviction
    from pagecast.trace.demand import as_trace

    ev = resolve_eviction(spec)
    lru = ev.structure == "lru"
    if not lru and (ev.structure != "keyed" or ev.nb_key is None):
        raise PagecastError(
            f"gym baseline evict:{spec}: only keyed evictions and lru rank chunks (lru, min, lfu, reuse, learned)"
        )
    if not ep.source:
        raise PagecastError(f"gym baseline evict:{spec}: episode {ep.name!r} has no trace file to read")
    d = load_demand(ep.source)
    units, inverse = _touched_pages(d.region, d.page)
    # the chunks of ``Windows.chunked``: touched pages in key order, cut into equal runs
    chunk = (inverse * n_chunks) // max(len(units), 1)
    if lru:
        given = np.zeros(len(chunk), np.int64)
    elif ev.uses_next_use:
        given = np.empty(len(chunk), np.int64)
        next_use_backward(np.full(n_chunks, INF, np.int64), chunk, 0, given)
    else:
        given = ahead_values(ev, as_trace(ep.source), ep.capacity_pages)
    if len(given) != len(chunk):
        raise PagecastError(f"{ep.source}: {len(given)} demand rows for the eviction, {len(chunk)} for the windows")
    kernel = _recency_key if lru else type(ev).nb_key
    return _chunk_keys_at_windows(kernel, ev.params(), chunk, given, _boundaries(d, window), n_chunks)


STICKY = 0.25  # share of the chunks a resident chunk may rank behind and still stay


def make_eviction(spec: str, sticky: float = STICKY) -> Policy:
    """A keyed eviction as a placement: in each window the fast tier holds the touched
    chunks it would keep (smallest keys first), filled to the capacity; causal as the
    eviction is (``min`` knows the future, the others do not). A resident chunk ranks
    ``sticky`` × chunks places higher than its key says: an eviction reorders chunks at
    every access, and moving a chunk in for one window and out the next costs two
    migrations for one window's gain (0: the keys' order alone)."""
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def evict_policy(env: TieredPlacementEnv, obs: np.ndarray) -> np.ndarray:
        key = id(env.ep)
        if key not in cache:
            cache[key] = eviction_window_keys(spec, env.ep, env.cfg.n_chunks, env.cfg.window)
        keys, touched = cache[key]
        k, seen = keys[env.t], touched[env.t]
        rank = np.empty(len(k), np.float64)
        rank[np.lexsort((np.arange(len(k)), k))] = np.arange(len(k), 0, -1)
        rank += sticky * len(k) * env.resident
        return fill(env, np.where(seen, rank, 0.0))

    return evict_policy


def make_baseline(name: str) -> Policy:
    """A baseline by name: one of ``BASELINES`` or ``evict:SPEC`` (an eviction spec)."""
    if name in BASELINES:
        return BASELINES[name]()
    if name.startswith("evict:"):
        return make_eviction(name[len("evict:") :])
    raise PagecastError(f"unknown baseline {name!r} ({', '.join(BASELINES)} or evict:SPEC)")


def split_baselines(text: str) -> list[str]:
    """A comma-separated baseline list; a piece ``k=v`` without a ``:`` continues the
    eviction spec before it, so ``evict:learned:model=ev.pt,levels=1,hottest-last`` is two."""
    out: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        if out and out[-1].startswith("evict:") and "=" in piece and ":" not in piece.split("=", 1)[0]:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


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
