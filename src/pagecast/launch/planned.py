"""``pagecast run --plan`` when it comes through the full command-line parser.

Two cases reach here: a command line the fast path (``command.py``) does not take
(e.g. ``pagecast.cli.main([...])`` called from Python), which runs the native launcher as
a child and returns its exit status; and a plan with ``pack`` or ``per-fault`` files,
which the launcher hands back to Python (``PAGECAST_PLAN_HANDOVER`` names the status file
of the warm/stream prefetcher it already started). The hand-over runs those files through
today's live machinery: packs through the userfaultfd pager (``--pack``), a per-fault
policy through the live loop (``--policy``), then reports in the same JSON shape as the
launcher (``live`` filled in).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from pagecast.errors import PagecastError
from pagecast.launch.binary import launcher_path
from pagecast.launch.command import HANDOVER_ENV, launcher_argv
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, read_plan
from pagecast.util.elf import is_elf
from pagecast.util.process import run_program

_STATUS_WAIT_S = 0.5  # warm requests are queued, not waited for: the report is normally there at once


def run_planned(plan: str, cmd: list[str], *, as_json: bool = False, status: str | None = None) -> int:
    handover = os.environ.pop(HANDOVER_ENV, None)
    if handover:
        return run_handover(plan, cmd, None if handover == "-" else Path(handover), as_json=as_json)
    try:
        launcher = launcher_path()
    except PagecastError as e:  # e.g. no C compiler: the program still runs, unplanned
        why = f"the native launcher is not available ({str(e).splitlines()[0]})"
        _warn(f"{plan}: {why}; running the program without the plan")
        t0 = time.monotonic()
        try:
            rc = run_program(cmd, stdout=2 if as_json else None)
        except OSError as oe:
            raise PagecastError(f"cannot run {cmd[0]} ({oe.strerror})") from None
        if as_json:
            print(
                json.dumps(
                    {
                        "mode": "plan",
                        "plan": plan,
                        "plan_error": why,
                        "returncode": rc,
                        "exit_status": _exit_status(rc),
                        "wall_s": time.monotonic() - t0,
                        "prefetch": None,
                        "files": [],
                        "live": None,
                    },
                    indent=2,
                )
            )
        return _exit_status(rc)
    argv = launcher_argv(launcher, plan, as_json, status, cmd)
    return _exit_status(run_program(argv))  # the launcher execs the program: its pid is the program's


def _jsonable(o: Any) -> Any:
    if hasattr(o, "item"):  # numpy scalars in the live summary
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def _exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _warn(msg: str) -> None:
    print(f"pagecast run: warning: {msg}", file=sys.stderr)


def _current(fp: FilePlan) -> bool:
    try:
        return not fp.identity.differences(FileIdentity.of(fp.path))
    except OSError:
        return False


def run_handover(
    plan: str, cmd: list[str], status_path: Path | None, *, as_json: bool = False, warn: Callable[[str], None] = _warn
) -> int:
    """The pack and per-fault files of a plan the launcher accepted. Whatever of them
    cannot run costs one warning naming the file, and the program runs anyway: the
    launcher read the plan with the same rules (plan/format.py, "Lexical rules"), so
    only a plan replaced since then, or a pack or policy pagecast cannot use, gets here."""
    from pagecast.policies.spec import parse_policy_spec

    try:
        doc = read_plan(plan)
    except PagecastError as e:
        warn(f"{e}; its pack and per-fault files are not used")
        doc = PlanDoc()
    # the launcher already warned about stale and missing files; these are the live ones
    packs = [fp for fp in doc.files if fp.strategy == "pack" and _current(fp)]
    # `objects:` specs run in the program (the advice shim), never in the live loop
    per_fault = [
        fp for fp in doc.files if fp.strategy == "per-fault" and _current(fp) and not fp.arg.startswith("objects:")
    ]
    skipped: dict[str, str] = {}  # handed-over files that did not run as planned → why

    def skip(fp: FilePlan, why: str) -> None:
        skipped[fp.path] = why
        warn(f"{fp.path}: {why}")

    for fp in per_fault:
        try:
            parse_policy_spec(fp.arg)
        except PagecastError as e:
            skip(fp, f"per-fault policy not run ({e}); the file is read on demand")
    policies = sorted({fp.arg for fp in per_fault if fp.path not in skipped})
    policy = policies[0] if policies else "none"
    for fp in per_fault:
        if fp.path not in skipped and fp.arg != policy:
            skip(fp, f"per-fault policy {fp.arg!r} not run: one policy per run, {policy!r} ran")
    if packs and policy != "none":
        why = _not_a_pager_policy(policy)
        if why:
            for fp in per_fault:
                if fp.path not in skipped:
                    skip(fp, f"per-fault policy {policy!r} not run beside a pack ({why})")
            policy = "none"
    stdout = 2 if as_json else None
    t0 = time.monotonic()
    live: dict[str, Any] | None
    if packs:
        live, rc = _run_packs(cmd, packs, policy, stdout, warn, skipped)
    elif policy != "none":
        from pagecast.live.loop import LiveConfig, run_live
        from pagecast.live.worker import SourceSpec

        spec = parse_policy_spec(policy)
        res = run_live(LiveConfig(list(cmd), SourceSpec("policy", spec.name, options=spec.options), stdout=stdout))
        live, rc = res.to_dict(), res.returncode
    else:
        try:
            rc = subprocess.run(list(cmd), stdout=stdout).returncode
        except OSError as oe:
            raise PagecastError(f"cannot run {cmd[0]} ({oe.strerror})") from None
        live = None
    wall = time.monotonic() - t0
    if as_json:
        print(json.dumps(_report(doc, plan, rc, wall, status_path, live, skipped), indent=2, default=_jsonable))
    return _exit_status(rc)


def _not_a_pager_policy(policy: str) -> str | None:
    """Why the pager (which runs the packs) cannot run ``policy``, or None if it can."""
    from pagecast.pager.runtime import PolicySpec as PagerPolicy

    try:
        PagerPolicy.parse(policy)
    except PagecastError as e:
        return str(e)
    return None


def _run_packs(
    cmd: list[str],
    packs: list[FilePlan],
    policy: str,
    stdout: Any,
    warn: Callable[[str], None],
    skipped: dict[str, str],
) -> tuple[dict[str, Any], int]:
    from pagecast.pager.pack import read_pack
    from pagecast.pager.runtime import run_pager

    def skip(fp: FilePlan, why: str) -> None:
        skipped[fp.path] = why
        warn(f"{fp.path}: {why}")

    usable, specs = [], []
    for fp in packs:
        try:
            info = read_pack(fp.arg)
        except PagecastError as e:
            skip(fp, f"pack not used ({e}); the file is read on demand")
            continue
        why = info.stale_reason()
        if why:
            skip(fp, f"pack {fp.arg} not used ({why}); the file is read on demand")
            continue
        if os.path.realpath(info.source) != os.path.realpath(fp.path):
            skip(fp, f"pack {fp.arg} is a pack of {info.source}, not of this file; the file is read on demand")
            continue
        if is_elf(fp.path):
            _warm_instead(fp, info.pages, skipped, warn)
            continue
        usable.append(info)
        specs.append((info.source, os.path.getsize(info.source)))
    if not usable:
        try:
            return {"regions": []}, run_program(cmd, stdout=stdout)
        except OSError as oe:
            raise PagecastError(f"cannot run {cmd[0]} ({oe.strerror})") from None
    res = run_pager(cmd, specs, policy=policy, packs=[i.path for i in usable], stdout=stdout)
    mapped = {os.path.realpath(st.get("path", "")) for st in res.stats}
    for info in usable:
        if os.path.realpath(info.source) not in mapped:
            skipped[info.source] = (
                f"pack {info.path} unused: the program never mapped the file (read with read() "
                "or loaded by the dynamic loader?)"
            )
            warn(f"{info.source}: {skipped[info.source]}")
    return {"regions": res.stats}, res.returncode


def _warm_instead(fp: FilePlan, pages: Any, skipped: dict[str, str], warn: Callable[[str], None]) -> None:
    """A pack cannot act on an ELF file: the dynamic loader maps libraries (and the kernel
    the program itself) with its own calls, which the pager never sees. The pack's pages
    are warmed through the page cache instead, by the launcher's prefetcher, detached."""
    import numpy as np

    from pagecast.plan.format import PlanDoc as _Doc
    from pagecast.plan.format import write_plan
    from pagecast.plan.shared_pages import merge_ranges

    ranges = merge_ranges(np.unique(np.asarray(pages, np.int64)))
    why = (
        f"a pack cannot act on an ELF file, which the dynamic loader maps; its {sum(n for _, n in ranges)} pages "
        "are warmed through the page cache instead"
    )
    try:
        with tempfile.TemporaryDirectory(prefix="pagecast-elf-warm-") as private:  # 0700: no name to plant a link at
            tmp = Path(private) / "warm.plan"
            write_plan(
                tmp, _Doc([FilePlan(fp.path, fp.identity, "warm", ranges, depth=fp.depth, chunk_kib=fp.chunk_kib)])
            )
            subprocess.run([launcher_path(), "--prefetch-only", str(tmp)], check=False)
    except (OSError, PagecastError) as e:
        why = f"a pack cannot act on an ELF file, which the dynamic loader maps; warming it instead failed ({e})"
    skipped[fp.path] = "warmed:" + why
    warn(f"{fp.path}: {why}")


def _remove_status(path: Path) -> None:
    """Remove the prefetcher's report once read; the launcher's own report lives alone in
    a private directory (``pagecast-launch-XXXXXX``, native/launch/launch.c), removed with it."""
    path.unlink(missing_ok=True)
    if path.name == "status.json" and path.parent.name.startswith("pagecast-launch-"):
        with contextlib.suppress(OSError):
            path.parent.rmdir()


def _report(
    doc: PlanDoc,
    plan: str,
    rc: int,
    wall: float,
    status_path: Path | None,
    live: dict[str, Any] | None,
    skipped: dict[str, str],
) -> dict[str, Any]:
    """The launcher's report shape. The warm/stream prefetcher stops when this process
    exits, not the program; if its report is not there within a moment it is still
    running, and its files say so."""
    status: dict[str, Any] | None = None
    deadline = time.monotonic() + _STATUS_WAIT_S
    while status_path is not None and status is None and time.monotonic() < deadline:
        try:
            status = json.loads(status_path.read_text())
            _remove_status(status_path)
        except (OSError, ValueError):
            time.sleep(0.02)
    if status is None:
        files = [
            {
                "path": f.path,
                "strategy": f.strategy,
                "advice": f.advice,
                "advice_applied": None,
                "status": "live" if f.strategy in ("pack", "per-fault") else "running",
                "pages_planned": f.pages,
                "pages_issued": None,
                "bytes_issued": None,
                "detail": "",
                "feedback": None,
                "pages_used": None,
                "pages_outside": None,
            }
            for f in doc.files
        ]
        status = {"prefetch": None, "files": files}
    for f in status.get("files", []):
        if f.get("status") in ("handed-over", "live") and f["path"] in skipped:
            why = skipped[f["path"]]
            f["status"], f["detail"] = (
                ("warmed", why[len("warmed:") :]) if why.startswith("warmed:") else ("not-run", why)
            )
        elif f.get("status") == "handed-over":
            f["status"] = "live"
    return {
        "mode": "plan",
        "plan": plan,
        "plan_error": None,
        "returncode": rc,
        "exit_status": _exit_status(rc),
        "wall_s": wall,
        "prefetch": status.get("prefetch"),
        "files": status.get("files", []),
        "live": live,
    }
