"""PPO (stable-baselines3) on the placement environment: train on some traces, evaluate
on others against the baselines.

A trained agent is a directory holding ``ppo.zip`` (the SB3 model) and ``config.json``
(the environment settings it was trained with, which fix the observation layout).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pagecast.errors import PagecastError
from pagecast.gym.baselines import BASELINES, make_baseline, run_episode
from pagecast.gym.env import EnvConfig, TieredPlacementEnv, load_windows
from pagecast.gym.estimator import CostModel, WindowConfig, Windows


@dataclass
class PPOConfig:
    timesteps: int = 100_000
    n_envs: int = 4
    n_steps: int = 256
    batch_size: int = 256
    n_epochs: int = 10
    learning_rate: float = 1e-3
    gamma: float = 0.9  # a placement pays off within a few windows; long horizons only add variance
    ent_coef: float = 0.0
    policy: str = "chunkwise"  # "chunkwise" (shared per-chunk net, policy.py) | "mlp" (SB3 MlpPolicy)
    net: tuple[int, ...] = (128, 128)  # hidden layers of the mlp policy
    hidden: int = 32  # chunk embedding size of the chunkwise policy
    seed: int = 0

    def sb3_kwargs(self) -> dict[str, Any]:
        """The stable-baselines3 PPO hyperparameters among these fields."""
        names = ("n_steps", "batch_size", "n_epochs", "learning_rate", "gamma", "ent_coef", "seed")
        return {k: getattr(self, k) for k in names}


def config_to_dict(cfg: EnvConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def config_from_dict(d: dict[str, Any]) -> EnvConfig:
    d = dict(d)
    d["window"] = WindowConfig(**d.get("window", {}))
    d["cost"] = CostModel(**d.get("cost", {}))
    return EnvConfig(**d)


def preload(specs: Sequence[Any], cfg: EnvConfig) -> list[Windows]:
    """Preprocess each trace once; every vectorised env copy then shares the result."""
    return [load_windows(s, cfg.window, cfg.cost) for s in specs]


def train(
    specs: Sequence[Any],
    out_dir: str | Path,
    cfg: EnvConfig,
    ppo: PPOConfig,
    *,
    verbose: int = 0,
    progress: bool = False,
) -> Path:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import HumanOutputFormat, Logger

    from pagecast.util.output import progress as progress_bar

    class _Progress(BaseCallback):
        """tqdm on stderr (SB3's own bar needs `rich`; its logger writes to stdout)."""

        def _on_training_start(self) -> None:
            self.bar = progress_bar(ppo.timesteps, "PPO", "step", disable=None if progress else True)

        def _on_step(self) -> bool:
            self.bar.update(self.training_env.num_envs)
            return True

        def _on_training_end(self) -> None:
            self.bar.close()

    torch.set_num_threads(1)  # tiny MLP: threads only add overhead on a shared machine
    windows = preload(specs, cfg)
    venv = make_vec_env(lambda: TieredPlacementEnv(windows, cfg), n_envs=ppo.n_envs, seed=ppo.seed)
    policy, kwargs = _policy_network(ppo, cfg)
    model = PPO(policy, venv, policy_kwargs=kwargs, device="cpu", verbose=verbose, **ppo.sb3_kwargs())
    # SB3's default logger makes an empty /tmp/SB3-<date> directory on every training run
    model.set_logger(Logger(None, [HumanOutputFormat(sys.stdout)] if verbose else []))
    model.learn(total_timesteps=ppo.timesteps, callback=_Progress())
    return _save_agent(model, Path(out_dir), cfg, ppo, specs)


def _policy_network(ppo: PPOConfig, cfg: EnvConfig) -> tuple[Any, dict[str, Any]]:
    """The PPO policy class (or SB3's name for it) and its keyword arguments."""
    if ppo.policy == "chunkwise":
        from pagecast.gym.policy import ChunkwisePolicy

        kwargs: dict[str, Any] = {
            "features_extractor_kwargs": {"n_chunks": cfg.n_chunks, "history": cfg.history, "hidden": ppo.hidden},
            "request_prob": min(max(cfg.capacity, 0.02), 0.5),
        }
        return ChunkwisePolicy, kwargs
    if ppo.policy == "mlp":
        return "MlpPolicy", {"net_arch": list(ppo.net)}
    raise PagecastError(f"unknown policy {ppo.policy!r} (chunkwise, mlp)")


def _save_agent(model: Any, out: Path, cfg: EnvConfig, ppo: PPOConfig, specs: Sequence[Any]) -> Path:
    """The agent and its configuration in ``out``, built in a temporary sibling directory
    and renamed: never a half-written agent."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save(str(tmp / "ppo.zip"))
        meta = {
            "env": config_to_dict(cfg),
            "ppo": dataclasses.asdict(ppo),
            "train_traces": [_spec_str(s) for s in specs],
        }
        (tmp / "config.json").write_text(json.dumps(meta, indent=2))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def load_agent(agent_dir: str | Path) -> tuple[Any, EnvConfig]:
    from stable_baselines3 import PPO

    d = Path(agent_dir)
    if not (d / "ppo.zip").exists() or not (d / "config.json").exists():
        raise PagecastError("not a trained agent directory (needs ppo.zip and config.json)", path=d)
    try:
        meta = json.loads((d / "config.json").read_text())
        cfg = config_from_dict(meta["env"])
    except (ValueError, KeyError, TypeError) as e:
        raise PagecastError(f"bad agent config ({e})", path=d / "config.json") from None
    return PPO.load(str(d / "ppo.zip"), device="cpu"), cfg


def evaluate(
    specs: Sequence[Any], cfg: EnvConfig, *, model: Any = None, policies: Sequence[str] = tuple(BASELINES)
) -> list[dict[str, Any]]:
    """One row per (trace, policy): estimated time incl. migrations and its ratios."""
    env = TieredPlacementEnv(preload(specs, cfg), cfg)
    rows: list[dict[str, Any]] = []
    for i, ep in enumerate(env.episodes):
        results: dict[str, dict[str, Any]] = {}
        fits = int(ep.chunk_pages.sum()) <= ep.capacity_pages
        for name in policies:
            if name == "all-fast" and not fits:
                continue  # does not fit: reported as a bound below, not as a policy
            results[name] = run_episode(env, make_baseline(name), trace=i)
        if model is not None:
            results["ppo"] = run_episode(env, trace=i, predict=lambda o: model.predict(o, deterministic=True)[0])
        slow = float(ep.t_slow.sum())
        fast = float(ep.t_fast.sum())
        oracle = results.get("oracle-next", {}).get("total_ns")
        for name, r in results.items():
            rows.append(_row(ep.name, name, r["total_ns"], r["migration_ns"], r["bytes_moved"], slow, fast, oracle))
        if not fits:
            rows.append(_row(ep.name, "all-fast bound", fast, 0.0, 0, slow, fast, oracle))
    return rows


def _row(
    trace: str, policy: str, total: float, mig: float, moved: int, slow: float, fast: float, oracle: float | None
) -> dict[str, Any]:
    gain = slow - total
    return {
        "trace": trace,
        "policy": policy,
        "time_ms": total / 1e6,
        "migration_ms": mig / 1e6,
        "moved_MiB": moved / 2**20,
        "speedup_vs_slow": slow / total if total else float("nan"),
        # share of the oracle's saving this policy achieves (1 = as good as the oracle)
        "of_oracle_gain": gain / (slow - oracle) if oracle is not None and slow != oracle else float("nan"),
    }


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean over traces per policy."""
    out = []
    for p in dict.fromkeys(r["policy"] for r in rows):
        sel = [r for r in rows if r["policy"] == p]
        out.append(
            {
                "policy": p,
                "traces": len(sel),
                **{
                    k: float(np.mean([r[k] for r in sel]))
                    for k in ("time_ms", "migration_ms", "speedup_vs_slow", "of_oracle_gain")
                },
            }
        )
    return out


def _spec_str(s: Any) -> Any:
    if isinstance(s, (tuple, list)):
        return [str(x) for x in s]
    if isinstance(s, Windows):
        return s.info
    return str(s)
