"""Record a CUDA program's unified-memory behaviour: ``record_cuda(cmd, out)``.

The program runs with two libraries from ``native/cuda``:
``libpagecast_cuda.so`` (LD_PRELOAD: driver-API interposer writing per-API metrics, a
call timeline and the allocation table) and ``libpagecast_cupti.so``
(CUDA_INJECTION64_PATH: CUPTI unified-memory counters, kernels and allocations). The
raw files land in ``<out>.cuda/``; the CUPTI stream becomes the trace ``out``.
"""

from __future__ import annotations

import csv
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any, Sequence

from pagecast.errors import PagecastError, check_output
from pagecast.util.preload import preload_list
from pagecast.util.process import run_program as run_user_program


def cuda_env(
    interposer: Path, out_dir: Path, cupti: Path | None = None, base: dict[str, str] | None = None
) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = preload_list(env.get("LD_PRELOAD", ""), interposer, first=True)
    env["PAGECAST_CUDA_OUT"] = str(out_dir)
    if cupti is not None:
        env["CUDA_INJECTION64_PATH"] = str(cupti)
    return env


def run_program(cmd: Sequence[str], env: dict[str, str], *, quiet_stdout: bool = False) -> int:
    try:
        # With --json the report owns stdout: the program's output goes to stderr (fd 2).
        return run_user_program(list(cmd), env=env, stdout=2 if quiet_stdout else None)
    except FileNotFoundError:
        raise PagecastError(f"command not found: {cmd[0]}") from None
    except PermissionError:
        raise PagecastError(f"command not executable: {cmd[0]}") from None


def raw_dir_for(out: str | Path) -> Path:
    return Path(str(out) + ".cuda")


def private_raw_dir(out: str | Path) -> Path:
    """``<out>.cuda``, created 0700, or an existing one only if it is our own private directory.

    The path is predictable: a symlink or someone else's directory planted there would
    steer the collector's writes (and the removal of a previous recording's files).
    """
    raw = raw_dir_for(out)
    check_output(out)  # its directory must exist: never created
    try:
        raw.mkdir(mode=0o700)
    except FileExistsError:
        st = os.lstat(raw)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise PagecastError(
                "exists and is not a private directory of this user (a symlink, another user's "
                "or group/world-writable): remove it",
                path=raw,
            ) from None
    return raw


def record_cuda(cmd: Sequence[str], out: str | Path, json_out: bool = False) -> int:
    """Run ``cmd`` under the interposer and the CUPTI collector; write the trace ``out``.

    Returns the program's exit status. Raises PagecastError when nothing could be
    recorded (no toolkit to build with, or no CUPTI records: no GPU or no CUDA context).
    """
    from pagecast.collect.cuda_native import build_cupti_collector, build_interposer, find_toolkit
    from pagecast.collect.cupti_records import convert_dir

    if not cmd:
        raise PagecastError("no command given")
    tk = find_toolkit()
    interposer, cupti = build_interposer(tk), build_cupti_collector(tk)
    raw = private_raw_dir(out)
    for old in raw.glob("*.*"):  # a previous recording's files would be mistaken for this one's
        old.unlink()
    rc = run_program(cmd, cuda_env(interposer, raw, cupti), quiet_stdout=json_out)
    summary = convert_dir(raw, out, command=cmd)
    summary["exit_status"] = rc
    summary["raw_dir"] = str(raw)
    summary["api"] = summarize_dir(raw)
    print_summary(summary, json_out)
    return rc


# ---- the interposer's files ---------------------------------------------------------------


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``metrics.<pid>.csv``: name, count, total_ns, bytes, errors."""
    return _read_csv(path, {"name": str, "count": int, "total_ns": int, "bytes": int, "errors": int})


def read_timeline(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``timeline.<pid>.csv``: name, start_ns, duration_ns, bytes, direction, ptr, alloc, offset, result."""
    return _read_csv(
        path,
        {
            "name": str,
            "start_ns": int,
            "duration_ns": int,
            "bytes": int,
            "direction": str,
            "ptr": lambda s: int(s, 16),
            "alloc": int,
            "offset": int,
            "result": int,
        },
    )


def _read_csv(path: str | Path, types: dict[str, Any]) -> list[dict[str, Any]]:
    path = Path(path)
    rows = []
    try:
        f = open(path, newline="")
    except OSError as e:
        raise PagecastError(f"cannot read: {e.strerror}", path=path) from None
    with f:
        rd = csv.reader(f)
        header = next(rd, None)
        if header != list(types):
            raise PagecastError(f"expected header {','.join(types)}", path=path, line=1)
        for lineno, row in enumerate(rd, 2):
            if len(row) != len(types):
                raise PagecastError(f"expected {len(types)} fields, got {len(row)}", path=path, line=lineno)
            try:
                rows.append({k: conv(v) for (k, conv), v in zip(types.items(), row)})
            except ValueError:
                raise PagecastError("bad number", path=path, line=lineno) from None
    return rows


def summarize_dir(raw_dir: str | Path) -> dict[str, Any]:
    """Per-API totals (all processes), timeline span and bytes by direction, injector stats."""
    raw_dir = Path(raw_dir)
    if not raw_dir.is_dir():
        raise PagecastError("no such directory", path=raw_dir)
    apis: dict[str, dict[str, int]] = {}
    for p in sorted(raw_dir.glob("metrics.*.csv")):
        for r in read_metrics(p):
            a = apis.setdefault(r["name"], {"count": 0, "total_ns": 0, "bytes": 0, "errors": 0})
            for k in a:
                a[k] += r[k]
    timeline = {"rows": 0, "span_ns": 0, "bytes_by_direction": {}}
    for p in sorted(raw_dir.glob("timeline.*.csv")):
        rows = read_timeline(p)
        timeline["rows"] += len(rows)
        if rows:
            timeline["span_ns"] = max(
                timeline["span_ns"],
                max(r["start_ns"] + r["duration_ns"] for r in rows) - min(r["start_ns"] for r in rows),
            )
        for r in rows:
            if r["direction"]:
                d = timeline["bytes_by_direction"]
                d[r["direction"]] = d.get(r["direction"], 0) + r["bytes"]
    injector = {}
    for p in sorted(raw_dir.glob("injector.*.json")):
        try:
            injector[p.name.split(".")[1]] = json.loads(p.read_text())
        except ValueError as e:
            raise PagecastError(f"corrupt injector statistics ({e})", path=p) from None
    messages = []
    for p in sorted(raw_dir.glob("messages.*.log")):
        messages += [line.split(" ", 1)[-1] for line in p.read_text(errors="replace").splitlines()]
    return {"apis": apis, "timeline": timeline, "injector": injector, "messages": messages}


def print_summary(summary: dict[str, Any], json_out: bool) -> None:
    from pagecast.util.output import format_table, print_json

    if json_out:
        print_json(summary)
        return
    if "trace" in summary:
        print(
            f"trace {summary['trace']}: {summary['rows']:,} rows, {summary['regions']} allocations, "
            f"{summary['kernels']} kernels (program exit status {summary.get('exit_status')})"
        )
        if summary["rows_by_kind"]:
            print(format_table([{"kind": k, "rows": v} for k, v in summary["rows_by_kind"].items()]))
    api = summary.get("api", summary)
    if api.get("apis"):
        print(
            format_table(
                [
                    {
                        "api": k,
                        "calls": v["count"],
                        "total_ms": v["total_ns"] / 1e6,
                        "bytes": v["bytes"],
                        "errors": v["errors"],
                    }
                    for k, v in sorted(api["apis"].items(), key=lambda kv: -kv[1]["total_ns"])
                ]
            )
        )
    for pid, st in api.get("injector", {}).items():
        print(
            f"injector (pid {pid}): {st['chunks']} prefetch calls, {st['bytes']:,} bytes, {st['errors']} errors, "
            f"skipped {st['skipped_freed']} freed / {st['skipped_no_alloc']} unallocated ranges, "
            f"{st['pending_ranges']} never allocated, {st['loads_failed']} bad predictions files"
        )
    for m in api.get("messages", []):
        print(f"note: {m}", file=sys.stderr)
