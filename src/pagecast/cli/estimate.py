"""``pagecast estimate``: run time of a fast/slow tier placement by differential tracing."""

from __future__ import annotations

import argparse

import numpy as np

from pagecast.cli._common import add_json_flag, format_table, print_json
from pagecast.errors import PagecastError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimate",
        help="estimate a tiered-memory placement's run time from an all-slow/all-fast trace pair",
        description=(
            "Estimate the run time of a program if the given pages sat in the fast memory tier. "
            "With two traces (the program run with all data in the slow tier, then in the fast tier) "
            "each matching window is estimated as T_d - (T_d - T_h) * N_h / N (differential tracing). "
            "With one trace a per-access latency model gives T_d and T_h."
        ),
        epilog="example: pagecast estimate slow.parquet fast.parquet --fraction 0.1 --pages 0:0-256",
    )
    p.add_argument("traces", nargs="+", metavar="TRACE", help="SLOW FAST trace pair, or one trace (cost model)")
    p.add_argument(
        "--pages", action="append", default=[], metavar="R:S-E", help="pages S..E-1 of region R are fast (repeatable)"
    )
    p.add_argument(
        "--addr",
        action="append",
        default=[],
        metavar="LO-HI",
        help="virtual address range of the recorded run that is fast (repeatable)",
    )
    p.add_argument(
        "--fraction",
        type=float,
        default=None,
        metavar="F",
        help="the hottest fraction F of touched pages (over the whole run) is fast",
    )
    p.add_argument(
        "--window-mode",
        choices=["accesses", "phases"],
        default="accesses",
        help="match windows by demand-row count (default) or by KERNEL phase markers",
    )
    p.add_argument("--window", type=int, default=10_000, metavar="N", help="demand rows per window (default 10000)")
    p.add_argument("--slow-ns", type=float, default=100.0, help="single trace: slow tier ns per access (100)")
    p.add_argument("--fast-ns", type=float, default=30.0, help="single trace: fast tier ns per access (30)")
    p.add_argument(
        "--sample-period",
        type=float,
        default=None,
        help="single trace: accesses per trace row (default: trace metadata or 1)",
    )
    p.add_argument(
        "--timestamps",
        choices=["compute", "slow"],
        default="compute",
        help="single trace: timestamps are compute time only (default) or an all-slow run",
    )
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pagecast.gym.estimator import (
        CostModel,
        WindowConfig,
        Windows,
        load_demand,
        parse_address_range,
        parse_page_range,
    )

    if len(args.traces) > 2:
        raise PagecastError(f"give one trace or a slow/fast pair, not {len(args.traces)} traces")
    if not args.pages and not args.addr and args.fraction is None:
        raise PagecastError("no placement given (use --pages, --addr or --fraction)")
    page_ranges = [parse_page_range(s) for s in args.pages]
    addr_ranges = [parse_address_range(s) for s in args.addr]
    cfg = WindowConfig(args.window_mode, args.window)
    if len(args.traces) == 2:
        w = Windows.from_pair(args.traces[0], args.traces[1], cfg)
    else:
        d = load_demand(args.traces[0])
        period = args.sample_period
        if period is None:
            from pagecast.trace.reader import open_trace

            period = float(open_trace(args.traces[0]).meta.get("sample_period", 1.0))
        w = Windows.from_single(d, cfg, CostModel(args.slow_ns, args.fast_ns, period, args.timestamps))
    mask = np.zeros(w.n_units, dtype=bool)
    if page_ranges:
        mask |= w.mask_page_ranges(page_ranges)
    if addr_ranges:
        mask |= w.mask_address_ranges(addr_ranges)
    if args.fraction is not None:
        mask |= w.mask_hottest(args.fraction)
    est = w.estimate(mask)
    slow, fast = w.all_slow_time, w.all_fast_time
    fast_acc = int((w.count * mask[w.unit]).sum())
    res = {
        "estimated_ns": est,
        "all_slow_ns": slow,
        "all_fast_ns": fast,
        "speedup_vs_slow": slow / est if est else float("nan"),
        "share_of_possible_gain": (slow - est) / (slow - fast) if slow != fast else float("nan"),
        "fast_pages": int(mask.sum()),
        "touched_pages": w.n_units,
        "fast_bytes": int(mask.sum()) * w.page_size,
        "fast_access_share": fast_acc / max(int(w.n.sum()), 1),
        "windows": w.n_windows,
        "window_matching": w.matched,
        "mode": w.info.get("mode"),
    }
    if args.json:
        print_json(res)
        return 0
    rows = [
        {"placement": "all-slow", "time_ms": slow / 1e6},
        {"placement": "estimated", "time_ms": est / 1e6},
        {"placement": "all-fast", "time_ms": fast / 1e6},
    ]
    print(format_table(rows))
    print(
        f"\n{res['fast_pages']:,} of {w.n_units:,} touched pages fast ({res['fast_bytes'] / 2**20:.2f} MiB), "
        f"serving {100 * res['fast_access_share']:.1f}% of accesses; speedup {res['speedup_vs_slow']:.3f}x, "
        f"{100 * res['share_of_possible_gain']:.1f}% of the all-fast gain; "
        f"{w.n_windows} windows ({w.matched} matching, {w.info.get('mode')} mode)"
    )
    return 0
