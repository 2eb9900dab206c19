"""``pagecast run --memory LIMIT [--plan MEMORY_PLAN]``: a program under a memory limit.

The program runs in a memory cgroup of LIMIT bytes (``pagecast.util.memcg``), with its
stdio, its pid (the sh that enters the cgroup ``exec``s it) and its exit status. With a
memory plan, a controller (``pagecast.live.memctl``) forked from this process enters the
same cgroup and applies the plan beside the program; with ``--backend pager`` the
userfaultfd pager applies it inside the program instead (``pagecast.launch.memlimit_pager``).
The report's ``memory`` object holds the cgroup's counters: limit, refaults, major faults, bytes read from the device (the
program's and the controller's, from their rusage), peak usage, wall time.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.plan.format import FileIdentity
from pagecast.plan.memory_format import MemoryPlan, for_limit, read_memory_plan
from pagecast.util.cached_outside import argv_files, before_run
from pagecast.util.memcg import MemoryCgroup, parse_limit
from pagecast.util.process import check_command, children_read_bytes


@dataclass
class MemoryRunReport:
    exit_status: int
    memory: dict[str, Any]
    controller: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    pager: dict[str, Any] | None = None  # --backend pager: budgets and the regions' counters

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"mode": "memory", "exit_status": self.exit_status, "memory": self.memory}
        if self.controller is not None:
            d["controller"] = self.controller
        if self.pager is not None:
            d["pager"] = self.pager
        if self.warnings:
            d["warnings"] = self.warnings
        return d


def _exit_status(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


def _start_controller(plan: MemoryPlan, pid: int, cg: MemoryCgroup, named: Sequence[str]) -> tuple[int, int]:
    """Fork the controller into the cgroup; (its pid, the read end of its report pipe)."""
    r, w = os.pipe()
    # opened before this process can reap the program: one that ends at once stays reachable
    # (where it cannot be opened, the controller tries and reports why)
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except OSError:
        pidfd = None
    # the controller's memory is charged to the program's cgroup: what it shares with this
    # process must stay shared, so no collection may walk (and so copy) the inherited heap
    gc.freeze()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child, reports through the pipe
        code = 0
        gc.disable()
        cg.forget_reaper()
        try:
            os.close(r)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            cg.enter(0)
            # under memory pressure the OOM killer takes the controller, never the program for it:
            # its locked pages go with it and the program runs on
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
            from pagecast.live.memctl import Controller

            stats = Controller(
                plan, pid, cg.committed, unreclaimable=cg.unreclaimable, pidfd=pidfd, procs=cg.procs, named=named
            ).run()
            os.write(w, json.dumps(stats.to_dict()).encode())
        except BaseException as e:  # noqa: BLE001 - the program must run on whatever happens here
            try:
                os.write(w, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
            except OSError:
                pass
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    if pidfd is not None:
        os.close(pidfd)
    gc.unfreeze()
    return child, r


def shim_env(plan: MemoryPlan, warnings: list[str]) -> dict[str, str] | None:
    """The program's environment with the advice shim applying the plan's per-file parts:
    object files read whole at their first touch (``:n``: pages reclaimed and faulted again
    get the kernel's read-around) and files' read-ahead advice; None when the plan has
    neither for a file as it recorded it."""
    from pagecast.launch.binary import SHIM_SUFFIX, launcher_path
    from pagecast.plan.memory_format import ADVICE
    from pagecast.util.preload import preload_list

    objects, advice = [], []
    for f in plan.files:
        if not f.objects and not f.advice:
            continue
        try:
            now = FileIdentity.of(f.path)
        except OSError:
            now = None
        if now is None or f.identity.differences(now):
            warnings.append(f"{f.path} changed since the plan was made: not read as the plan says")
            continue
        if f.objects:
            objects.append(f"{now.dev}:{now.ino}:{f.objects[0]}:{f.objects[1]}:n")
        if f.advice:
            span = ""
            if f.advice_span:  # in pages, what the shim takes; the rest of a mapping random
                cp = plan.chunk_bytes // PAGE_SIZE
                span = f":{f.advice_span[0] * cp}:{f.advice_span[1] * cp}:r"
            advice.append(f"{ADVICE[f.advice]}:{now.dev}:{now.ino}{span}")
    if not objects and not advice:
        return None
    env = dict(os.environ)
    shim = launcher_path() + SHIM_SUFFIX
    env["LD_PRELOAD"] = preload_list(env.get("LD_PRELOAD", ""), shim, first=True)
    for name, specs in (("PAGECAST_OBJECT_FILES", objects), ("PAGECAST_ADVICE_FILES", advice)):
        if specs:
            env[name] = ",".join(specs)
    return env


def _read_all(fd: int) -> bytes:
    out = b""
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return out
        out += b


def load_plan(path: str, limit: int, warn: Callable[[str], None]) -> MemoryPlan | None:
    """The memory plan for this limit, or None (one warning) when it cannot be used."""
    try:
        plan = read_memory_plan(path)
    except PagecastError as e:
        warn(f"pagecast run: warning: {e}; the program runs under the limit without a plan")
        return None
    plan, note = for_limit(plan, limit)
    if note:
        warn(f"pagecast run: warning: {note}")
    return None if plan.backend == "kernel" else plan


def _wait_forwarding_signals(proc: subprocess.Popen) -> int:
    """The program's return code; SIGTERM to pagecast goes on to the program, and the
    terminal's Ctrl-C, which reaches the program too, leaves pagecast to report."""

    def forward(sig: int, _frame: object) -> None:
        try:
            proc.send_signal(sig)
        except OSError:
            pass

    old_term = signal.signal(signal.SIGTERM, forward)
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)


def _how_it_ended(status: int, oom_kills: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGKILL and oom_kills > 0:
            # the controller asks to be the OOM killer's first choice, before the program
            return "killed by the cgroup's OOM killer: its locked pages went with it"
        return f"killed by {signal.Signals(sig).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _controller_report(ctl: tuple[int, int], warnings: list[str], oom_kills: int = 0) -> dict[str, Any]:
    """What the controller wrote before it exited, and the warnings it calls for
    (``oom_kills``: the cgroup's count, which names a SIGKILL's sender)."""
    pid, fd = ctl
    raw = _read_all(fd)
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    try:
        controller = json.loads(raw) if raw else None
    except ValueError:
        controller = None
    if controller is None:
        how = _how_it_ended(status, oom_kills)
        controller = {"error": f"it ended without a report ({how}); the program ran on without it"}
    if controller.get("error"):
        warnings.append(f"the memory controller stopped: {controller['error']}")
    for p in controller.get("files_changed") or []:
        warnings.append(f"{p} changed since the plan was made: not acted on")
    unused = controller.get("files_unused") or []
    if unused:
        warnings.append(
            f"the program never opened {', '.join(unused[:3])}{f' and {len(unused) - 3} more' if len(unused) > 3 else ''}: "
            "the plan's keep set there was not locked (a plan made for another input?)"
        )
    return controller


def run_under_limit(
    cmd: Sequence[str],
    limit: int | str,
    plan_path: str | None = None,
    *,
    warn: Callable[[str], None] = lambda s: None,
    stdout: Any = None,
    backend: str | None = None,
) -> MemoryRunReport:
    """``backend``: ``kernel`` (the controller, ``pagecast.live.memctl``) or ``pager`` (the
    userfaultfd pager serving the plan's files, ``pagecast.launch.memlimit_pager``); None:
    the plan's own (``pager`` for a plan whose measured stage chose it, else ``kernel``)."""
    if not cmd:
        raise PagecastError("no command given (usage: pagecast run --memory LIMIT [--plan P] -- CMD ARGS...)")
    limit = parse_limit(limit)
    check_command(cmd[0])
    plan = load_plan(plan_path, limit, warn) if plan_path else None
    if backend is None:
        backend = "pager" if plan is not None and plan.backend == "pager" else "kernel"
    warnings: list[str] = []
    if plan:
        escaped = before_run([f.path for f in plan.files] + argv_files(cmd), limit, "the plan's files")
    else:
        escaped = before_run(argv_files(cmd), limit, "the files named on the command line")
    if escaped:  # said before the program's own output, and kept in the report
        warn(f"pagecast run: warning: {escaped}")
    with tempfile.TemporaryDirectory(prefix="pagecast-mem-") as td, MemoryCgroup(limit, scratch=td) as cg:
        env, pager = None, None
        if plan and backend == "pager":
            # imported here: the kernel backend's controller is forked from this process, and
            # what this process loads (numpy) it may copy into the limit
            from pagecast.launch.memlimit_pager import pager_setup

            env, pager = pager_setup(plan, limit, Path(td), warnings)
        elif plan and any(f.objects or f.advice for f in plan.files):
            env = shim_env(plan, warnings)
        read0 = children_read_bytes()
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(cg.wrap(cmd), stdout=stdout, env=env)
        except OSError as e:
            raise PagecastError(f"cannot start {cmd[0]}: {e.strerror}") from None
        acts = plan is not None and backend == "kernel" and any(f.keep or f.stream for f in plan.files)
        ctl = _start_controller(plan, proc.pid, cg, argv_files(cmd)) if acts else None
        rc = _wait_forwarding_signals(proc)
        wall = time.monotonic() - t0
        controller = _controller_report(ctl, warnings, cg.stats().oom_kills) if ctl is not None else None
        if pager is not None:
            from pagecast.launch.memlimit_pager import pager_report

            pager = pager_report(pager, Path(td), warnings)
        read1 = children_read_bytes()
        stats = cg.stats()
        if stats.read_bytes is None:
            stats.read_bytes = read1 - read0
        mem = stats.to_dict()
        mem["wall_s"] = round(wall, 6)
    for w in warnings:
        warn(f"pagecast run: warning: {w}")
    if escaped:
        warnings.insert(0, escaped)
    return MemoryRunReport(_exit_status(rc), mem, controller, warnings, pager)
