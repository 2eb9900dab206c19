"""``pagecast bench``: live prefetching vs the kernel's strategies, cold cache, same run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pagecast.cli._common import add_json_flag, format_table, print_json
from pagecast.cli._options import add_policy_option, policy_texts
from pagecast.errors import PagecastError, check_readable

DEFAULT_POLICIES = "nextline,markov"


def add_bench_args(p: argparse.ArgumentParser, *, runs: int = 3, size_mib: int = 1024) -> None:
    p.add_argument("--out", default=None, help="output directory (traces, schedule, model, bench.json, bench.png)")
    p.add_argument("--weights", help="weights file to use (default: generated once in ~/.cache/pagecast)")
    p.add_argument(
        "--size-mib", type=int, default=size_mib, help=f"size of the generated weights file (default: {size_mib})"
    )
    p.add_argument(
        "--runs", type=int, default=runs, help=f"cold runs per strategy; medians are reported (default: {runs})"
    )
    p.add_argument("--tokens", type=int, default=4, help="tokens per inference run (default: 4)")
    p.add_argument(
        "--train-prompts",
        default="101-108",
        help="prompts of the recorded training runs: a comma-separated list, ranges allowed (default: 101-108)",
    )
    p.add_argument(
        "--min-runs",
        type=int,
        default=None,
        metavar="N",
        help="replay schedule and page pack keep the pages at least N training runs touched "
        "(default: 2 with 4 or more training runs, else 1)",
    )
    p.add_argument(
        "--prompt", type=int, default=7, help="prompt of the benchmarked runs, not among the training ones (default: 7)"
    )
    add_policy_option(
        p,
        repeated=True,
        default=DEFAULT_POLICIES,
        deprecated=["--policies"],
        list_defaults=False,
        help="a classic pagecast prefetcher to include, e.g. stride:degree=8; repeat the flag for several "
        "(a comma list works too when no option value contains a comma; --policy '' for none)",
    )
    p.add_argument("--model", help="use this trained model instead of training one")
    p.add_argument("--no-learned", action="store_true", help="skip training and the learned-model row")
    p.add_argument("--epochs", type=int, default=3, help="training epochs for the learned model (default: 3)")
    p.add_argument(
        "--lookahead", type=int, default=8192, help="replay: pages issued ahead of the program (default: 8192)"
    )
    p.add_argument(
        "--no-pack",
        action="store_true",
        help="skip the page-pack rows (userfaultfd pager streaming a sequential pack of the training runs' pages)",
    )
    p.add_argument(
        "--pack-defer",
        type=int,
        default=None,
        metavar="PAGES",
        help="page pack: a fault on a pack page at most PAGES ahead of the loader waits for it (default 256)",
    )
    p.add_argument(
        "--memory",
        metavar="LIMIT",
        help="also run the workload's dense pass (--dense: every row, every token) in a memory cgroup of LIMIT "
        "bytes (384M; 'auto': the program's own memory and 60%% of the weights): the kernel alone and a memory "
        "plan (pagecast plan --memory on the training prompts recorded under the limit) through each backend, "
        "on the test prompt",
    )
    add_json_flag(p)


def memory_extra(cfg, args: argparse.Namespace, log):
    """The rows under a memory limit (``--memory``), as ``run_bench``'s ``extra_rows``; or None."""
    if not getattr(args, "memory", None):
        return None
    from pagecast.bench.memory_rows import dense_workload, memory_rows

    # three training prompts: leave-one-run-out needs two or more, and each costs a recorded run
    workload = dense_workload(cfg.tokens)
    return memory_rows(cfg.out_dir, args.memory, workload, cfg.train_prompts[:3], cfg.test_prompt, log)


def combine(*extras):
    """Several ``extra_rows`` callbacks as one."""
    live = [e for e in extras if e is not None]
    if not live:
        return None
    return lambda traces, weights: [row for e in live for row in e(traces, weights)]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark live prefetching against the kernel's strategies on the sparse-weights workload",
        description=(
            "Side-by-side on the sparse-weights workload, cold page cache every run (posix_fadvise DONTNEED on the "
            "weights once no process maps them): MADV_RANDOM, default read-around, MADV_SEQUENTIAL, WILLNEED on the "
            "whole file, pagecast classic prefetchers, schedule replay of training runs (other prompts), a learned "
            "model, a page pack of the training runs streamed by the userfaultfd pager (plus the pager alone), "
            "the oracle (this run's own pages; fadvise and page-pack variants) and a warm cache. Strategies alternate round by round; medians "
            "of program wall time, TTFT, tokens/s, major faults and MiB read, with ratios to the best kernel "
            "strategy and to warm cache. Writes bench.json and bench.png."
        ),
    )
    add_bench_args(p)
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace, out_default: str):
    from pagecast.bench.harness import BenchConfig

    train = parse_prompts(args.train_prompts)
    if not train:
        raise PagecastError("--train-prompts is empty: name at least one training prompt")
    if args.min_runs is not None and not 1 <= args.min_runs <= len(train):
        raise PagecastError(f"--min-runs must be between 1 and the number of training prompts ({len(train)})")
    if args.prompt in train:
        raise PagecastError(f"--prompt {args.prompt} is one of the training prompts: benchmark on an unseen prompt")
    if args.pack_defer is not None and args.pack_defer < 1:
        raise PagecastError("--pack-defer must be >= 1")
    if args.runs < 1 or args.tokens < 1 or args.size_mib < 16:
        raise PagecastError("--runs and --tokens must be >= 1, --size-mib >= 16")
    if args.model:
        from pagecast.learn.train import load_model

        load_model(args.model)  # a file that is not a model: one line now, not after eight recordings
    if args.weights:
        check_readable(args.weights, "weights file")
    out_dir = Path(args.out or out_default)
    if out_dir.exists() and not out_dir.is_dir():
        raise PagecastError("not a directory (--out names the directory for the results)", path=out_dir)
    if not out_dir.parent.is_dir():
        raise PagecastError(f"cannot write: directory {out_dir.parent} does not exist", path=out_dir)
    return BenchConfig(
        out_dir=out_dir,
        weights=Path(args.weights) if args.weights else None,
        size_mib=args.size_mib,
        tokens=args.tokens,
        train_prompts=train,
        test_prompt=args.prompt,
        runs=args.runs,
        policies=tuple(policy_texts(args, DEFAULT_POLICIES)),
        model=Path(args.model) if args.model else None,
        train_model=not args.no_learned,
        epochs=args.epochs,
        lookahead=args.lookahead,
        pack=not args.no_pack,
        pack_defer=args.pack_defer,
        min_runs=args.min_runs,
    )


def parse_prompts(text: str) -> tuple[int, ...]:
    """'101-104,110' -> (101, 102, 103, 104, 110)."""
    out: list[int] = []
    for part in (x.strip() for x in text.split(",")):
        if not part:
            continue
        try:
            lo, _, hi = part.partition("-")
            a, b = int(lo), int(hi) if hi else int(lo)
        except ValueError:
            raise PagecastError(f"--train-prompts wants integers or ranges like 101-108, got {part!r}") from None
        if b < a:
            raise PagecastError(f"--train-prompts: empty range {part!r}")
        out.extend(range(a, b + 1))
    return tuple(out)


def _shown(s: dict) -> dict:
    """A summary row as the table shows it: ratios to 2 decimals, MiB to 1."""
    r2 = lambda v: "—" if v is None else round(v, 2)  # noqa: E731
    return {
        **s,
        "mib_read": round(s["mib_read"], 1),
        "vs_best_kernel": r2(s["vs_best_kernel"]),
        "vs_warm": r2(s["vs_warm"]),
    }


def print_report(report: dict, as_json: bool) -> None:
    if as_json:
        print_json(report)
        return
    cols = [
        "strategy",
        "wall_s",
        "ttft_s",
        "tokens_per_s",
        "major_faults",
        "mib_read",
        "prefetched",
        "vs_best_kernel",
        "vs_warm",
    ]
    print(format_table([_shown(s) for s in report["strategies"]], cols))
    print()
    print(f"best kernel strategy: {report['best_kernel']}")
    for name, x in report["speedup_vs_best_kernel"].items():
        print(f"  {name}: {x:.2f}x faster than it")
    for case, c in report.get("cases", {}).items():
        print(f"{case}: the best kernel strategy under it: {c['best_kernel']}")
        for name, x in c["speedup_vs_best_kernel"].items():
            print(f"  {name}: {x:.2f}x faster than it")
    for name, runs in report["live"].items():
        sub = [r["submit"] for r in runs if r["submit"]["n"]]
        if sub:  # runs whose prefetches all went out at start (replay) have none
            p50 = sorted(x["p50"] for x in sub)[len(sub) // 2]
            p99 = sorted(x["p99"] for x in sub)[len(sub) // 2]
            print(f"  {name}: fault seen -> prefetch submitted: p50 {p50:.0f} us, p99 {p99:.0f} us (median over runs)")
    if report.get("learned_note"):
        print(report["learned_note"])
    if not report["same_output_every_run"]:
        print("warning: the workload's checksum differed between runs", file=sys.stderr)
    print(f"report: {report['report']}\nplot:   {report['plot']}")


def run(args: argparse.Namespace) -> int:
    from pagecast.bench.harness import run_bench
    from pagecast.cli._common import progress

    cfg = config_from_args(args, "pagecast-bench")
    with progress(desc="bench", unit="step") as bar:

        def log(msg: str) -> None:
            bar.set_description_str(msg[:60])
            bar.update(1)
            if not sys.stderr.isatty():
                print(f"pagecast bench: {msg}", file=sys.stderr)

        report = run_bench(cfg, log=log, extra_rows=memory_extra(cfg, args, log))
    print_report(report, args.json)
    return 0
