"""``pagecast heatmap``: time × page picture of a trace, per region."""

from __future__ import annotations

import argparse

from pagecast.cli._common import add_json_flag, print_json, progress
from pagecast.errors import PagecastError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "heatmap",
        help="plot time × page access heatmaps of a trace's busiest regions (PNG)",
        description="Draw how often each page of a region was touched over time (log colour scale), one panel "
        "per region: the busiest regions by default, or those given with --region. Streams the trace.",
    )
    p.add_argument("trace", help="trace file (.parquet)")
    p.add_argument("-o", "--output", required=True, help="image to write (.png, .svg, .pdf)")
    p.add_argument("--region", type=int, action="append", help="region id to plot (repeatable)")
    p.add_argument("--top", type=int, default=4, help="without --region: plot the N busiest regions (default 4)")
    p.add_argument("--time-bins", type=int, default=300)
    p.add_argument("--page-bins", type=int, default=300)
    p.add_argument("--kind", action="append", help="only these event kinds (e.g. fault_major; repeatable)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pagecast.report.heatmap import HeatmapConfig, plot
    from pagecast.trace import Kind, open_trace

    kinds = None
    if args.kind:
        try:
            kinds = [int(Kind.parse(k)) for k in args.kind]
        except ValueError as e:
            raise PagecastError(str(e)) from None
    if args.time_bins < 1 or args.page_bins < 1 or args.top < 1:
        raise PagecastError("--time-bins, --page-bins and --top must be positive")
    cfg = HeatmapConfig(
        regions=args.region, top=args.top, time_bins=args.time_bins, page_bins=args.page_bins, kinds=kinds
    )
    n = open_trace(args.trace).num_rows
    with progress(total=2 * n, desc="rows", unit="row") as bar:
        info = plot(args.trace, args.output, cfg, on_rows=bar.update)
    if args.json:
        print_json(info)
    else:
        print(f"wrote {info['output']} (regions {info['regions']}, {info['events']:,} events)")
    return 0
