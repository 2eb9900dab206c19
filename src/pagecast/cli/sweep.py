"""`pagecast sweep`: capacity × eviction × prefetcher grids over traces, in parallel."""

from __future__ import annotations

import argparse
import csv
import io
import os

from pagecast.cli._common import add_json_flag, format_table, print_json, progress
from pagecast.cli._options import add_policy_option, eviction_texts, policy_texts
from pagecast.cli._sim_options import add_model_options, model_options, summary_row


def _csv_list(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


DEFAULT_POLICIES = "none,nextline,stride,oracle"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="simulate grids of capacity × eviction × prefetcher over traces (parallel, or on Ray)",
        description=(
            "Run every combination of capacity, eviction policy and prefetcher on every trace, in parallel across "
            "local cores (or as tasks on an existing Ray cluster with --ray), and print a table, optionally also CSV, "
            "JSON and a plot of faults or estimated time against capacity (one line per policy)."
        ),
    )
    p.add_argument("traces", nargs="+")
    p.add_argument(
        "--capacities",
        default="10%,25%,50%,100%",
        type=_csv_list,
        help="pages, bytes or percents (default %(default)s)",
    )
    p.add_argument(
        "--evictions",
        action="append",
        default=None,
        metavar="NAME[:k=v,...]",
        help="eviction policies of the grid (lru, fifo, clock, min, lfu, reuse:trace=RUN, learned:model=EV.pt), "
        "repeated or comma-separated (default lru); the grid also holds min × oracle, the floor",
    )
    add_policy_option(
        p,
        repeated=True,
        default=DEFAULT_POLICIES,
        deprecated=["--prefetchers"],
        help="a prefetcher of the grid; repeat the flag for several (a comma list works too when no option "
        "value contains a comma); with --uvm: tree, none",
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=os.cpu_count() or 1,
        help="local worker processes (default: all cores, %(default)s)",
    )
    p.add_argument(
        "--ray", metavar="ADDRESS", default=None, help="run on an existing Ray cluster ('auto' or host:port)"
    )
    p.add_argument("--csv", metavar="OUT.csv", help="write all result columns as CSV")
    p.add_argument("--plot", metavar="OUT.png", help="plot --metric against capacity")
    p.add_argument(
        "--metric",
        default="faults",
        choices=["faults", "est_time_ns", "stall_ns", "bytes_in"],
        help="what --plot shows (default %(default)s)",
    )
    add_model_options(p)
    add_json_flag(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from pagecast.sim.sweep import grid, plot, run_local, run_ray
    from pagecast.trace.reader import open_trace
    from pagecast.util.atomic import atomic_write_text

    for t in args.traces:
        open_trace(t)  # fail early, one line, on a bad path
    opts = model_options(args)
    uvm = opts.pop("uvm")
    policies = policy_texts(args, DEFAULT_POLICIES, check=not uvm)
    evictions = eviction_texts(args.evictions or ["lru"]) if not uvm else ["uvm"]
    jobs = grid(args.traces, args.capacities, evictions, policies, uvm, opts)
    if not uvm and not ("min" in evictions and "oracle" in policies):
        # the floor of every pair: MIN with the oracle, so the gap to the limit is one table
        jobs += grid(args.traces, args.capacities, ["min"], ["oracle"], uvm, opts)
    bar = progress(len(jobs), "sweep", "run")
    if args.ray:
        rows = run_ray(jobs, args.ray, on_done=lambda: bar.update(1))
    else:
        rows = run_local(jobs, args.jobs, on_done=lambda: bar.update(1))
    bar.close()
    for r in rows:
        r.pop("uvm_params", None)
    if args.csv:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
        atomic_write_text(args.csv, buf.getvalue())
    if args.plot:
        plot(rows, args.plot, args.metric)
    if args.json:
        print_json(rows)
        return 0
    table = []
    for r in rows:
        row = {"trace": os.path.basename(r["trace"]), "capacity": r["capacity"]}
        row.update(summary_row(r))
        row.pop("speedup", None)
        table.append(row)
    print(format_table(table))
    return 0
