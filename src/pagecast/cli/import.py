"""``pagecast import FORMAT SRC -o OUT``: convert another tool's trace into a pagecast trace or schedule."""

from __future__ import annotations

import argparse
from pathlib import Path

from pagecast.cli._common import add_json_flag, format_table, print_json, progress
from pagecast.errors import PagecastError, check_readable
from pagecast.importers import FORMATS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="convert another tool's trace (AI4Mem, lackey, ChampSim, MemAI, gem5, damo) into a pagecast trace",
        description="Convert a trace of another tool into a pagecast trace (addresses grouped into regions, "
        "region-relative pages), or a predictions/prefetch file into a schedule. Formats:\n"
        + "\n".join(f"  {k:20s} {v[1]} -> {v[2]}" for k, v in FORMATS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("format", choices=sorted(FORMATS), metavar="FORMAT", help="one of: " + ", ".join(FORMATS))
    p.add_argument("src", help="file to import (gem5: also an m5out directory)")
    p.add_argument("-o", "--output", required=True, help="trace (or schedule) to write, .parquet")
    p.add_argument(
        "--cpu-ghz", type=float, help="champsim/memai: convert cycles to ns at this clock (default: keep cycles)"
    )
    p.add_argument("--instructions", action="store_true", help="lackey: also import instruction fetches")
    p.add_argument("--no-dedupe", action="store_true", help="ai4mem: keep events repeated across snapshots")
    p.add_argument("--trace", help="schedules: the trace the predictions refer to (regions, demand stream)")
    p.add_argument("--loads", help="champsim-prefetch: the load trace the trace was imported from")
    p.add_argument("--stats", help="gem5: the run's stats.txt, summarised into the trace's metadata (pagecast info)")
    p.add_argument("--stats-only", action="store_true", help="gem5: SRC is a stats.txt; write a trace with no rows")
    p.add_argument(
        "--gpu-addresses",
        choices=("virtual", "physical"),
        default="virtual",
        help="gem5 GPU debug traces: GPUTLB lines (virtual, default) or GPUPort lines (physical)",
    )
    p.add_argument("--tick-freq", type=int, default=10**12, help="gem5 debug traces: ticks per second (default 1e12)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fmt = args.format
    # gem5 also takes an m5out/ directory (resolve_m5out picks the trace and stats.txt in it)
    src = Path(args.src) if fmt == "gem5" and Path(args.src).is_dir() else check_readable(args.src)
    size = src.stat().st_size
    if fmt == "ai4mem":
        from pagecast.importers.ai4mem import import_trace

        with progress(total=size, desc="read", unit="B") as bar:
            info = import_trace(src, args.output, dedupe=not args.no_dedupe, on_bytes=bar.update)
    elif fmt == "lackey":
        from pagecast.importers.lackey import import_trace

        with progress(total=2 * size, desc="read (2 passes)", unit="B") as bar:
            info = import_trace(src, args.output, instructions=args.instructions, on_bytes=bar.update)
    elif fmt == "champsim":
        from pagecast.importers.champsim import import_trace

        with progress(total=2 * size, desc="read (2 passes)", unit="B") as bar:
            info = import_trace(src, args.output, cpu_ghz=args.cpu_ghz, on_bytes=bar.update)
    elif fmt == "memai":
        from pagecast.importers.memai import import_trace

        info = import_trace(src, args.output, cpu_ghz=args.cpu_ghz)
    elif fmt == "gem5":
        from pagecast.importers.gem5_run import import_run, resolve_m5out

        src, stats, stats_only = resolve_m5out(src, args.stats)
        src = check_readable(src)
        with progress(total=2 * src.stat().st_size, desc="read (2 passes)", unit="B") as bar:
            info = import_run(
                src,
                args.output,
                stats=stats,
                stats_only=args.stats_only or stats_only,
                address=args.gpu_addresses,
                tick_freq=args.tick_freq,
                on_bytes=bar.update,
            )
    elif fmt == "damo":
        from pagecast.importers.damo import import_trace

        with progress(total=size, desc="read", unit="B") as bar:
            info = import_trace(src, args.output, on_bytes=bar.update)
    else:
        info = _import_schedule(args, src)
    if args.json:
        print_json(info)
    else:
        print(
            format_table([{"field": k, "value": str(v) if isinstance(v, (dict, list)) else v} for k, v in info.items()])
        )
    return 0


def _import_schedule(args: argparse.Namespace, src: Path) -> dict:
    from pagecast.trace import open_trace, write_schedule

    trace = open_trace(args.trace) if args.trace else None
    if args.format == "ai4mem-predictions":
        from pagecast.importers.ai4mem_predictions import attach_triggers, read_predictions_csv

        sched = read_predictions_csv(src)
        if trace is not None:
            sched = attach_triggers(sched, trace)
    else:
        from pagecast.importers.champsim import read_prefetch_file

        if trace is None or not args.loads:
            raise PagecastError("champsim-prefetch needs --trace T.parquet and --loads LOADS (the imported load trace)")
        sched = read_prefetch_file(src, trace, args.loads)
    write_schedule(args.output, sched)
    return {
        "schedule": str(args.output),
        "rows": len(sched),
        "with_triggers": bool(len(sched) and sched.trigger.min() >= 0),
        "unmapped_rows": int((sched.region < 0).sum()),
    }
