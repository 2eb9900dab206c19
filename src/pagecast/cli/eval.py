"""`pagecast eval`: several prefetchers and schedules side by side on one trace."""

from __future__ import annotations

import argparse
import sys

from pagecast.cli._common import add_json_flag, format_table, print_json, progress, warn_missing_reads
from pagecast.cli._options import add_policy_option, eviction_texts, policy_texts
from pagecast.cli._sim_options import add_model_options, model_options, summary_row
from pagecast.errors import PagecastError

DEFAULT_HORIZON = 10  # pagecast train's default --horizon
DEFAULT_POLICIES = "none,nextline,stride,leap,markov,bestoffset"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="compare prefetchers/schedules on a trace: ranking metrics + simulation, oracle last",
        description=(
            "Evaluate prefetchers, schedules and models on one trace: offline ranking metrics of what each asked for "
            "(precision@K, recall@K, mAP, micro-F1 against the distinct pages of the next H demand events) and, from "
            "simulation, faults, accuracy, coverage, timeliness and estimated time. Ranking metrics average over every event "
            "(an event without predictions scores zero; event_coverage says how many had some). A schedule fires at misses "
            "of the simulated tier; on a full access trace a --model is shown those misses. The oracle is always the last "
            "row: the fewest faults of the oracle at k = 1, 2, 4 ... 32 pages ahead, the miss oracle (access traces: "
            "the next k misses of an LRU tier) and every row above, so it bounds every row shown."
        ),
    )
    p.add_argument("trace")
    add_policy_option(
        p,
        repeated=True,
        default=DEFAULT_POLICIES,
        deprecated=["--prefetchers"],
        help="a prefetcher to compare; repeat the flag for several (a comma list works too when no option "
        "value contains a comma); the oracle is always the last row",
    )
    p.add_argument(
        "--schedule", action="append", default=[], metavar="S.parquet", help="a schedule to evaluate (repeatable)"
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="M.pt",
        help="a trained model: its schedule is predicted on this trace (needs pagecast.learn)",
    )
    p.add_argument(
        "--gate",
        metavar="G.pt",
        help="a gate (pagecast.sim.gate) over the first --model and the classic prefetchers: its row is added "
        "and the events it gave each expert are reported",
    )
    p.add_argument(
        "--rank-events",
        type=int,
        default=4_000_000,
        metavar="N",
        help="ranking metrics need every prefetch request of a row (24 B each, tens of millions on a long access "
        "trace): on a trace of more demand events they are skipped, and the output says so (default %(default)s)",
    )
    p.add_argument(
        "--model-budget",
        choices=("train", "fixed"),
        default="train",
        help="pages per prediction of a --model: train = chosen for this capacity by simulating the model's "
        "training run (k = 1 ... 32, or 0: switched off when no k beats no prefetching there); fixed = -k "
        "(default %(default)s)",
    )
    p.add_argument(
        "-k", type=int, default=10, help="top-K predictions per trigger for the ranking metrics (default %(default)s)"
    )
    p.add_argument(
        "--horizon",
        type=int,
        default=None,
        help="H: the truth window is the next H demand events (default: the horizon the --model was trained "
        "with, else 10, pagecast train's default)",
    )
    p.add_argument(
        "--capacity", default="50%", help="pages, bytes (64MiB) or percent of distinct pages (default %(default)s)"
    )
    p.add_argument(
        "--evictions",
        action="append",
        default=None,
        metavar="NAME[:k=v,...]",
        help="eviction policies: every prefetcher runs with each (lru, fifo, clock, min, lfu, reuse:trace=RUN, "
        "learned:model=EV.pt; repeated or comma-separated; default lru); min × oracle is added as the floor",
    )
    p.add_argument("--eviction", dest="evictions", action="append", help=argparse.SUPPRESS)
    add_model_options(p)
    add_json_flag(p)
    p.set_defaults(func=main)


def _learn_predict():
    import importlib

    try:
        return importlib.import_module("pagecast.learn.predict")
    except ImportError as e:
        raise PagecastError(f"--model needs pagecast.learn, which is not available here ({e})") from None


def _model_budget(model: str, capacity: str, k: int) -> tuple[int, str]:
    """(pages per prediction, why): chosen on the model's first readable training run, so
    a model that adds faults there is switched off (0) rather than shown at -k."""
    from pathlib import Path

    lm = _learn_predict()._loaded(model)  # a clear error first when pagecast.learn is missing
    from pagecast.sim.learned_budget import choose_top_k

    runs = [t for t in lm.extra.get("traces", []) if Path(t).is_file()]
    if not runs:
        return k, f"-k {k} (its training run is not readable here)"
    best, faults = choose_top_k(model, runs[0], capacity)
    return best, f"k = {best} chosen on {runs[0]} (faults per k: {faults})"


def _model_schedule(model: str, trace, k: int, events):
    from pagecast.sim.learned_budget import schedule_with_budget

    s = schedule_with_budget(model, trace, k, events)
    s.meta["name"] = f"model:{model}"
    return s


def _gate_schedule(args, trace, cap: int, model_schedule, events):
    """The gate's schedule on ``trace`` (the model's one of its experts; the page-successor
    expert filled from the model's first readable training run) and its choices."""
    from pathlib import Path

    from pagecast.sim.gate import gate_schedule, load_gate

    gm = load_gate(args.gate)
    runs = [t for t in _learn_predict()._loaded(args.model[0]).extra.get("traces", []) if Path(t).is_file()]
    sched = model_schedule
    if len(sched) == 0:  # switched off by its budget: the gate still sees what one page would be
        sched = _model_schedule(args.model[0], trace, 1, events)
    r = gate_schedule(
        gm,
        trace,
        model_schedule=sched,
        train_run=runs[0] if runs else None,
        capacity=args.capacity,
        capacity_pages=cap,
        events=events,
    )
    r.schedule.meta["name"] = f"gate:{args.gate}"
    return r.schedule, r.choices


def _model_horizon(model: str) -> int:
    return int(_learn_predict()._loaded(model).spec.horizon)


def main(args: argparse.Namespace) -> int:
    from pagecast.sim.misses import has_accesses, miss_events
    from pagecast.sim.simulate import resolve_capacity
    from pagecast.trace.reader import open_trace

    if args.uvm:
        raise PagecastError("eval compares host-side prefetchers; use `pagecast simulate --uvm` for the UVM model")
    trace = open_trace(args.trace)
    warn_missing_reads("eval", args.trace)
    cap = resolve_capacity(args.capacity, trace)
    if args.horizon is None:
        args.horizon = next(filter(None, (_model_horizon(m) for m in args.model)), DEFAULT_HORIZON)
    if args.horizon < 1 or args.k < 1:
        raise PagecastError("-k and --horizon must be at least 1")
    # On a full access trace a model is shown the misses of the tier, as a per-fault predictor is.
    events = miss_events(trace, cap) if args.model and has_accesses(trace) else None
    cands, budgets, gate_choices = _candidates(args, trace, cap, events)
    from pagecast.learn.sample import count_demand

    n_demand = count_demand(trace)
    rank_on = n_demand <= args.rank_events
    if not rank_on:
        print(
            f"{trace.path}: {n_demand:,} demand events; ranking metrics skipped (more than --rank-events "
            f"{args.rank_events:,}: every row's prefetch requests would be held), faults and times computed on all",
            file=sys.stderr,
        )
    evictions = eviction_texts(args.evictions or ["lru"])
    pairs = [(ev, c) for ev in evictions for c in cands]
    if "min" not in evictions:
        pairs.append(("min", "oracle"))  # the floor: the gap of every pair to the limit in one table
    full, baseline = _simulate_pairs(args, trace, cap, pairs, evictions[0], rank_on)
    rows = []
    for d in full:
        row = summary_row(d, baseline)
        row["timeliness"] = d["timeliness"]
        for k in ("precision_at_k", "recall_at_k", "map", "micro_f1", "event_coverage"):
            row[k.replace("_at_k", "@K")] = d.get(f"rank_{k}", float("nan"))
        rows.append(row)
    if args.json:
        print_json(
            {
                "trace": str(trace.path),
                "capacity_pages": cap,
                "k": args.k,
                "horizon": args.horizon,
                "model_budget": budgets,
                "gate_choices": gate_choices,
                "ranking": "computed" if rank_on else f"skipped: {n_demand} demand events > --rank-events",
                "results": full,
            }
        )
        return 0
    print(f"{trace.path}: capacity {cap:,} pages, evictions {', '.join(evictions)}, K={args.k}, H={args.horizon}")
    print(format_table(rows))
    for m, why in budgets.items():
        print(f"{m}: pages per prediction {why}")
    if gate_choices is not None:
        shown = sum(gate_choices.values())
        print(
            f"gate {args.gate}: events given to each expert (of {shown:,}): "
            + ", ".join(f"{k} {v:,} ({v / max(shown, 1):.0%})" for k, v in gate_choices.items())
        )
    print(f"oracle row: {full[-1].get('oracle_source', 'oracle')} (the fewest faults of the oracles and every row)")
    return 0


def _candidates(args: argparse.Namespace, trace, cap: int, events) -> tuple[list, dict[str, str], dict | None]:
    """What is compared, in the table's order: policies, schedules, models, the gate, the
    oracle; the pages per prediction each model was given, and the gate's choices."""
    from pagecast.trace.schedule import read_schedule

    names = [n for n in policy_texts(args, DEFAULT_POLICIES) if n != "oracle"]
    cands: list = list(names)
    for s in args.schedule:
        sch = read_schedule(s)
        sch.meta.setdefault("name", f"schedule:{s}")
        cands.append(sch)
    budgets = {}
    model_scheds = []
    for m in args.model:
        k, why = _model_budget(m, args.capacity, args.k) if args.model_budget == "train" else (args.k, "-k")
        budgets[m] = why
        model_scheds.append(_model_schedule(m, trace, k, events))
        cands.append(model_scheds[-1])
    gate_choices = None
    if args.gate:
        if not args.model:
            raise PagecastError("--gate needs a --model: the model is one of the gate's experts")
        gs, gate_choices = _gate_schedule(args, trace, cap, model_scheds[0], events)
        cands.append(gs)
    cands.append("oracle")
    return cands, budgets, gate_choices


def _simulate_pairs(
    args: argparse.Namespace, trace, cap: int, pairs: list, first_eviction: str, rank_on: bool
) -> tuple[list[dict], float | None]:
    """Each (eviction, candidate) simulated, with its ranking metrics; the baseline's time."""
    from pagecast.learn.ranking import ranking_metrics_stream
    from pagecast.sim import SimConfig, simulate
    from pagecast.sim.bound import oracle_bound

    full = []
    baseline = None
    done: dict[str, list] = {}
    bar = progress(len(pairs), "eval", "policy")
    for ev, c in pairs:
        cfg = SimConfig(
            capacity=cap, eviction=ev, log_prefetches=rank_on, oracle_k=max(args.k, 1), **model_options(args)
        )
        # the oracle row: the fewest faults of the oracle (k up to 32), the miss oracle and every row
        # above it under the same eviction, so it bounds every row shown (sim/bound.py)
        same = done.setdefault(ev, [])
        r = oracle_bound(trace, cfg, candidates=same) if c == "oracle" else simulate(trace, cfg, c)
        log = r.extra.pop("prefetch_log", None)
        # the trace is read in blocks: memory bounded by the log, not by the trace
        rank = ranking_metrics_stream(log, trace, k=args.k, horizon=args.horizon) if log and len(log[0]) else {}
        del log
        same.append(r)
        d = r.to_dict()
        d.update({f"rank_{k}": v for k, v in rank.items()})
        if "oracle_source" in r.extra:
            d["oracle_source"] = r.extra["oracle_source"]
        if baseline is None and r.prefetcher == "none" and ev == first_eviction:
            baseline = r.est_time_ns
        full.append(d)
        bar.update(1)
    bar.close()
    return full, baseline
