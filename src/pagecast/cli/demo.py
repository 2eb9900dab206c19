"""``pagecast demo``: the whole loop on a real program in a few minutes, no arguments."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pagecast.cli._common import print_json, progress


def register(sub: argparse._SubParsersAction) -> None:
    from pagecast.cli.bench import add_bench_args

    p = sub.add_parser(
        "demo",
        help="build a sparse-inference workload, record it, learn it, and prefetch it live against the kernel",
        description=(
            "End to end on this machine: build the sparse-weights workload (C), create its weights file once "
            "(~/.cache/pagecast, reused), record cold training runs with eight prompts, train a model on them "
            "(pagecast train), then benchmark on a different prompt with a cold page cache every run: the "
            "kernel's strategies, pagecast's classic prefetchers, schedule replay, the learned model, a page pack "
            "of the pages at least two training runs touched, streamed by the userfaultfd pager, a planned run (pagecast plan on the training runs, then pagecast run --plan), the oracle and a warm cache. Prints the table and where the report and plot are. A few minutes on 2 cores."
        ),
    )
    add_bench_args(p, runs=5, size_mib=1024)
    p.add_argument(
        "--quick", action="store_true", help="smaller and faster: 256 MiB weights, 2 runs, 1 epoch, one classic policy"
    )
    p.add_argument(
        "--no-memory",
        action="store_true",
        help="drop the rows under a memory limit (the workload's dense pass: the kernel alone and a memory plan "
        "through each backend, at --memory, default 'auto': the program's own memory and 60%% of the weights)",
    )
    p.add_argument(
        "--no-plan",
        action="store_true",
        help="drop the planned row (pagecast plan on the training runs, then run --plan on the test prompt)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pagecast.bench import sparse_weights as wl
    from pagecast.bench.harness import run_bench
    from pagecast.bench.planned_rows import planned_rows
    from pagecast.cli._options import policy_texts
    from pagecast.cli.bench import DEFAULT_POLICIES, combine, config_from_args, memory_extra, print_report
    from pagecast.live.sources import default_min_runs

    if args.quick:
        args.size_mib = min(args.size_mib, 256)
        args.runs = min(args.runs, 2)
        args.epochs = 1
        args.policy = policy_texts(args, DEFAULT_POLICIES)[:1] or [""]
    cfg = config_from_args(args, "pagecast-demo")
    if args.no_memory:
        args.memory = None
    elif not args.memory:
        args.memory = _auto_memory()
    plan = not args.no_plan
    n_steps = (
        6
        + len(cfg.train_prompts)
        + (1 if cfg.pack else 0)
        + (1 if plan else 0)
        + (4 if args.memory else 0)
        + cfg.runs
        * (
            7
            + len(cfg.policies)
            + (0 if args.no_learned else 1)
            + (3 if cfg.pack else 0)
            + (1 if plan else 0)
            + (3 if args.memory else 0)
        )
    )
    t0 = time.time()
    # a terminal gets the bar; a log file one line a step (a bar's carriage returns garble it)
    say = (lambda m: print(f"pagecast demo: {m}", file=sys.stderr)) if not sys.stderr.isatty() else None
    with progress(total=n_steps, desc="demo", unit="step", disable=say is not None) as bar:

        def log(msg: str) -> None:
            bar.set_description_str(msg[:70])
            bar.update(1)
            if say:
                say(msg)

        extra = None
        if plan:
            min_runs = cfg.min_runs if cfg.min_runs is not None else default_min_runs(len(cfg.train_prompts))

            def workload(w: Path) -> wl.WorkloadConfig:
                return wl.WorkloadConfig(
                    w, prompt=cfg.test_prompt, tokens=cfg.tokens, advice="normal", extra=list(cfg.extra)
                )

            extra = planned_rows(cfg.out_dir, workload, min_runs, log)
        report = run_bench(cfg, log=log, extra_rows=combine(extra, memory_extra(cfg, args, log)))
    if args.json:
        print_json(report)
        return 0
    print(
        f"\npagecast demo: sparse inference over a {report['weights_mib']} MiB mmapped weights file, "
        f"{cfg.tokens} tokens, prompt {cfg.test_prompt} (trained on prompts {', '.join(map(str, cfg.train_prompts))}); "
        f"program wall time, median of {cfg.runs} cold runs:\n"
    )
    print_report(report, False)
    print(f"(demo took {time.time() - t0:.0f} s)")
    return 0


def _auto_memory() -> str | None:
    """'auto' where a memory cgroup can be made here; else None, and one line saying why."""
    import os

    from pagecast.errors import PagecastError
    from pagecast.util.memcg import find_hierarchy

    try:
        parent = find_hierarchy().parent
    except PagecastError as e:
        print(f"pagecast demo: the rows under a memory limit are skipped: {e}", file=sys.stderr)
        return None
    if not os.access(parent, os.W_OK):
        print(
            f"pagecast demo: the rows under a memory limit are skipped: cannot create cgroups in {parent} "
            "(run as root or in a delegated cgroup)",
            file=sys.stderr,
        )
        return None
    return "auto"
