"""``pagecast info``: counts by kind, regions, unique pages, duration, fault rate."""

from __future__ import annotations

import argparse
import dataclasses

from pagecast.cli._common import add_json_flag, format_table, print_json, progress, warn_missing_reads


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="summarise a trace: event counts, regions, unique pages, duration, fault rate, file page sets",
        description="Summarise a trace in one streaming pass (bounded memory): rows per event kind, "
        "the busiest regions with pages touched out of their length, unique pages, duration "
        "and fault rate; then per file the pages the run used (through mappings and read-family "
        "calls, from the page-set rows of `pagecast record`), their bytes and the fraction of the "
        "file they are. A --faults-only trace has only its faults to go by: the files table says so.",
    )
    p.add_argument("trace", help="trace file (.parquet)")
    p.add_argument("--top", type=int, default=20, help="regions to list, busiest first (default 20)")
    p.add_argument(
        "--files", type=int, default=30, help="files to list, most pages used first (default 30; --json: all)"
    )
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pagecast.report.summary import summarize
    from pagecast.trace import open_trace

    t = open_trace(args.trace)
    warn_missing_reads("info", args.trace)
    with progress(total=t.num_rows, desc="rows", unit="row") as bar:
        s = summarize(t, top=args.top, on_rows=bar.update)
    if args.json:
        print_json(s.to_dict())
        return 0
    head = {k: v for k, v in s.to_dict().items() if k not in ("kinds", "top_regions", "meta", "files")}
    print(format_table([{"field": k, "value": "-" if v is None else v} for k, v in head.items()]))
    for k, v in s.meta.items():
        if k == "gem5_stats":
            from pagecast.importers.gem5_stats import format_summary

            print("\n".join(format_summary(v)))
        else:
            print(f"{k}: {v}")
    print()
    print(format_table([{"kind": k, "rows": v} for k, v in s.kinds.items()]))
    print()
    print(format_table([{k: "-" if v is None else v for k, v in dataclasses.asdict(r).items()} for r in s.top_regions]))
    if s.files:
        print()
        what = "page-set rows" if s.files_source == "pageset" else "fault rows only (a --faults-only trace)"
        print(
            f"files: pages used by the run ({what}), {len(s.files)} files, {sum(f.pages_used for f in s.files)} pages"
        )
        rows = [
            {
                "file": f.file,
                "pages_used": f.pages_used,
                "bytes": f.bytes_used,
                "file_pages": f.file_pages,
                "used_pct": "-" if f.fraction is None else round(100 * f.fraction, 2),
                "mapped": f.mapped_pages,
                "read": f.read_pages,
            }
            for f in s.files[: args.files]
        ]
        print(format_table(rows))
    return 0
