"""Learned prefetchers on real programs: train on one run, test on another input.

Six train/test pairs of programs the project did not write (benchmarks/learned_pairs.py:
git, gcc, sqlite via Python, CPython imports recorded with ``pagecast record``; sort and
gzip recorded with ``pagecast record --lackey``), recorded on first use and cached. On
the held-out run of each pair, at two capacities of the simulated fast tier (percent of
its distinct pages), it prints the faults of: no prefetching, every classic prefetcher,
the page-successor table filled from the training run (``pagesucc:train=``), the LSTM
and the Transformer trained on the training run, and the oracle (the fewest faults of the
next-k oracle at k = 1 … 32, the miss oracle and every row, ``pagecast.sim.bound``, so it
bounds every row); and each one's fraction
of the oracle's fault reduction,

    fraction = (faults_none − faults_x) / (faults_none − faults_oracle)

(negative: worse than no prefetching). On the access traces a schedule fires at misses
of the simulated tier, and the models train on and predict at the training run's and the
held-out run's LRU misses at that capacity (``pagecast.sim.misses``). The pages per
prediction (k = 1, 2, 4, 10, 16 or 32, or none) are chosen per capacity by simulating the
training run (``pagecast.sim.learned_budget``); the held-out run is never looked at. Training is short (``--epochs``, small models);
the time it took is printed.

    PYTHONPATH=src python benchmarks/learned_real.py [--only gcc,git] [--epochs 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learned_pairs import recorded_pairs  # noqa: E402
from pagecast.learn.dataset import DatasetSpec, prepare, read_demand  # noqa: E402
from pagecast.learn.models import ModelConfig  # noqa: E402
from pagecast.learn.train import TrainConfig, save_model, train_model  # noqa: E402
from pagecast.sim import SimConfig, simulate  # noqa: E402
from pagecast.sim.bound import oracle_bound  # noqa: E402
from pagecast.sim.learned_budget import choose_top_k, schedule_with_budget  # noqa: E402
from pagecast.sim.misses import has_accesses, miss_events  # noqa: E402
from pagecast.sim.simulate import parse_prefetcher, resolve_capacity  # noqa: E402
from pagecast.util.atomic import atomic_output  # noqa: E402

CLASSIC = ["nextline", "stride", "leap", "markov", "bestoffset", "extent"]


def train(stream, out: Path, kind: str, args) -> tuple[Path, float]:
    t0 = time.perf_counter()
    spec = DatasetSpec()
    data = prepare([stream], spec, val_fraction=0.1)
    cfg = ModelConfig(kind=kind, n_classes=len(data.vocab), n_slots=data.table.unknown, horizon=spec.horizon)
    tcfg = TrainConfig(epochs=args.epochs, patience=2, threads=1, windows_per_epoch=args.windows, seed=0)
    res = train_model(data, cfg, tcfg)
    save_model(out, res, data, spec, tcfg)
    return out, time.perf_counter() - t0


def models_for(pair, train_trace: Path, events, tag: str, tmp: Path, args) -> dict[str, Path]:
    stream = read_demand(train_trace)
    if events is not None:
        stream = stream.take(events)
    models = {}
    for kind in ("lstm", "transformer"):
        m, secs = train(stream, tmp / f"{pair.key()}-{tag}-{kind}.pt", kind, args)
        models[kind] = m
        TIMES.append(secs)
        print(f"  trained {kind} on {len(stream):,} events of {train_trace.name} in {secs:.1f} s", file=sys.stderr)
    return models


TIMES: list[float] = []
chosen: dict[str, int] = {}


def run_pair(pair, train_trace: Path, test_trace: Path, tmp: Path, args) -> list[dict]:
    """On an access trace (lackey) the models train on, and predict at, the misses of an LRU
    tier of the capacity simulated (percent of each run's distinct pages): the events a
    per-fault predictor is asked at. On a fault trace every event is one."""
    access = has_accesses(test_trace)
    models = None if access else models_for(pair, train_trace, None, "all", tmp, args)
    rows = []
    for cap_spec in args.capacities:
        cap = resolve_capacity(cap_spec, test_trace)
        events = None
        if access:
            models = models_for(
                pair,
                train_trace,
                miss_events(train_trace, resolve_capacity(cap_spec, train_trace)),
                cap_spec.rstrip("%"),
                tmp,
                args,
            )
            events = miss_events(test_trace, cap)
        cfg = SimConfig(capacity=cap)
        sims = [simulate(test_trace, cfg, None)]
        res = {"none": sims[0].faults}
        for name in CLASSIC:
            sims.append(simulate(test_trace, cfg, name))
            res[name] = sims[-1].faults
        sims.append(simulate(test_trace, cfg, parse_prefetcher(f"pagesucc:train={train_trace}")))
        res["pagesucc(train)"] = sims[-1].faults
        for k, m in models.items():
            # pages per prediction for this capacity, chosen on the training run (0: none helps there)
            top_k, _ = choose_top_k(m, train_trace, cap_spec)
            chosen[f"{pair.name} {cap_spec} {k}"] = top_k
            sims.append(simulate(test_trace, cfg, schedule_with_budget(m, test_trace, top_k, events)))
            res[k] = sims[-1].faults
        # the reference: the fewest faults of the oracles and every row (sim/bound.py)
        res["oracle"] = oracle_bound(test_trace, cfg, candidates=sims).faults
        span = res["none"] - res["oracle"]
        frac = {k: ((res["none"] - v) / span if span > 0 else float("nan")) for k, v in res.items()}
        best_classic = min(CLASSIC + ["pagesucc(train)"], key=lambda k: res[k])
        rows.append(
            {
                "pair": pair.name,
                "kind": pair.kind,
                "capacity": cap_spec,
                "capacity_pages": cap,
                "events": len(read_demand(test_trace)),
                "faults": res,
                "fraction": frac,
                "best_classic": best_classic,
            }
        )
    return rows


def print_table(rows: list[dict]) -> None:
    names = list(rows[0]["faults"])
    head = ["pair", "cap"] + names
    print("\nfaults on the held-out run (fraction of the oracle's fault reduction below)")
    print(" | ".join(head))
    for r in rows:
        print(
            " | ".join([r["pair"], f"{r['capacity']} ({r['capacity_pages']})"] + [f"{r['faults'][n]:,}" for n in names])
        )
        print(" | ".join(["", ""] + [f"{r['fraction'][n]:.2f}" for n in names]))
    for model in ("lstm", "transformer"):
        fr = [r["fraction"][model] for r in rows]
        wins = sum(r["faults"][model] < r["faults"][r["best_classic"]] for r in rows)
        worse = sum(r["faults"][model] > r["faults"]["none"] for r in rows)
        print(
            f"{model}: median fraction {statistics.median(fr):.2f}; beats the best classic (incl. pagesucc) in "
            f"{wins}/{len(rows)} rows; worse than none in {worse}/{len(rows)}"
        )
    fr = [r["fraction"][r["best_classic"]] for r in rows]
    print(f"best classic per row: median fraction {statistics.median(fr):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated substrings of pair names")
    ap.add_argument("--capacities", default="10%,50%")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--windows", type=int, default=4096, help="training windows per epoch")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    args.capacities = args.capacities.split(",")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    pairs = recorded_pairs([o for o in args.only.split(",") if o] or None, log=lambda m: print(m, file=sys.stderr))
    print(f"recordings ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for pair, a, b in pairs:
            print(f"{pair.name}: train {a.name}, test {b.name}", file=sys.stderr)
            rows += run_pair(pair, a, b, Path(d), args)
    print_table(rows)
    print("pages per prediction chosen on the training run: " + ", ".join(f"{k}: {v}" for k, v in chosen.items()))
    print(
        f"training: {len(TIMES)} models, {sum(TIMES):.0f} s in all (median {statistics.median(TIMES):.1f} s), 1 thread"
    )
    print(f"total {time.perf_counter() - t0:.0f} s")
    if args.json:
        with atomic_output(args.json) as tmp:
            tmp.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
