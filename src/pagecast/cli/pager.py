"""``pagecast pager``: run unmodified programs on the userfaultfd pager, inspect its traces,
and build prefetch tables from schedules or predictors."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from pagecast.cli._common import add_json_flag, format_table, print_json
from pagecast.cli._options import add_policy_option
from pagecast.errors import PagecastError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pager",
        help="run a program with files on the userfaultfd pager (budget + batch prefetch)",
        description=(
            "A user-space pager: files named FILE:BUDGET are mapped (by an LD_PRELOAD shim) into "
            "anonymous memory served by userfaultfd from the file, with at most BUDGET resident, "
            "dirty pages written back, and a prefetch policy mapping a batch per fault."
        ),
    )
    ps = p.add_subparsers(dest="pager_cmd", metavar="SUBCOMMAND")

    r = ps.add_parser(
        "run",
        help="run CMD with files on the pager",
        description="Run CMD unmodified with each FILE's mmap served by the pager. Example: "
        "pagecast pager run weights.bin:1M --policy sparse -o t.parquet -- ./llm weights.bin",
    )
    r.add_argument("specs", help="FILE:BUDGET[,FILE:BUDGET] (budget in bytes, K/M/G, or pages as 16p)")
    _run_options(r)
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the program and its arguments, after --")
    r.set_defaults(func=_run)

    s = ps.add_parser(
        "stats", help="summarise a pager trace", description="Counts per region of a trace written by `pager run -o`."
    )
    s.add_argument("trace")
    add_json_flag(s)
    s.set_defaults(func=_stats)

    t = ps.add_parser(
        "table",
        help="build a prefetch table (policy table:FILE) from a schedule or a predictor",
        description="Turn a schedule (from `pagecast predict` etc.) or any registered pagecast prefetcher, "
        "run offline over a recorded trace, into a page→pages table the native pager replays per fault.",
    )
    t.add_argument("--trace", required=True, help="trace whose demand stream the schedule/predictor refers to")
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument("--schedule", help="schedule file (Parquet)")
    add_policy_option(
        src,
        deprecated=["--prefetcher"],
        list_defaults=False,
        help="a registered pagecast prefetcher, run offline over the trace (e.g. stride:degree=8)",
    )
    t.add_argument("--region", type=int, default=0, help="region id in the trace (default 0)")
    t.add_argument("--file", help="data file the table is for (default: the region's path)")
    t.add_argument("-o", "--out", required=True)
    add_json_flag(t)
    t.set_defaults(func=_table)
    k = ps.add_parser(
        "pack",
        help="build a page pack (learned cold start) from earlier runs",
        description="Write the pages that earlier runs of a program used from FILE, in first-use order, "
        "contiguously into a pack (with FILE's size/mtime/ctime/inode, so a stale pack is refused). "
        "`pagecast run --pack P -- CMD` (or `pager run --pack P`) then streams it sequentially into the "
        "program's mapping ahead of the program. Several runs are merged in relative order (union of the "
        "pages at least --min-runs of them touched).",
        epilog="example: pagecast pager pack run1.parquet run2.parquet --file weights.bin -o weights.pack",
    )
    k.add_argument("runs", nargs="+", help="traces of earlier runs (pagecast record / run -o) or schedule files")
    k.add_argument("--file", help="data file to pack (default: the file the first run took most faults on)")
    k.add_argument("-o", "--out", required=True, help="pack file to write")
    k.add_argument(
        "--min-runs",
        type=int,
        default=None,
        metavar="N",
        help="keep the pages at least N of the runs touched: a page one input alone used is usually "
        "that input's own (default: 2 with 4 or more runs, else 1)",
    )
    add_json_flag(k)
    k.set_defaults(func=_pack)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _run_options(r: argparse.ArgumentParser) -> None:
    r.add_argument(
        "--policy",
        default="none",
        help="a policy the pager runs, in the spec grammar of pagecast simulate: none, nextline[:N], stride[:N], "
        "sparse[:N], table:FILE, or NAME:key=value,...; N pages per batch (default none). Deprecated: next[:N], "
        "nextline:N,before=0",
    )
    r.add_argument(
        "--pack", action="append", metavar="PACK", help="page pack to stream into its file's region (repeatable)"
    )
    r.add_argument("--learn", metavar="DIR", help="sparse policy: keep the learned page sets in DIR across runs")
    r.add_argument("-o", "--trace", metavar="T.parquet", help="write every served fault/prefetch/eviction as a trace")
    r.add_argument("--no-strict", action="store_true", help="if userfaultfd is unusable, run on ordinary mappings")
    r.add_argument(
        "--flush-ms",
        type=int,
        default=1000,
        metavar="MS",
        help="write dirty pages back every MS ms, bounding what a SIGKILL can lose (0: off; default 1000)",
    )
    add_json_flag(r)


def _run(args: argparse.Namespace) -> int:
    from pagecast.pager.runtime import parse_specs, run_pager

    # Options may also follow FILE:BUDGET; argparse's REMAINDER took them with the command.
    rest = list(args.cmd)
    if "--" in rest:
        i = rest.index("--")
        opts, cmd = rest[:i], rest[i + 1 :]
    else:
        opts, cmd = [], rest
    if opts:
        late = argparse.ArgumentParser(prog="pagecast pager run", add_help=False)
        _run_options(late)
        late_args, unknown = late.parse_known_args(opts)
        if unknown:
            raise PagecastError(f"unknown options before --: {' '.join(unknown)}")
        from pagecast.cli._validate import check_numbers

        check_numbers(late, late_args)  # the same up-front checks as options given before FILE:BUDGET
        for k, v in vars(late_args).items():
            if v != late.get_default(k):
                setattr(args, k, v)
    packs = []
    if args.pack:
        import sys

        from pagecast.pager.pack import usable_packs

        packs = [i.path for i in usable_packs(args.pack, warn=lambda m: print(m, file=sys.stderr))]
    res = run_pager(
        cmd,
        parse_specs(args.specs),
        policy=args.policy,
        trace_out=args.trace,
        learn_dir=args.learn,
        strict=not args.no_strict,
        flush_ms=args.flush_ms,
        packs=packs,
    )
    if args.json:
        print_json({"returncode": res.returncode, "regions": res.stats, "trace": str(res.trace) if res.trace else None})
    else:
        import sys

        cols = [
            "path",
            "faults",
            "prefetched",
            "prefetch_hits",
            "evictions",
            "writebacks",
            "max_resident",
            "service_ns_p50",
            "service_ns_p99",
        ]
        if res.stats:
            print(format_table([{c: s.get(c) for c in cols} for s in res.stats], cols), file=sys.stderr)
    import sys

    from pagecast.live.loop import exit_status

    for w in res.warnings:
        print(f"pagecast pager: warning: {w}", file=sys.stderr)
    if res.trace_error:
        print(f"pagecast pager: error: {res.trace_error}", file=sys.stderr)
    return exit_status(res.returncode)


def _pack(args: argparse.Namespace) -> int:
    from pagecast.live.sources import default_min_runs, load_replay
    from pagecast.pager.pack import pack_from_schedules

    scheds = [load_replay(r) for r in args.runs]
    file = args.file
    if not file:
        s0 = scheds[0]
        rows = {
            r.path: int(np.count_nonzero(s0.region == r.id))
            for r in s0.regions
            if r.kind == "file" and r.path and Path(r.path).exists()
        }
        if not rows or max(rows.values()) == 0:
            raise PagecastError(
                "no existing file with faults in the first run: name one with --file", path=args.runs[0]
            )
        file = max(rows, key=rows.get)
    if not Path(file).exists():
        raise PagecastError("no such file to pack", path=file)
    min_runs = args.min_runs if args.min_runs is not None else default_min_runs(len(scheds))
    if not 1 <= min_runs <= len(scheds):
        raise PagecastError(f"--min-runs must be between 1 and the number of runs ({len(scheds)}), got {min_runs}")
    info = pack_from_schedules(scheds, file, args.out, min_runs)
    out = {
        "pack": str(info.path),
        "file": info.source,
        "pages": info.npages,
        "bytes": info.nbytes,
        "runs": len(scheds),
        "min_runs": min_runs,
    }
    if args.json:
        print_json(out)
    else:
        print(format_table([out]))
    return 0


def _stats(args: argparse.Namespace) -> int:
    from pagecast.trace.reader import open_trace
    from pagecast.trace.schema import FLAG_WRITE, Kind

    path = Path(args.trace)
    if not path.exists():
        raise PagecastError("no such trace", path=path)
    tr = open_trace(path)
    c = tr.read(["region", "kind", "flags"])
    rows = []
    for reg in tr.regions:
        m = c["region"] == reg.id
        k, f = c["kind"][m], c["flags"][m]
        fault = k == int(Kind.FAULT)
        rows.append({
            "region": reg.id, "path": reg.path or reg.name,
            "faults": int((fault & ((f >> 4) & 0xF == 0)).sum()),
            "write_faults": int((fault & (f & FLAG_WRITE > 0)).sum()),
            "prefetched": int((k == int(Kind.PREFETCH)).sum()),
            "evictions": int((k == int(Kind.EVICT)).sum()),
            "written_back": int(((k == int(Kind.EVICT)) & ((f >> 4) & 0xF == 2)).sum()),
            "budget_pages": int(reg.extra.get("budget_pages", -1)),
        })  # fmt: skip
    if args.json:
        print_json(rows)
    else:
        print(format_table(rows))
    return 0


def _table(args: argparse.Namespace) -> int:
    from pagecast.pager.runtime import table_from_prefetcher, table_from_schedule, write_table
    from pagecast.trace.reader import open_trace

    tr = open_trace(args.trace)
    reg = tr.region(args.region)
    if reg is None:
        raise PagecastError(f"trace has no region {args.region}", path=args.trace)
    file = args.file or reg.path
    if not file:
        raise PagecastError("region has no file path: give --file", path=args.trace)
    npages = -(-Path(file).stat().st_size // reg.page_size) if Path(file).exists() else reg.pages
    if args.schedule:
        from pagecast.trace.schedule import read_schedule

        table = table_from_schedule(read_schedule(args.schedule), tr, args.region, npages)
    else:
        from pagecast.policies.spec import parse_policy_spec

        table = table_from_prefetcher(parse_policy_spec(args.policy).build(), tr, args.region, npages)
    write_table(args.out, table, file)
    info = {
        "table": args.out,
        "file": file,
        "pages": npages,
        "entries": int(len(table.pages)),
        "trigger_pages": int(np.count_nonzero(np.diff(table.offsets.astype(np.int64)))),
    }
    if args.json:
        print_json(info)
    else:
        print(format_table([info]))
    return 0
