"""``pagecast run``: run a program with live prefetching."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pagecast.cli._common import add_cold_option, add_json_flag, apply_cold, format_table, print_json
from pagecast.cli._options import add_policy_option
from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.launch.request import Backends, LiveTuning, PredictionSource, RunRequest

if TYPE_CHECKING:
    from pagecast.launch.launcher import RunReport


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run a program and prefetch its pages live (policy, learned model or schedule replay)",
        description=(
            "Start the program, stream its page faults live (perf_event_open), feed them to a predictor in a "
            "separate process, and prefetch file-backed pages ahead of the program with posix_fadvise(WILLNEED) "
            "(the page cache is shared); anonymous pages through a preloaded shim that calls madvise(MADV_POPULATE_WRITE) inside the program. --schedule replays an earlier run's pages paced by the faults this run "
            "takes. Writes a trace of faults and PREFETCH rows (late/useless flagged) and prints a summary with "
            "the fault-seen -> prefetch-issued latency. The program's output and exit status pass through "
            "whatever happens to pagecast's helpers: if the predictor or the fault collector dies (even while a "
            "model loads), the program runs to completion unprefetched, one warning line names the helper, and "
            "pagecast exits with the program's status."
        ),
        epilog="example: pagecast run --schedule train.sched.parquet -o live.parquet -- ./prog args",
    )
    _add_source_args(p)
    p.add_argument(
        "--plan-status",
        metavar="FILE",
        help="--plan: the prefetcher writes its report (pages issued, per-file status; JSON) to FILE when it stops",
    )
    p.add_argument(
        "--pager",
        action="append",
        metavar="FILE:BUDGET",
        help="serve FILE through the userfaultfd pager with a memory budget (e.g. weights.bin:256M), "
        "prefetching with --policy; repeatable",
    )
    p.add_argument(
        "--pack",
        action="append",
        metavar="PACK",
        help="page pack (pagecast pager pack): serve its file through the userfaultfd pager and stream the "
        "pack's pages into the program's mapping ahead of it (one sequential read instead of scattered "
        "faults); pages not in it fault as usual. A stale pack (file changed) is skipped with a "
        "warning. Repeatable; combine with --pager FILE:BUDGET to cap memory (default: the whole file)",
    )
    p.add_argument("-o", "--output", help="trace file to write (faults + PREFETCH rows)")
    _add_live_args(p)
    p.add_argument("--out-dir", default="pagecast-run", help="--cuda: output directory")
    _add_memory_args(p)
    add_cold_option(p)
    add_json_flag(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...: the program to run")
    p.set_defaults(func=run)


def _add_source_args(p: argparse.ArgumentParser) -> None:
    """Where the predictions come from: one of a policy, a model, a schedule, CUDA or a plan."""
    src = p.add_mutually_exclusive_group()
    add_policy_option(
        src,
        list_defaults=False,
        help="classic prefetcher (pagecast.policies: nextline, stride:degree=8, leap, markov, ...; with --pager: a pager policy)",
    )
    src.add_argument("--model", help="learned model file (pagecast train) used per fault")
    src.add_argument(
        "--schedule",
        help="schedule to replay: a schedule file (pagecast predict) or the trace of an earlier run (pagecast record / run -o); regions are matched to this run",
    )
    src.add_argument(
        "--cuda", action="store_true", help="CUDA managed memory: prefetch through the CUDA shim (cuda helper)"
    )
    src.add_argument(
        "--plan",
        metavar="PLAN",
        help="plan file (pagecast plan): per file, the strategy learned from recordings. The program is "
        "exec'd by a native launcher within milliseconds and keeps its pid, stdio, signals and exit "
        "status; warm/stream prefetching runs beside it at low priority; pack and per-fault files "
        "go through the live machinery. A corrupt plan or a changed file costs one warning line",
    )


def _add_live_args(p: argparse.ArgumentParser) -> None:
    """The live loop's tuning: how predictions are issued, collected and throttled."""
    p.add_argument(
        "--lookahead", type=int, default=8192, help="schedule replay: pages issued ahead of the program's position"
    )
    p.add_argument(
        "--gap", type=int, default=4, help="merge predicted pages at most this many pages apart into one read"
    )
    p.add_argument("--threads", type=int, default=2, help="prefetch issuing threads")
    p.add_argument("--top-k", type=int, default=10, help="--model: pages predicted per fault")
    p.add_argument(
        "--no-throttle",
        action="store_true",
        help="--policy/--model: always issue every prediction; by default the pages issued per fault "
        "drop while few prefetched pages are used (accuracy < 0.40) and grow back above 0.75",
    )
    p.add_argument(
        "--poll-ms",
        type=int,
        default=5,
        help="collector poll period in ms: bounds the fault -> daemon delay; shorter costs more CPU (default: 5)",
    )
    p.add_argument(
        "--no-anon",
        action="store_true",
        help="do not preload the shim that prefetches anonymous memory inside the program "
        "(madvise MADV_POPULATE_WRITE; on by default with a predictor)",
    )
    p.add_argument(
        "--nice",
        type=int,
        default=10,
        help="niceness added to pagecast's daemon and collector while the program runs (root only; default 10). "
        "Use 0 for CPU-bound programs: a niced daemon then sees their faults too late to prefetch",
    )
    p.add_argument(
        "--no-fast",
        action="store_true",
        help="replay, nextline and stride run natively inside the collector by default (fault -> fadvise "
        "in microseconds, file pages only); this forces the Python predictor process instead",
    )


def _add_memory_args(p: argparse.ArgumentParser) -> None:
    """--memory: the program under a memory limit."""
    p.add_argument(
        "--memory",
        metavar="LIMIT",
        help="run the program in a memory cgroup of LIMIT bytes (384M, 1G; page cache included, as the kernel "
        "charges it); with --plan, a memory plan (pagecast plan --memory) is applied beside it: keep set "
        "pinned, chunks evicted right after use, prefetch paced to the room left. The report (--json: "
        "'memory') gives the limit, refaults, major faults, bytes read, peak usage and wall time",
    )
    p.add_argument(
        "--backend",
        choices=("kernel", "pager"),
        default=None,
        help="--memory --plan: who applies the plan (default: the plan's own choice, kernel unless "
        "plan --memory --measure timed the pager faster). kernel: a controller beside the program locks the "
        "keep set in the page cache, pages streamed chunks out after use and prefetches with fadvise. pager: the "
        "program's mmaps of the plan's files are served by the userfaultfd pager (LD_PRELOAD) into a page budget of "
        "what the limit leaves after the plan's reserve, prefetch window and a margin: keep pages pinned, streamed "
        "chunks evicted right after use, the next chain prefetched, CLOCK for the rest; files read with read() stay "
        "with the kernel (one warning)",
    )


def _pager_specs(args: argparse.Namespace) -> list[tuple[str, int]]:
    from pagecast.util.sizes import parse_size

    specs = []
    for s in args.pager or ():
        path, sep, budget = s.rpartition(":")
        if not sep or not path:
            raise PagecastError(f"--pager wants FILE:BUDGET, got {s!r}")
        size = parse_size(budget, "budget")
        if size >= 1 << 64:
            raise PagecastError(f"--pager {s}: budget {budget} is too large: at most 2^64-1 bytes")
        specs.append((path, size))
    return specs


def request_from_args(args: argparse.Namespace) -> RunRequest:
    """The command line as a ``RunRequest`` (parsing only: the launcher checks the rest)."""
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if args.plan:
        kind = "plan"
    elif args.cuda:
        kind = "cuda"
    else:
        kind = next((k for k in ("schedule", "model", "policy") if getattr(args, k)), "none")
    source = PredictionSource(
        kind,
        policy=args.policy,
        model=args.model,
        schedule=args.schedule,
        plan=args.plan,
        top_k=args.top_k,
        lookahead=args.lookahead,
        throttle=not args.no_throttle,
    )
    backends = Backends(
        anon=not args.no_anon,
        pager=_pager_specs(args),
        packs=list(args.pack or ()),
        fast=False if args.no_fast else None,
    )
    tuning = LiveTuning(threads=args.threads, gap=args.gap, poll_ms=args.poll_ms, nice=args.nice)
    return RunRequest(
        cmd,
        source,
        backends,
        Path(args.output) if args.output else None,
        args.json,
        tuning,
        cuda_out_dir=Path(args.out_dir),
        plan_status=args.plan_status,
    )


def run(args: argparse.Namespace) -> int:
    apply_cold("run", args.cold)
    if args.memory:
        return _run_memory(args)
    from pagecast.launch.launcher import launch

    req = request_from_args(args)
    report = launch(req, warn=lambda line: print(line, file=sys.stderr))
    if report.reported:
        return report.exit_status
    if args.json:
        print_json(report.to_dict())
    else:
        _print_text(report, req)
    return report.exit_status


def _print_text(report: RunReport, req: RunRequest) -> None:
    """The human-readable summary, on stderr (stdout is the program's)."""
    if report.mode == "pager":
        if not req.backends.packs:
            return  # the pager's counters are in the trace (-o) and the JSON report
        keys = [
            "path",
            "faults",
            "pack_pages",
            "pack_installed",
            "pack_skipped",
            "pack_deferred",
            "bytes_read",
            "pack_bytes_read",
            "pack_done_ns",
            "pack_state",
        ]
        print(format_table([{k: st.get(k) for k in keys} for st in report.pager["regions"]], keys), file=sys.stderr)
    elif report.mode == "cuda":
        from pagecast.collect.cuda import print_summary

        print_summary(report.cuda, False)
    elif report.mode == "live":
        rows = []
        for k, v in report.live.items():
            if k == "warning":
                continue  # printed as its own line
            if isinstance(v, dict):
                v = ", ".join(f"{a}={b}" for a, b in v.items())
            elif isinstance(v, list):
                v = " ".join(map(str, v))
            rows.append({"field": k, "value": v})
        print(format_table(rows), file=sys.stderr)


def _run_memory(args: argparse.Namespace) -> int:
    from pagecast.launch.memlimit import run_under_limit
    from pagecast.plan.memory_format import is_memory_plan

    others = [o for o in ("policy", "model", "schedule", "pager", "pack", "output") if getattr(args, o)]
    if others or args.cuda:
        raise PagecastError(f"--memory goes with --plan only, not --{(others or ['cuda'])[0]}")
    if args.backend == "pager" and not args.plan:
        raise PagecastError(
            "--memory --backend pager applies a memory plan: give it one with --plan (pagecast plan --memory)"
        )
    if args.plan and not is_memory_plan(args.plan) and os.path.exists(args.plan):
        raise PagecastError(
            f"--memory --plan wants a memory plan (pagecast plan --memory), not a cold-start plan: {args.plan}"
        )
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    report = run_under_limit(
        cmd,
        args.memory,
        args.plan,
        warn=lambda line: print(line, file=sys.stderr),
        stdout=2 if args.json else None,
        backend=args.backend,
    )
    if args.json:
        print_json(report.to_dict())
    else:
        m = report.memory
        print(
            f"pagecast run: memory limit {m['limit_bytes'] >> 20} MiB: wall {m['wall_s']:.3f} s, read "
            f"{(m['read_bytes'] or 0) >> 20} MiB, refaults {m['refaults']}, major faults {m['major_faults']}, "
            f"peak {m['peak_bytes'] >> 20} MiB" + ("" if m["limit_reached"] else " (the limit was never reached)"),
            file=sys.stderr,
        )
        c = report.controller
        if c and not c.get("error"):
            print(
                f"pagecast run: plan: locked {c.get('pinned_bytes', 0) >> 20} MiB of the keep set"
                + (f" ({c['unpinned_bytes'] >> 20} MiB let go)" if c.get("unpinned_bytes") else "")
                + f", evicted after use {c.get('pageout_bytes', 0) >> 20} MiB, prefetched "
                f"{c.get('prefetch_bytes', 0) >> 20} MiB"
                + (
                    " (following stopped: evictions were regretted)" if c.get("regrets") and c.get("stream_off") else ""
                ),
                file=sys.stderr,
            )
        for st in (report.pager or {}).get("regions", []):
            print(
                f"pagecast run: pager: {st['path']}: faults {st['faults']}, prefetched {st['prefetched']}, read "
                f"{st['bytes_read'] >> 20} MiB, kept {st['plan_keep_resident'] * PAGE_SIZE >> 20} MiB, evicted after "
                f"use {st['plan_after_use']}",
                file=sys.stderr,
            )
    return report.exit_status
