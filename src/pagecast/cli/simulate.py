"""`pagecast simulate`: one trace, one fast-tier configuration, one prefetcher."""

from __future__ import annotations

import argparse

from pagecast.cli._common import add_json_flag, format_table, print_json
from pagecast.cli._options import add_eviction_option, add_policy_option, eviction_text, policy_text
from pagecast.cli._sim_options import add_model_options, model_options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="replay a trace through a fast tier of given capacity with a prefetcher",
        description=(
            "Replay a trace's demand stream through a fast memory tier of fixed capacity, with an eviction policy and a "
            "prefetcher (or a learned schedule), and report hits, faults, late and useless prefetches, bytes moved, "
            "accuracy, coverage, stall and estimated run time (trace compute gaps + stalls)."
        ),
    )
    p.add_argument("trace", help="trace file (.parquet)")
    p.add_argument(
        "--capacity",
        default="50%",
        help="fast tier: pages (4096), bytes (64MiB) or percent of the trace's distinct pages (default %(default)s)",
    )
    add_eviction_option(p)
    src = p.add_mutually_exclusive_group()
    add_policy_option(
        src,
        default="none; with --uvm: tree",
        deprecated=["--prefetcher"],
        help="the prefetcher, e.g. stride:degree=8 or pagesucc:train=RUN1.parquet (with --uvm: tree or none)",
    )
    src.add_argument(
        "--schedule", default=None, metavar="S.parquet", help="replay a schedule (a learned model's predictions)"
    )
    add_model_options(p)
    add_json_flag(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from pagecast.sim import SimConfig, simulate
    from pagecast.sim.simulate import resolve_capacity
    from pagecast.sim.uvm import UVM_EVICTIONS
    from pagecast.trace.reader import open_trace
    from pagecast.trace.schedule import read_schedule

    trace = open_trace(args.trace)
    if args.schedule:
        pf = read_schedule(args.schedule)
        pf.meta.setdefault("name", f"schedule:{args.schedule}")
    else:
        # UVM mode has its own names (tree, none), checked by the UVM model
        pf = (args.policy if args.uvm else policy_text(args)) or ("tree" if args.uvm else "none")
    cap = resolve_capacity(args.capacity, trace)
    ev = args.eviction
    if not (args.uvm and ev.lower() in UVM_EVICTIONS):  # the driver's own orders: uvm-fifo, uvm-lru
        ev = eviction_text(ev)
    r = simulate(trace, SimConfig(capacity=cap, eviction=ev, **model_options(args)), pf)
    d = r.to_dict()
    if args.json:
        print_json(d)
        return 0
    skip = {"extra", "trace"}
    rows = [{"metric": k, "value": v} for k, v in d.items() if k not in skip]
    rows += [{"metric": k, "value": v} for k, v in d["extra"].items() if not isinstance(v, (dict, tuple))]
    print(f"{trace.path}: {r.accesses:,} demand events, {r.distinct_pages:,} distinct pages")
    print(format_table(rows, ["metric", "value"]))
    return 0
