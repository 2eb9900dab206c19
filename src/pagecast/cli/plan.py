"""``pagecast plan``: learn from recordings what to prefetch before a program runs, per file."""

from __future__ import annotations

import argparse
import sys

from pagecast.cli._common import add_json_flag, format_table, print_json, progress

NOT_BUILT = ("note: every file is 'warm' (pages at least --min-runs runs used) or 'nothing'; choosing between "
             "warm, stream, pack and per-fault by predicted time (simulator + device model, checked "
             "leave-one-run-out) is not built yet")  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan", help="learn a per-file prefetch plan from recordings, for `pagecast run --plan`",
        description="Read recordings of the same program on different inputs (pagecast record) and write a plan: "
                    "for every file the runs used, the pages at least --min-runs of them used, as merged ranges in "
                    "file order, to warm into the page cache before the program needs them ('warm'), or 'nothing' "
                    "when the runs share no page. Each file's identity (size, mtime, ctime, inode, device) is stored "
                    "so a file changed since is skipped with a warning. " + NOT_BUILT + ".",
        epilog="example: pagecast plan run1.parquet run2.parquet run3.parquet -o prog.plan --explain && "
               "pagecast run --plan prog.plan -- ./prog args",
    )
    p.add_argument("traces", nargs="*", help="recordings (.parquet) of the program")
    p.add_argument("-o", "--output", help="plan file to write")
    p.add_argument("--show", metavar="PLAN", help="print an existing plan instead (table; --json: the JSON view)")
    p.add_argument("--min-runs", type=int, default=None,
                   help="keep pages used by at least this many recordings (default: all but one, at least 1)")
    p.add_argument("--depth", type=int, default=2, help="reader threads = requests in flight while warming (default 2)")
    p.add_argument("--chunk-kib", type=int, default=1024, help="largest single read request in KiB (default 1024)")
    p.add_argument("--explain", action="store_true", help="print each file's strategy and the reason (stderr)")
    add_json_flag(p)
    p.set_defaults(func=run)


def show(path: str, as_json: bool) -> int:
    from pagecast.plan.format import read_plan

    doc = read_plan(path)
    if as_json:
        print_json({"plan": path, **doc.to_dict()})
        return 0
    rows = [{"file": f.path, "strategy": f.strategy, "pages": f.pages, "ranges": len(f.ranges), "depth": f.depth,
             "arg": f.arg or "-", "reason": f.reason} for f in doc.files]  # fmt: skip
    print(format_table(rows) if rows else f"{path}: a plan with no files")
    return 0


def run(args: argparse.Namespace) -> int:
    from pagecast.errors import PagecastError
    from pagecast.plan.format import write_plan
    from pagecast.plan.shared_pages import PlanConfig, plan_from_recordings

    if args.show:
        if args.traces or args.output:
            raise PagecastError("--show PLAN takes no recordings and no -o")
        return show(args.show, args.json)
    if not args.traces or not args.output:
        raise PagecastError("give recordings and -o PLAN (or --show PLAN)")

    cfg = PlanConfig(min_runs=args.min_runs, depth=args.depth, chunk_kib=args.chunk_kib)
    with progress(desc="rows", unit="row") as bar:
        doc = plan_from_recordings(args.traces, cfg, on_rows=bar.update)
    write_plan(args.output, doc)
    rows = [{"file": f.path, "strategy": f.strategy, "pages": f.pages, "ranges": len(f.ranges), "reason": f.reason}
            for f in doc.files]  # fmt: skip
    if args.explain:
        print(format_table(rows, ["file", "strategy", "pages", "ranges", "reason"]) if rows else "(no files)", file=sys.stderr)
        print(NOT_BUILT, file=sys.stderr)
    if args.json:
        print_json({"plan": args.output, **doc.to_dict()})
    else:
        warm = [f for f in doc.files if f.strategy == "warm"]
        print(f"{args.output}: {len(doc.files)} files, {len(warm)} to warm ({sum(f.pages for f in warm)} pages)")
    return 0
