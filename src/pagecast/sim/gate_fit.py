"""Fitting a gate (``sim/gate.py``) from recorded runs: ``pagecast train --target gate``
and ``benchmarks/learned_real.py``.

The gate must learn how far each expert can be trusted on a run the model expert was
*not* trained on, so every example is a pair of runs of one program: the first trains the
model (an LSTM, ``train_model_expert``) and fills the page-successor table, the second is
the run whose events, features and labels the gate learns from (``gate_run``).

Per capacity the gate has an MLP and three numbers: τ, the page budget L (a share of the
tier) and α, the weight of each expert's measured recent precision against the MLP's
estimate (``gate.decide``). They are chosen by **cross-fitting** (``fit_gate_runs``): the
pairs are split into two folds (alternately, in the order given), an MLP is fitted on each
fold and every (L, τ, α) is scored by simulating the gate's schedule on the *other* fold,
so each choice is measured on programs the MLP was not fitted on; the MLP kept is then
fitted on all pairs at the chosen L. The score of a run is the share of the best
single expert's fault reduction the gate reaches (1 where it makes no more faults),
averaged over the runs: an objective that does not reward beating the best expert on one
program by what it loses on another.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from pagecast.sim import gate as G
from pagecast.sim.config import SimConfig
from pagecast.sim.misses import has_accesses, miss_events
from pagecast.sim.simulate import parse_prefetcher, resolve_capacity, simulate


@dataclass
class GateFitConfig:
    taus: tuple[float, ...] = (0.05, 0.2, 0.4)
    budgets: tuple[float, ...] = (1, 1 / 4, 1 / 16, 1 / 64)  # pages per event at most, share of the tier
    alphas: tuple[float, ...] = (0.0, 0.5)
    seed: int = 0
    epochs: int = 2  # the model expert's training (per pair)
    windows: int = 1024


@dataclass
class GateRun:
    """One pair of runs at one capacity: the second run's events, every expert's
    predictions on them, and the faults each expert makes alone ("none": no prefetching)."""

    name: str
    train: Path
    test: Path
    cap_spec: str
    cap: int
    events: np.ndarray | None
    stream: G.Stream
    preds: G.Predictions
    faults: dict[str, int]
    seed: int = 0
    tables: dict = field(default_factory=dict)
    simulated: dict = field(default_factory=dict)  # faults per distinct gate schedule

    def limit(self, share: float) -> int:
        return max(1, int(round(self.cap * share)))

    def table(self, share: float) -> G.Table:
        if share not in self.tables:
            cfg = G.GateConfig(seed=self.seed)
            self.tables[share] = G.build_table(
                self.stream, self.preds, cfg, G.label_horizon(self.cap), self.limit(share)
            )
        return self.tables[share]


def train_model_expert(train_run: str | Path, out: str | Path, cap_spec: str | None, cfg: GateFitConfig) -> Path:
    """An LSTM trained on ``train_run`` (on an access trace: its misses of an LRU tier at
    ``cap_spec``, what the model is shown at that capacity)."""
    from pagecast.learn.dataset import DatasetSpec, prepare, read_demand
    from pagecast.learn.models import ModelConfig
    from pagecast.learn.train import TrainConfig, save_model, train_model

    stream = read_demand(train_run)
    if cap_spec is not None and has_accesses(train_run):
        stream = stream.take(miss_events(train_run, resolve_capacity(cap_spec, train_run)))
    spec = DatasetSpec()
    data = prepare([stream], spec, val_fraction=0.1)
    mcfg = ModelConfig(kind="lstm", n_classes=len(data.vocab), n_slots=data.table.unknown, horizon=spec.horizon)
    tcfg = TrainConfig(epochs=cfg.epochs, patience=2, threads=1, windows_per_epoch=cfg.windows, seed=cfg.seed)
    res = train_model(data, mcfg, tcfg)
    save_model(out, res, data, spec, tcfg)
    return Path(out)


def model_schedules(model: str | Path, train_run: str | Path, test_run: str | Path, cap_spec: str, events):
    """(the model's schedule as the gate's expert, its schedule alone): pages per
    prediction chosen on the training run (``learned_budget``); the expert names at least
    one page (the gate, not the budget, decides when it is off)."""
    from pagecast.sim.learned_budget import choose_top_k, schedule_with_budget

    top_k, _ = choose_top_k(model, train_run, cap_spec)
    expert = schedule_with_budget(model, test_run, max(top_k, 1), events)
    alone = expert if top_k else schedule_with_budget(model, test_run, 0)
    return expert, alone


def gate_run(
    name: str,
    train_run: str | Path,
    test_run: str | Path,
    cap_spec: str,
    model: str | Path,
    seed: int = 0,
) -> GateRun:
    """The classic experts, the successor table of ``train_run`` and ``model`` on ``test_run``."""
    cap = resolve_capacity(cap_spec, test_run)
    events = miss_events(test_run, cap) if has_accesses(test_run) else None
    stream = G.read_stream(test_run, events)
    expert, alone = model_schedules(model, train_run, test_run, cap_spec, events)
    preds = G.expert_predictions(stream, G.default_experts(train_run), expert)
    cfg = SimConfig(capacity=cap)
    faults = {"none": simulate(test_run, cfg, None).faults}
    for spec in G.default_experts(train_run):
        faults[G.expert_label(spec)] = simulate(test_run, cfg, parse_prefetcher(spec)).faults
    faults[G.MODEL] = simulate(test_run, cfg, alone).faults
    return GateRun(name, Path(train_run), Path(test_run), cap_spec, cap, events, stream, preds, faults, seed)


def gate_faults(gm: G.GateModel, r: GateRun, tau: float, share: float, alpha: float) -> tuple[int, dict]:
    res = G.decide(gm, r.table(share), r.preds, r.stream, tau, r.limit(share), alpha)
    sch = res.schedule
    # several (τ, α) often make the same decisions: simulate each distinct schedule once
    key = hashlib.sha1(b"".join(np.ascontiguousarray(x).tobytes() for x in (sch.trigger, sch.region, sch.page)))
    faults = r.simulated.get(key.hexdigest())
    if faults is None:
        faults = r.simulated[key.hexdigest()] = simulate(r.test, SimConfig(capacity=r.cap), sch).faults
    return faults, res.choices


def share_of_best(r: GateRun, faults: int) -> float:
    """The share of the best single expert's fault reduction reached (1: no more faults)."""
    best = min(v for k, v in r.faults.items() if k != "none")
    span = r.faults["none"] - min(best, faults)
    return (r.faults["none"] - faults) / span if span > 0 else 1.0


def folds(runs: Sequence[GateRun]) -> tuple[list[GateRun], list[GateRun]]:
    """Two folds of programs, alternately in the order given (a program never in both)."""
    names = list(dict.fromkeys(r.name for r in runs))
    a = set(names[::2])
    return [r for r in runs if r.name in a], [r for r in runs if r.name not in a]


def fit_gate_runs(
    runs: Sequence[GateRun], cap_spec: str, cfg: GateFitConfig, log: Callable[[str], None] | None = None
) -> G.GateModel:
    """The MLP, τ, L and α for ``cap_spec`` (module docstring). With runs of one program
    only, nothing is held out: the choice is scored on the runs the MLP was fitted on."""
    runs = [r for r in runs if r.cap_spec == cap_spec]
    if not runs:
        raise ValueError(f"no run at capacity {cap_spec}")
    a, b = folds(runs)
    gcfg = G.GateConfig(seed=cfg.seed)
    score: dict[tuple[float, float, float], float] = {}
    for share in cfg.budgets:
        if b:
            pairs = [
                (G.fit_gate([r.table(share) for r in a], gcfg), b),
                (G.fit_gate([r.table(share) for r in b], gcfg), a),
            ]
        else:  # one program: nothing to hold out
            pairs = [(G.fit_gate([r.table(share) for r in a], gcfg), a)]
        for tau, alpha in itertools.product(cfg.taus, cfg.alphas):
            fr = [share_of_best(r, gate_faults(gm, r, tau, share, alpha)[0]) for gm, held in pairs for r in held]
            score[share, tau, alpha] = float(np.mean(fr))
    # ties: the larger budget, then the smaller τ, then the smaller α (the MLP alone)
    share, tau, alpha = max(score, key=lambda k: (round(score[k], 4), k[0], -k[1], -k[2]))
    gm = G.fit_gate([r.table(share) for r in runs], gcfg)
    gm.threshold[cap_spec], gm.budget[cap_spec], gm.online[cap_spec] = tau, share, alpha
    if log and not b:
        log(f"gate {cap_spec}: runs of one program only; τ, L and α are scored on the runs the MLP was fitted on")
    if log:
        log(
            f"gate {cap_spec} seed {cfg.seed}: τ = {tau}, budget {share:.3f} of the capacity, α = {alpha} "
            f"(cross-fitted share of the best expert's reduction {score[share, tau, alpha]:.3f})"
        )
    return gm
