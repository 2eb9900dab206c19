"""Learned prefetchers on real programs: train on one run, test on another input,
on programs the defaults were chosen on (development) and on programs they were not (held out).

**Protocol.** Pairs of runs of programs the project did not write (benchmarks/learned_pairs.py),
recorded on first use and cached, in two sets of *programs*:

* development (``--split dev``): git, gcc, sqlite via Python, CPython imports (``pagecast
  record``), sort and gzip (``pagecast record --lackey``). Every default — the model's size
  and training, the gate's features, labels and horizon, and per capacity its threshold τ,
  page budget L and online weight α — was chosen on these. τ, L and α are cross-fitted
  (``pagecast.sim.gate_fit``): the six pairs form two folds (git, sqlite, sort / gcc,
  CPython, gzip), an MLP fitted on one fold is scored on the other, so every choice is
  measured on programs the MLP was not fitted on; the gate kept is fitted on all six.
  (The grid's largest budget, the whole tier, was added after a held-out row — bc at 10 %,
  where one page per event cut the successor table's chains — showed the old grid lacked
  it; which budget a gate uses is chosen on the development pairs alone.)
* held out (``--split heldout``): g++ (cc1plus), perl with different modules, the sqlite3
  CLI over mmap, grep -r, awk, node requiring different modules, objdump -d (page-fault
  recordings), bzip2 and bc -l (lackey). Nothing is tuned on them: their rows are reported
  as they fall.

On the test run of each pair, at each capacity of the simulated fast tier (percent of its
distinct pages, LRU), it prints the faults of: no prefetching, every classic prefetcher,
the page-successor table filled from the training run (``pagesucc(train)``), the LSTM
trained on the training run (pages per prediction chosen by simulating the training run,
``pagecast.sim.learned_budget``), the gate over all of them (``pagecast.sim.gate``) and the
oracle (the fewest faults of the next-k oracles, the miss oracle and every row,
``pagecast.sim.bound``); and each one's fraction of the oracle's fault reduction,

    fraction = (faults_none − faults_x) / (faults_none − faults_oracle)

(negative: worse than no prefetching). On the access traces the models train on, predict
at, and the experts see, the LRU misses at that capacity (``pagecast.sim.misses``). Each
``--seeds`` value trains every LSTM and the gate again; the summary is per split, capacity
and seed. ``--quick``: fewer epochs and windows (the figures of the report).

    PYTHONPATH=src python benchmarks/learned_real.py [--split all] [--seeds 0,1,2] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learned_pairs import recorded_pairs  # noqa: E402
from pagecast.sim import SimConfig, simulate  # noqa: E402
from pagecast.sim import gate as G  # noqa: E402
from pagecast.sim import gate_fit as GF  # noqa: E402
from pagecast.sim.bound import oracle_bound  # noqa: E402
from pagecast.sim.misses import has_accesses, miss_events  # noqa: E402
from pagecast.sim.simulate import parse_prefetcher, resolve_capacity  # noqa: E402
from pagecast.util.atomic import atomic_output  # noqa: E402

CLASSIC = ["nextline", "stride", "leap", "markov", "bestoffset", "extent"]
TIMES: list[float] = []


@dataclass
class Cell:
    """One pair at one capacity: the test run's rows and what the gate needs."""

    pair: object
    cap_spec: str
    cap: int
    test: Path
    train: Path
    events: object
    sims: list = field(default_factory=list)
    faults: dict = field(default_factory=dict)
    stream: object = None
    preds: object = None
    run: object = None  # the gate's view (gate_fit.GateRun)


def classic_cell(pair, train_trace: Path, test_trace: Path, cap_spec: str) -> Cell:
    """What does not depend on a training seed: the classic rows and the classic experts."""
    cap = resolve_capacity(cap_spec, test_trace)
    events = miss_events(test_trace, cap) if has_accesses(test_trace) else None
    c = Cell(pair, cap_spec, cap, test_trace, train_trace, events)
    cfg = SimConfig(capacity=cap)
    c.sims = [simulate(test_trace, cfg, None)]
    c.faults["none"] = c.sims[0].faults
    for name in CLASSIC:
        c.sims.append(simulate(test_trace, cfg, name))
        c.faults[name] = c.sims[-1].faults
    c.sims.append(simulate(test_trace, cfg, parse_prefetcher(f"pagesucc:train={train_trace}")))
    c.faults["pagesucc(train)"] = c.sims[-1].faults
    c.stream = G.read_stream(test_trace, events)
    c.preds = G.expert_predictions(c.stream, G.default_experts(train_trace), None)
    return c


def model_cell(base: Cell, tmp: Path, args, seed: int) -> Cell:
    """``base`` with the LSTM of this seed: trained on the training run (its misses at this
    capacity on an access trace), its row, and its predictions as the gate's model expert."""
    pair, train_trace, test_trace, cap_spec = base.pair, base.train, base.test, base.cap_spec
    access = base.events is not None
    m = tmp / f"{pair.key()}-{cap_spec.rstrip('%') if access else 'all'}-s{seed}.pt"
    fcfg = GF.GateFitConfig(seed=seed, epochs=args.epochs, windows=args.windows)
    if not m.exists():
        t0 = time.perf_counter()
        GF.train_model_expert(train_trace, m, cap_spec, fcfg)
        TIMES.append(time.perf_counter() - t0)
        print(f"  trained lstm on {train_trace.name} (seed {seed})", file=sys.stderr)
    c = Cell(pair, cap_spec, base.cap, test_trace, train_trace, base.events, list(base.sims), dict(base.faults))
    sched, alone = GF.model_schedules(m, train_trace, test_trace, cap_spec, base.events)
    c.sims.append(simulate(test_trace, SimConfig(capacity=base.cap), alone))
    c.faults["lstm"] = c.sims[-1].faults
    c.stream = base.stream
    mp = G.expert_predictions(base.stream, [], sched)
    c.preds = G.Predictions(base.preds.names + mp.names, base.preds.ptr + mp.ptr, base.preds.region + mp.region,
                            base.preds.page + mp.page)  # fmt: skip
    c.run = GF.GateRun(pair.name, train_trace, test_trace, cap_spec, base.cap, base.events, c.stream, c.preds,
                       dict(c.faults), seed)  # fmt: skip
    return c


def finish(c: Cell, gm, seed: int, split: str) -> dict:
    tau, share, alpha = gm.threshold[c.cap_spec], gm.budget[c.cap_spec], gm.alpha(c.cap_spec)
    r = G.decide(gm, c.run.table(share), c.preds, c.stream, tau, c.run.limit(share), alpha)
    sim, choices = simulate(c.test, SimConfig(capacity=c.cap), r.schedule), r.choices
    c.sims.append(sim)
    res = dict(c.faults)
    res["gate"] = sim.faults
    res["oracle"] = oracle_bound(c.test, SimConfig(capacity=c.cap), candidates=c.sims).faults
    span = res["none"] - res["oracle"]
    frac = {k: ((res["none"] - v) / span if span > 0 else float("nan")) for k, v in res.items()}
    best = min(CLASSIC + ["pagesucc(train)"], key=lambda k: res[k])
    return {
        "pair": c.pair.name, "split": split, "kind": c.pair.kind, "capacity": c.cap_spec, "capacity_pages": c.cap,
        "seed": seed, "tau": tau, "budget": share, "alpha": alpha, "faults": res, "fraction": frac, "best_classic": best, "gate_choices": choices,
    }  # fmt: skip


def fit_gate(dev: list[Cell], cap_spec: str, seed: int, args):
    """The gate of this capacity and seed, cross-fitted on the development pairs (gate_fit)."""
    log = lambda m: print("  " + m, file=sys.stderr)  # noqa: E731
    return GF.fit_gate_runs([c.run for c in dev], cap_spec, GF.GateFitConfig(seed=seed), log)


def print_table(rows: list[dict]) -> None:
    names = list(rows[0]["faults"])
    print("\nfaults on the test run (fraction of the oracle's fault reduction below)")
    print(" | ".join(["split", "pair", "cap", "seed"] + names))
    for r in rows:
        print(" | ".join([r["split"], r["pair"], f"{r['capacity']} ({r['capacity_pages']})", str(r["seed"])]
                         + [f"{r['faults'][n]:,}" for n in names]))  # fmt: skip
        print(" | ".join(["", "", "", ""] + [f"{r['fraction'][n]:.2f}" for n in names]))
        print("   gate choices: " + ", ".join(f"{k} {v}" for k, v in r["gate_choices"].items() if v))


def summary(rows: list[dict]) -> list[str]:
    out = []
    keys = sorted({(r["split"], r["capacity"], r["seed"]) for r in rows})
    for split, cap, seed in keys:
        sel = [r for r in rows if (r["split"], r["capacity"], r["seed"]) == (split, cap, seed)]
        for model in ("gate", "lstm"):
            fr = [r["fraction"][model] for r in sel]
            gap = [r["fraction"][r["best_classic"]] - r["fraction"][model] for r in sel]
            wins = sum(r["faults"][model] < r["faults"][r["best_classic"]] for r in sel)
            ties = sum(r["faults"][model] == r["faults"][r["best_classic"]] for r in sel)
            worse = sum(r["faults"][model] > r["faults"]["none"] for r in sel)
            out.append(
                f"{split:8} {cap:4} seed {seed} {model:5}: median {statistics.median(fr):.2f}, beats best classic "
                f"{wins}/{len(sel)} (ties {ties}), largest shortfall {max(gap):.3f}, worse than none {worse}"
            )
        bc = [r["fraction"][r["best_classic"]] for r in sel]
        out.append(f"{split:8} {cap:4} seed {seed} best classic per row: median {statistics.median(bc):.2f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated substrings of pair names (dev pairs are always run)")
    ap.add_argument("--split", choices=("dev", "heldout", "all"), default="all", help="which rows to report")
    ap.add_argument("--capacities", default="10%,50%")
    ap.add_argument("--seeds", default="0", help="comma-separated training seeds")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--windows", type=int, default=4096, help="training windows per epoch")
    ap.add_argument("--quick", action="store_true", help="2 epochs of 1024 windows")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument(
        "--save-gate", metavar="DIR", help="write each fitted gate as DIR/gate-CAP-sSEED.pt (pagecast eval --gate)"
    )
    args = ap.parse_args()
    if args.quick:
        args.epochs, args.windows = 2, 1024
    args.capacities = args.capacities.split(",")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    dev = recorded_pairs(None, log=log, split="dev")
    only = [o for o in args.only.split(",") if o] or None
    held = recorded_pairs(only, log=log, split="heldout") if args.split != "dev" else []
    print(f"recordings ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print("development programs: " + ", ".join(p.name for p, _, _ in dev))
    print("held-out programs: " + ", ".join(p.name for p, _, _ in held))
    rows = []
    seeds = [int(x) for x in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as d:
        dcells: dict[int, list[Cell]] = {s: [] for s in seeds}
        for pair, a, b in dev:
            print(f"{pair.name} (dev): train {a.name}, test {b.name}", file=sys.stderr)
            for cap in args.capacities:
                base = classic_cell(pair, a, b, cap)
                for seed in seeds:
                    dcells[seed].append(model_cell(base, Path(d), args, seed))
        gates = {s: {cap: fit_gate(dcells[s], cap, s, args) for cap in args.capacities} for s in seeds}
        for seed in seeds:
            for cap, gm in gates[seed].items() if args.save_gate else ():
                gm.save(Path(args.save_gate) / f"gate-{cap.rstrip('%')}-s{seed}.pt")
            if args.split != "heldout":
                rows += [finish(c, gates[seed][c.cap_spec], seed, "dev") for c in dcells[seed]]
        del dcells
        for pair, a, b in held:
            print(f"{pair.name} (held out): train {a.name}, test {b.name}", file=sys.stderr)
            for cap in args.capacities:
                base = classic_cell(pair, a, b, cap)
                for seed in seeds:
                    rows.append(finish(model_cell(base, Path(d), args, seed), gates[seed][cap], seed, "heldout"))
    print_table(rows)
    print("\nsummary (fraction of the oracle's reduction; beats = fewer faults than the best classic of the row)")
    print("\n".join(summary(rows)))
    print(f"training: {len(TIMES)} models, {sum(TIMES):.0f} s in all, 1 thread; total {time.perf_counter() - t0:.0f} s")
    if args.json:
        with atomic_output(args.json) as tmp:
            tmp.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
