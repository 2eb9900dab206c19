"""Gymnasium environment: place chunks of a program's data in a small fast tier.

One episode plays one trace (or slow/fast trace pair) window by window. At step t the
agent chooses which chunks sit in the fast tier during window t, having seen the access
counts of windows < t. The chosen placement is scored with the differential-tracing
estimator (``estimator.py``) and every page that changes tier is charged.

Units: every time is in nanoseconds. Migration cost = bytes moved × ``migrate_ns_per_byte``
(default 0.1 ns/B, i.e. 10 GB/s), bytes = pages that actually change tier × page size.
Reward = −(estimated window time + migration cost) / ``reward_scale_ns`` where the scale
(default: the trace's mean all-slow window time) only keeps PPO's value targets near 1;
sum(reward) × scale is minus the estimated run time including migrations, so a better
placement always earns more reward.

Observation (float32 in [0, 1], fixed length whatever the trace):
  * access counts of each chunk in each of the last ``history`` windows, most recent
    first, as log1p(count) / log1p(count_scale), count_scale = accesses per window;
  * the current placement (1 = chunk in the fast tier);
  * fraction of the capacity still free, fraction of chunks placed, episode progress.

Action: ``MultiBinary(n_chunks)``, the chunks wanted in the fast tier (``action_mode=
"target"``), or ``MultiDiscrete([3] * n_chunks)`` with 0 keep, 1 promote, 2 demote
(``"delta"``). If the wanted chunks exceed the capacity, chunks already in the fast tier
keep their place first, then the others in chunk order until the capacity is full; the
rest stay slow (``info["rejected"]`` counts them). The rule ignores access counts on
purpose, so the environment does not do the agent's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from pagecast.errors import PagecastError
from pagecast.gym._kernels import fill_obs, place_and_score
from pagecast.gym.estimator import CostModel, WindowConfig, Windows


@dataclass
class EnvConfig:
    n_chunks: int = 32
    history: int = 2
    capacity: float = 0.125  # fraction of the touched pages that fit in the fast tier
    capacity_pages: int | None = None  # absolute capacity; overrides ``capacity``
    migrate_ns_per_byte: float = 0.1
    action_mode: str = "target"  # "target" (MultiBinary) | "delta" (MultiDiscrete keep/promote/demote)
    reward_scale_ns: float | None = None
    window: WindowConfig = field(default_factory=WindowConfig)
    cost: CostModel = field(default_factory=CostModel)

    def __post_init__(self) -> None:
        if self.action_mode not in ("target", "delta"):
            raise PagecastError(f"unknown action mode {self.action_mode!r} (target, delta)")
        if self.history < 1 or self.n_chunks < 1:
            raise PagecastError("history and n_chunks must be >= 1")
        if self.migrate_ns_per_byte < 0:
            raise PagecastError("migration cost per byte must be >= 0")
        if self.capacity < 0 or (self.capacity_pages is not None and self.capacity_pages < 0):
            raise PagecastError("fast tier capacity must be >= 0")


def load_windows(spec: Any, window: WindowConfig, cost: CostModel) -> Windows:
    """A trace spec is a Windows object, a (slow, fast) pair of paths, or one path (cost model)."""
    if isinstance(spec, Windows):
        return spec
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        return Windows.from_pair(spec[0], spec[1], window)
    if isinstance(spec, (str, Path)):
        return Windows.from_single(spec, window, cost)
    raise PagecastError(f"cannot use {spec!r} as a trace (path, (slow, fast) pair, or Windows)")


@dataclass
class Episode:
    """Everything a step needs, precomputed per trace as dense arrays."""

    name: str
    t_slow: np.ndarray  # [W]
    t_fast: np.ndarray  # [W]
    num: np.ndarray  # [W, C] accesses per chunk (or pages, for windows without accesses)
    den: np.ndarray  # [W] accesses in the window (or touched pages)
    counts: np.ndarray  # [W, C] raw accesses per chunk
    hist: np.ndarray  # [W + H, C] normalised counts with H zero rows in front
    chunk_pages: np.ndarray  # [C]
    capacity_pages: int
    page_size: int
    scale: float
    source: str = ""  # the (slow) trace the windows were cut from, for baselines that read it

    def __post_init__(self) -> None:
        # plain Python scalars: indexing lists is several times cheaper than numpy scalars per step
        self.n_windows = len(self.t_slow)
        self.ts_list = self.t_slow.tolist()
        self.tf_list = self.t_fast.tolist()
        self.den_list = self.den.tolist()


def prepare_episode(w: Windows, cfg: EnvConfig, name: str = "") -> Episode:
    cw = w.chunked(cfg.n_chunks)
    counts = cw.dense_counts(np.float64)
    pages = cw.unit_pages.astype(np.float64)
    empty = cw.n == 0
    num = counts.copy()
    num[empty] = pages
    den = np.where(empty, pages.sum(), cw.n).astype(np.float64)
    count_scale = cfg.window.size if cfg.window.mode == "accesses" else max(int(cw.n.max()), 1)
    norm = (np.log1p(counts) / np.log1p(count_scale)).clip(0, 1).astype(np.float32)
    hist = np.vstack([np.zeros((cfg.history, cfg.n_chunks), np.float32), norm])
    cap = cfg.capacity_pages if cfg.capacity_pages is not None else int(cfg.capacity * pages.sum())
    scale = cfg.reward_scale_ns or float(w.t_slow.mean()) or 1.0
    return Episode(
        name,
        w.t_slow.astype(np.float64),
        w.t_fast.astype(np.float64),
        num,
        den,
        counts,
        hist,
        cw.unit_pages.astype(np.int64),
        int(cap),
        w.page_size,
        scale,
        str(w.info.get("slow") or w.info.get("trace") or ""),
    )


class TieredPlacementEnv(gym.Env):
    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self, traces: Sequence[Any], config: EnvConfig | None = None, render_mode: str | None = None, **overrides: Any
    ):
        cfg = config or EnvConfig()
        if overrides:
            cfg = EnvConfig(**{**cfg.__dict__, **overrides})
        if not traces:
            raise PagecastError("the environment needs at least one trace")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise PagecastError(f"unknown render mode {render_mode!r}")
        self.cfg = cfg
        self.render_mode = render_mode
        self.episodes = [prepare_episode(load_windows(s, cfg.window, cfg.cost), cfg, name=_name(s)) for s in traces]
        C, H = cfg.n_chunks, cfg.history
        self._obs_len = H * C + C + 3
        self.observation_space = spaces.Box(0.0, 1.0, shape=(self._obs_len,), dtype=np.float32)
        if cfg.action_mode == "target":
            self.action_space = spaces.MultiBinary(C)
        else:
            self.action_space = spaces.MultiDiscrete(np.full(C, 3))
        self._action_shape = (C,)
        self._target_mode = cfg.action_mode == "target"
        self.ep = self.episodes[0]
        self._reset_state()

    # -- state ---------------------------------------------------------------------
    def _reset_state(self) -> None:
        C = self.cfg.n_chunks
        self.t = 0
        self.resident = np.zeros(C, dtype=bool)
        self.totals = {
            "estimated_ns": 0.0,
            "migration_ns": 0.0,
            "all_slow_ns": 0.0,
            "all_fast_ns": 0.0,
            "bytes_moved": 0,
            "rejected": 0,
        }
        self.last_info: dict[str, Any] = {}

    def _obs(self) -> np.ndarray:
        ep = self.ep
        out = np.empty(self._obs_len, dtype=np.float32)
        fill_obs(out, ep.hist, self.t, self.cfg.history, self.resident, ep.chunk_pages, ep.capacity_pages, ep.n_windows)
        return out

    # -- API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "trace" in options:
            i = int(options["trace"])
        else:
            i = int(self.np_random.integers(len(self.episodes)))
        self.ep = self.episodes[i]
        self._reset_state()
        return self._obs(), {"trace": self.ep.name, "trace_index": i, "windows": self.ep.n_windows}

    def target_from_action(self, action: Any) -> np.ndarray:
        a = np.asarray(action)
        if a.shape != self._action_shape:
            raise ValueError(f"action has shape {a.shape}, expected {self._action_shape}")
        if self._target_mode:
            return a != 0
        return (self.resident | (a == 1)) & ~(a == 2)

    def step(self, action: Any):
        if self.t >= self.ep.n_windows:
            raise RuntimeError("episode is over; call reset()")
        ep = self.ep
        t = self.t
        ts, tf = ep.ts_list[t], ep.tf_list[t]
        est_ns, pages_moved, rejected, fast_pages = place_and_score(
            self.target_from_action(action),
            self.resident,
            ep.chunk_pages,
            ep.capacity_pages,
            ep.num[t],
            ep.den_list[t],
            ts,
            tf,
        )
        bytes_moved = pages_moved * ep.page_size
        mig_ns = bytes_moved * self.cfg.migrate_ns_per_byte
        reward = -(est_ns + mig_ns) / ep.scale
        tot = self.totals
        tot["estimated_ns"] += est_ns
        tot["migration_ns"] += mig_ns
        tot["all_slow_ns"] += ts
        tot["all_fast_ns"] += tf
        tot["bytes_moved"] += bytes_moved
        tot["rejected"] += rejected
        info = {
            "window": t,
            "estimated_ns": est_ns,
            "migration_ns": mig_ns,
            "bytes_moved": bytes_moved,
            "pages_moved": pages_moved,
            "rejected": rejected,
            "all_slow_ns": ts,
            "all_fast_ns": tf,
            "fast_pages": fast_pages,
        }
        self.t += 1
        self.last_info = info
        terminated = self.t >= ep.n_windows
        if self.render_mode == "human":
            print(self._render_text())
        return self._obs(), float(reward), terminated, False, info

    # -- helpers for baselines (causal ones only use ``last_counts``) -----------------
    def last_counts(self) -> np.ndarray:
        """Accesses per chunk in the window before the current one (zeros at the start)."""
        return self.ep.counts[self.t - 1] if self.t > 0 else np.zeros(self.cfg.n_chunks)

    def next_counts(self) -> np.ndarray:
        """Accesses per chunk in the window about to be played: for the oracle only."""
        return self.ep.counts[self.t]

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._render_text()
        if self.render_mode == "human":
            print(self._render_text())
        return None

    def _render_text(self) -> str:
        i, tot, ep = self.last_info, self.totals, self.ep
        ms = 1e-6
        head = f"[{ep.name}] window {self.t}/{ep.n_windows}"
        if not i:
            return f"{head}: nothing placed yet (capacity {ep.capacity_pages} pages)"
        return (
            f"{head}: fast tier {i['fast_pages']}/{ep.capacity_pages} pages, moved {i['pages_moved']} pages "
            f"({i['migration_ns'] * ms:.3f} ms)\n"
            f"  window: simulated {i['estimated_ns'] * ms:.3f} ms | all-slow {i['all_slow_ns'] * ms:.3f} ms | "
            f"all-fast {i['all_fast_ns'] * ms:.3f} ms\n"
            f"  so far: simulated {(tot['estimated_ns'] + tot['migration_ns']) * ms:.3f} ms "
            f"(incl. {tot['migration_ns'] * ms:.3f} ms migration) | all-slow {tot['all_slow_ns'] * ms:.3f} ms | "
            f"all-fast {tot['all_fast_ns'] * ms:.3f} ms"
        )


def _name(spec: Any) -> str:
    if isinstance(spec, Windows):
        path = spec.info.get("slow") or spec.info.get("trace")
    elif isinstance(spec, (tuple, list)):
        path = spec[0]
    else:
        path = spec
    name = Path(str(path)).name if path else "windows"
    return name.removesuffix(".parquet").removesuffix(".slow")
