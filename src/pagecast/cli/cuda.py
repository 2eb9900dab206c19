"""``pagecast cuda``: build, record, run with prefetching, convert and summarise CUDA runs."""

from __future__ import annotations

import argparse

from pagecast.cli._common import add_json_flag, print_json
from pagecast.errors import PagecastError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cuda",
        help="CUDA managed memory: driver interposer, CUPTI recorder, prefetch injector",
        description=(
            "CUDA unified (managed) memory. The program runs unmodified with libpagecast_cuda.so "
            "preloaded (driver-API interposer: per-API metrics, call timeline, allocation table, "
            "prefetch injector) and, when recording, libpagecast_cupti.so as CUDA injection library "
            "(CUPTI GPU faults, migrations with their cause, kernels). Needs the CUDA toolkit to build "
            "and a GPU to run; see docs/cuda.md."
        ),
    )
    cs = p.add_subparsers(dest="cuda_command", metavar="ACTION")

    b = cs.add_parser("build", help="build the native libraries (and with --workloads the CUDA test programs)")
    b.add_argument("--workloads", action="store_true", help="also compile workloads/cuda/*.cu with nvcc")
    add_json_flag(b)
    b.set_defaults(func=_build)

    r = cs.add_parser("record", help="run a program and record its unified-memory events as a trace")
    r.add_argument("-o", "--output", required=True, help="trace to write (raw files go to OUTPUT.cuda/)")
    add_json_flag(r)
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    r.set_defaults(func=_record)

    u = cs.add_parser("run", help="run a program with cuMemPrefetchAsync injected from a schedule or model")
    src = u.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--schedule",
        help="schedule (.parquet), or a predictions file (pagecast-prefetch 1 or AI4Mem's predictions CSV)",
    )
    src.add_argument(
        "--model", help="trained model; its schedule is predicted from --trace (or from a recording made first)"
    )
    u.add_argument(
        "--trace", help="with --model or --pre-evict MODEL: a previous recording of the program to predict from"
    )
    u.add_argument("--top-k", type=int, default=10, help="with --model: pages predicted per fault (default 10)")
    u.add_argument(
        "--out-dir",
        default="pagecast-cuda-run",
        help="predictions file, metrics, timeline (default ./pagecast-cuda-run)",
    )
    u.add_argument(
        "--poll-ms", type=int, default=200, help="how often the injector checks the predictions file (default 200)"
    )
    u.add_argument(
        "--repeat",
        action="store_true",
        help="prefetch the pages again before every kernel launch (programs that touch their data on the host between launches)",
    )
    u.add_argument(
        "--record", action="store_true", help="also record the injected run with CUPTI (OUT_DIR/trace.parquet)"
    )
    _add_pre_evict_args(u)
    add_json_flag(u)
    u.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    u.set_defaults(func=_run)

    c = cs.add_parser("convert", help="turn a recording's raw directory (cupti.<pid>.bin, ...) into a trace")
    c.add_argument("raw_dir", help="directory the recorder wrote (e.g. T.parquet.cuda)")
    c.add_argument("-o", "--output", required=True, help="trace to write")
    add_json_flag(c)
    c.set_defaults(func=_convert)

    t = cs.add_parser("timeline", help="summarise the interposer's metrics, timeline and injector statistics")
    t.add_argument("raw_dir", help="directory holding metrics.<pid>.csv / timeline.<pid>.csv / injector.<pid>.json")
    add_json_flag(t)
    t.set_defaults(func=_timeline)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _add_pre_evict_args(u: argparse.ArgumentParser) -> None:
    u.add_argument(
        "--pre-evict",
        metavar="PLAN",
        help="schedule (.parquet) of pages to move to the host ahead of need (cuMemPrefetchAsync to the CPU, "
        "issued before the prefetches), or an eviction model (.pt, pagecast train --target eviction) whose plan "
        "comes from --trace: pages whose last access there it scores as not kept",
    )
    u.add_argument(
        "--pre-evict-capacity",
        default="50%",
        help="with --pre-evict MODEL: the GPU memory the model plays, pages, a size (4GiB) or a share of "
        "the recording's distinct pages (default 50%%)",
    )


def _cmd(args: argparse.Namespace) -> list[str]:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise PagecastError("no command given (… -- CMD ARGS...)")
    return cmd


def _build(args: argparse.Namespace) -> int:
    from pagecast.collect import cuda_native as cn

    tk = cn.find_toolkit()
    out = {"toolkit": str(tk.root), "interposer": str(cn.build_interposer(tk))}
    try:
        out["cupti_collector"] = str(cn.build_cupti_collector(tk))
    except PagecastError as e:
        out["cupti_collector"] = None
        out["cupti_error"] = str(e)
    if args.workloads:
        out["workloads"] = {k: str(v) for k, v in cn.build_workloads(tk=tk).items()}
    if args.json:
        print_json(out)
    else:
        for k, v in out.items():
            if isinstance(v, dict):
                for name, path in v.items():
                    print(f"workload {name}: {path}")
            else:
                print(f"{k}: {v}")
    return 0


def _record(args: argparse.Namespace) -> int:
    from pagecast.collect.cuda import record_cuda

    return record_cuda(_cmd(args), args.output, json_out=args.json)


def _run(args: argparse.Namespace) -> int:
    from pagecast.cuda.injector import run_cuda

    return run_cuda(
        _cmd(args),
        schedule=args.schedule,
        model=args.model,
        trace=args.trace,
        top_k=args.top_k,
        out_dir=args.out_dir,
        poll_ms=args.poll_ms,
        record=args.record,
        repeat=args.repeat,
        pre_evict=args.pre_evict,
        pre_evict_capacity=args.pre_evict_capacity,
        json_out=args.json,
    )


def _convert(args: argparse.Namespace) -> int:
    from pagecast.collect.cuda import print_summary
    from pagecast.collect.cupti_records import convert_dir

    print_summary(convert_dir(args.raw_dir, args.output), args.json)
    return 0


def _timeline(args: argparse.Namespace) -> int:
    from pagecast.collect.cuda import print_summary, summarize_dir

    print_summary(summarize_dir(args.raw_dir), args.json)
    return 0
