"""``pagecast record``: run a program and record its page faults and file page sets (or all its accesses)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from pagecast.cli._common import add_cold_option, add_json_flag, apply_cold, format_table, print_json, progress
from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "record",
        help="run a program and record its page faults and every file page it uses into a trace",
        description=(
            "Run an unmodified program and record every page fault (major and minor, one perf sample per "
            "fault, with the data address) plus its memory map, as a trace with region-relative pages: "
            "file mappings become (file, page of the file), anonymous memory (allocation order, length). "
            "By default it also records the page set of every file the program uses: one FILE_MAPPED row "
            "per file page first touched through a mapping (an LD_PRELOAD shim makes every first touch "
            "fault, whatever read-ahead or fault-around would have mapped) and one FILE_READ row per file "
            "page first read with read/pread/readv/sendfile (tracepoint filemap:mm_filemap_get_pages). "
            "Threads and child processes are followed. The program's exit status is passed through. "
            "Needs perf_event_open (root, or kernel.perf_event_paranoid <= 2 for user-mode faults only)."
        ),
        epilog="example: pagecast record -o ls.parquet -- ls -l /usr",
    )
    p.add_argument("-o", "--output", required=True, help="trace file to write (.parquet)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--lackey",
        action="store_true",
        help="run under valgrind --tool=lackey --trace-mem=yes: every load/store, not only faults (slow, ~100x)",
    )
    mode.add_argument(
        "--cuda", action="store_true", help="record CUDA managed-memory events (GPU faults, migrations) via CUPTI"
    )
    p.add_argument(
        "--faults-only",
        action="store_true",
        help="record the page faults alone, as the kernel takes them (no shim, no read tracepoint, no page-set rows)",
    )
    p.add_argument(
        "--ring-pages",
        type=int,
        default=4096,
        help="perf ring buffer pages per CPU (power of two; larger loses fewer samples under bursts)",
    )
    p.add_argument("--instructions", action="store_true", help="with --lackey: also store instruction fetches")
    p.add_argument(
        "--memory",
        metavar="LIMIT",
        help="run the program in a memory cgroup of LIMIT bytes (384M, 1G; page cache included, as the "
        "kernel charges it), so the recording shows the faults it takes again under that limit; the "
        "cgroup's refaults, major faults and peak usage are added to the report",
    )
    add_cold_option(p)
    add_json_flag(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...: the program to run")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise PagecastError("no command given (usage: pagecast record -o T.parquet -- CMD ARGS...)")
    if args.cuda and args.memory:
        raise PagecastError("--memory does not go with --cuda (a memory cgroup limits host memory, not the GPU's)")
    apply_cold("record", args.cold)
    if args.cuda:
        try:
            from pagecast.collect.cuda import record_cuda
        except ImportError as e:
            raise PagecastError(f"CUDA recording is not available in this build ({e})") from None
        return int(record_cuda(cmd, args.output, json_out=args.json))
    if args.memory:
        from pagecast.util.cached_outside import argv_files, before_run
        from pagecast.util.memcg import MemoryCgroup, parse_limit
        from pagecast.util.process import check_command

        limit = parse_limit(args.memory)
        check_command(cmd[0])
        escaped = before_run(argv_files(cmd), limit, "the files named on the command line")
        if escaped:  # before a recording that would show the program without its limit
            print(f"pagecast record: warning: {escaped}", file=sys.stderr)
        with MemoryCgroup(args.memory) as cg:
            said = [escaped] if escaped else []
            status = _record(args, cg.wrap(cmd), lambda: cg.stats().to_dict(), shown=cmd, said=said)
        return status
    return _record(args, cmd, None)


def _record(
    args: argparse.Namespace,
    cmd: list[str],
    memory: Callable[[], dict] | None,
    shown: list[str] | None = None,
    said: list[str] | None = None,
) -> int:
    """``said``: warnings printed before the program started (the report carries them too)."""
    said = said or []
    # With --json, keep stdout for the report: the program's output goes to stderr.
    prog_out = 2 if args.json else None  # fd 2: works whatever sys.stderr was replaced by
    if args.lackey:
        from pagecast.collect.lackey import record_lackey

        result = record_lackey(cmd, args.output, stdout=prog_out, instructions=args.instructions)
    else:
        from pagecast.collect.record import record_faults

        with progress(desc="faults", unit="f") as bar:
            result = record_faults(
                cmd,
                args.output,
                stdout=prog_out,
                ring_pages=args.ring_pages,
                on_batch=bar.update,
                pageset=not args.faults_only,
                meta={"command": shown, "memory_limit": memory()["limit_bytes"]} if shown and memory else None,
                every_read=memory is not None,
            )
    d = result.to_dict()
    for line in d.get("info") or []:
        print(f"pagecast record: {line}", file=sys.stderr)
    if memory is not None:
        d["memory"] = memory()
        escaped = None if said else _escaped_limit(args.output, d)
        d["warnings"] = [*said, *(d.get("warnings") or []), *([escaped] if escaped else [])]
    if shown is not None:
        d["command"] = shown  # not the sh that entered the cgroup
    if args.json:
        print_json(d)
    else:
        rows = [{"field": k, "value": _cell(v)} for k, v in d.items() if k not in ("warnings", "info")]
        print(format_table(rows), file=sys.stderr)
        if d.get("lost"):
            print(f"pagecast record: warning: {d['lost']} samples lost (raise --ring-pages)", file=sys.stderr)
    for w in d.get("warnings") or []:
        if w not in said:
            print(f"pagecast record: warning: {w}", file=sys.stderr)
    return int(result.exit_status)


def _escaped_limit(trace: str, d: dict) -> str | None:
    """The recording's file pages against the cgroup's peak: pages cached before the run
    are charged outside the limit (``pagecast.util.cached_outside``)."""
    if "file_pages_mapped" not in d:  # --faults-only: no page set to count
        return None
    from pagecast.trace import open_trace
    from pagecast.util.cached_outside import after_record

    m = d["memory"]
    touched = (d["file_pages_mapped"] + d.get("file_pages_read", 0)) * PAGE_SIZE
    files = [r.path for r in open_trace(trace).regions if r.path]
    return after_record(touched, m["limit_bytes"], m["failcnt"], m["peak_bytes"], files)


def _cell(v: Any) -> Any:
    if isinstance(v, list):
        return ", ".join(v)
    if isinstance(v, dict):
        return ", ".join(f"{a}={b}" for a, b in v.items())
    return v
