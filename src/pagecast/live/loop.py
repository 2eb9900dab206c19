"""The live loop: run a program, stream its faults, predict, prefetch ahead of it.

    daemon (this process)                 predictor process (forked)
    FaultMonitor ── batches ──► sender ──► source.on_batch ──► FileInjector threads
         │                                                        │ posix_fadvise(WILLNEED)
         └── faults ─► trace ◄── issued pages ◄── reader ◄────────┘

The traced program never waits for pagecast: faults are observed, not intercepted, and
whatever happens to pagecast's helper processes the program runs to completion with its
own output and exit status:

- the predictor process dies mid-run (crash, kill): the daemon keeps draining the
  collector and records the rest of the run unprefetched;
- the predictor dies (or never says ready) while it loads its model or policy: the
  program is started anyway, without a predictor;
- the collector dies: the daemon is a child subreaper while the program runs, so the
  orphaned program becomes its child; it runs on unprefetched and unrecorded and the
  daemon reports its exit status.

Each case sets ``LiveResult.warning`` to one line naming the helper that died.

Schedule replay, next-line and stride take the native fast path by default
(``pagecast.live.fastpath``): the collector predicts and issues itself, per fault, and
there is no predictor process (its death is the collector case above).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import select
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pagecast.collect.faultmon import FaultMonitor
from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError, check_output, from_os_error, one_line
from pagecast.live.injector import Issued
from pagecast.live.worker import SourceSpec, worker_main
from pagecast.trace.keys import page_keys
from pagecast.trace.schema import FLAG_LATE, FLAG_USELESS, Kind
from pagecast.trace.writer import TraceWriter
from pagecast.util.signals import SignalRelay

READY_TIMEOUT_S = 300.0
FAULT_COLUMNS = ("t_ns", "region", "page", "kind", "tid", "ip")


@dataclass
class LiveConfig:
    cmd: list[str]
    source: SourceSpec = field(default_factory=SourceSpec)
    trace_out: Path | None = None
    threads: int = 2  # injector threads in the predictor process
    gap: int = 4  # merge predicted pages up to this many pages apart into one read
    poll_ms: int = 5  # collector poll period: bounds fault → daemon delay; 1 ms costs the program CPU on small machines
    ring_pages: int = 4096
    stdout: Any = None
    stderr: Any = None
    env: dict[str, str] | None = None
    # Niceness added to the daemon and the collector (not the program, not the predictor)
    # while the program runs: on a small machine their CPU time otherwise delays the
    # program's wake-up after every fault. Applied only where it can be undone (root).
    nice: int = 10
    nice_predictor: bool = False
    # Prefetch anonymous memory in-process through the LD_PRELOAD shim (anon.py).
    anon: bool = True
    # Native fast path (fastpath.py): None = wherever it applies (replay, nextline, stride).
    fast: bool | None = None
    fast_poll_ms: int = 1  # fast path: longest wait for a sample that does not wake it
    # fast path: wake it every N minor-fault samples too (0: only within fast_poll_ms). A wake-up
    # per minor fault cuts the fault -> issue latency several-fold but slows the program, since
    # each wake-up is paid by the faulting thread (BENCHMARKS.md, "Figures moved out of the code").
    fast_wake_minor: int = 8
    fast_report_ms: int = 20  # fast path: how often the collector hands the faults to the daemon (for the trace)
    # fast path: niceness added to the collector (root only; negative = higher priority). It
    # runs for microseconds per fault, but each time another job holds its CPU the prefetch waits.
    fast_nice: int = -10


@dataclass
class LiveResult:
    command: list[str]
    predictor: str
    returncode: int
    wall_s: float
    faults_major: int
    faults_minor: int
    prefetch_pages: int
    prefetch_used: int  # prefetched pages the program then faulted on as minor (read was done)
    prefetch_late: int  # prefetched pages the program still took a major fault on
    prefetch_useless: int  # prefetched pages never faulted on afterwards
    prefetch_at_start: int  # of prefetch_pages: issued by file path as the program started (replay)
    latency_submit_us: dict[str, float | None]  # daemon received the fault → predictor handed pages to the injector
    latency_seen_us: dict[
        str, float | None
    ]  # daemon received the fault → first prefetch issued (incl. queueing behind earlier reads)
    latency_fault_us: dict[str, float | None]  # fault happened → first prefetch issued (adds collector delay)
    predictor_alive: bool
    predictor_error: str | None
    lost: int
    trace: str | None
    worker: dict[str, Any] = field(default_factory=dict)
    # in-process anonymous prefetch: state on/off, reason when off, madvise mode, ranges/pages/errors
    anon_prefetch: dict[str, Any] = field(default_factory=dict)
    # native fast path: state on/off (+ reason), its counters
    fast_path: dict[str, Any] = field(default_factory=dict)
    collector_alive: bool = True  # False: the fault collector died before the program exited
    collector_error: str | None = None  # how it ended, e.g. "killed by SIGKILL"
    # one line naming the helper that died and saying prefetching stopped (None: nothing died)
    warning: str | None = None
    trace_error: str | None = None  # the program ran but its trace could not be written

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class LiveProcesses:
    """Handle given to ``on_started`` (tests use it to kill the predictor mid-run)."""

    def __init__(self) -> None:
        self.worker_pid: int | None = None
        self.program_pid: int | None = None


def _percentiles(x: np.ndarray) -> dict[str, float]:
    if not len(x):
        return {"n": 0, "p50": None, "p99": None, "max": None}
    us = x / 1e3
    return {
        "n": int(len(x)),
        "p50": round(float(np.percentile(us, 50)), 1),
        "p99": round(float(np.percentile(us, 99)), 1),
        "max": round(float(us.max()), 1),
    }


class _PredictorLost(Exception):
    """The predictor process died or hung before saying ready (not an error it reported)."""


def _how_it_ended(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class _Predictor:
    """The forked predictor process and the two threads talking to it."""

    def __init__(self, spec: SourceSpec, threads: int, gap: int, anon_listener: Any = None):
        ctx = mp.get_context("fork")
        self._in_r, self._in_w = ctx.Pipe(duplex=False)
        self._out_r, self._out_w = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(
            target=worker_main,
            args=(spec, self._in_r, self._out_w, threads, gap, anon_listener),
            name="pagecast-predictor",
            daemon=True,
        )
        self.proc.start()
        self._in_r.close()
        self._out_w.close()
        self.issued: list[Issued] = []
        self.stats: dict[str, Any] = {}
        self.error: str | None = None
        self.alive = True
        self.name = spec.label()
        self.dropped_batches = 0
        deadline = time.monotonic() + READY_TIMEOUT_S
        msg: tuple | None = None
        while msg is None:
            # a message or EOF (the process died) both make the pipe readable
            if self._out_r.poll(0.1):
                try:
                    msg = self._out_r.recv()
                except (EOFError, OSError):
                    break
            elif not self.proc.is_alive() or time.monotonic() > deadline:
                break
        if msg is None:
            pid = self.proc.pid
            # EOF comes while the process is still exiting: give it time to become reapable
            self.proc.join(0 if time.monotonic() > deadline else 5)
            hung = self.proc.is_alive()
            self.close()
            if hung:
                raise _PredictorLost(
                    f"the predictor process (pid {pid}) did not finish loading {self.name} in "
                    f"{READY_TIMEOUT_S:.0f} s and was stopped"
                )
            raise _PredictorLost(
                f"the predictor process (pid {pid}) died while loading {self.name} "
                f"({_how_it_ended(self.proc.exitcode)})"
            )
        if msg[0] == "error":
            self.close()
            raise PagecastError(msg[1])
        self.name = msg[1]
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    def send(self, msg: tuple, droppable: bool = False) -> None:
        """Send from the daemon's own thread (no queue: a queue adds a GIL hand-over per
        batch). A fault batch is dropped rather than waited for when the predictor is
        not keeping up (its pipe is full), so a hung predictor cannot stall the daemon."""
        if not self.alive:
            return
        if droppable and not select.select([], [self._in_w], [], 0)[1]:
            self.dropped_batches += 1
            return
        try:
            self._in_w.send(msg)
        except (BrokenPipeError, OSError, EOFError):
            self.alive = False

    def _read_loop(self) -> None:
        while True:
            try:
                msg = self._out_r.recv()
            except (EOFError, OSError):
                if not self.stats:
                    self.alive = False
                return
            if msg[0] == "issued":
                self.issued.extend(msg[1])
            elif msg[0] == "stats":
                self.stats = msg[1]
            elif msg[0] == "error":
                self.error = msg[1]
                self.alive = False

    def finish(self, timeout: float = 30.0) -> None:
        self.send(("end",))
        self._reader.join(timeout)
        self.close()
        if not self.alive and self.error is None:
            self.error = _how_it_ended(self.proc.exitcode)

    def warning(self) -> str | None:
        if self.alive:
            return None
        return (
            f"the predictor process (pid {self.proc.pid}) died mid-run ({self.error}): prefetching stopped; "
            "the program ran to completion unprefetched"
        )

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
        self.proc.join(5)
        for c in (self._in_w, self._out_r):
            c.close()


def run_live(cfg: LiveConfig, on_started: Callable[[LiveProcesses], None] | None = None) -> LiveResult:
    """Run ``cfg.cmd`` with live prefetching; write the trace; return the summary."""
    from pagecast.live.fastpath import write_config

    if cfg.trace_out is not None:
        check_output(cfg.trace_out)  # before the program runs, not after

    fast_off: dict[str, Any] = {"state": "off", "reason": "disabled (--no-fast)"}
    if cfg.fast is not False and cfg.source.kind != "none":
        made = write_config(cfg.source, cfg.gap, anon=cfg.anon)
        if not isinstance(made, str):
            return _run_fast(cfg, on_started, *made)
        fast_off = {"state": "off", "reason": made}
    elif cfg.source.kind == "none":
        fast_off = {"state": "off", "reason": "no predictor"}
    res = _run_python(cfg, on_started)
    res.fast_path = fast_off
    return res


def _start_predictor(cfg: LiveConfig, channel: Any) -> tuple[_Predictor | None, str | None]:
    """(predictor, None), or (None, why) when it died or hung while loading: the program
    then runs without one. An error the predictor reports (bad model file, unknown
    option) is the user's input and still stops the run before the program starts."""
    if cfg.source.kind == "none":
        return None, None
    try:
        return _Predictor(cfg.source, cfg.threads, cfg.gap, channel.sock if channel else None), None
    except _PredictorLost as e:
        return None, f"{e}: prefetching stopped before the program started; the program ran to completion unprefetched"


def _forward_batches(
    mon: FaultMonitor, predictor: _Predictor | None, cols: dict[str, list[np.ndarray]], t0: int
) -> None:
    """Until the program exits: each fault batch to the predictor (after the regions, when
    they changed) and into ``cols``."""
    sent_regions = 0
    for batch in mon.batches():
        t_seen = time.monotonic_ns() - t0
        changed = mon.take_changed_regions()
        if predictor and (len(mon.regions) != sent_regions or changed):
            predictor.send(("regions", [r.to_dict() for r in mon.regions]))
            sent_regions = len(mon.regions)
        if predictor:
            predictor.send(("faults", t_seen, batch.t_ns, batch.region, batch.page, batch.kind), droppable=True)
        for k in cols:
            cols[k].append(getattr(batch, k))


def _run_python(cfg: LiveConfig, on_started: Callable[[LiveProcesses], None] | None) -> LiveResult:
    procs = LiveProcesses()
    sys.setswitchinterval(0.0005)  # the reader thread must not hold up the fault loop for 5 ms
    env, channel, anon_off = _anon_setup(cfg)
    try:
        predictor, lost_at_start = _start_predictor(cfg, channel)
    except BaseException:
        if channel is not None:
            channel.close()
        raise
    if lost_at_start and channel is not None:
        channel.close()  # nobody serves the shim: start the program without it
        channel, env = None, cfg.env
        anon_off = {"state": "off", "reason": "the predictor process died before the program started"}
    if channel is not None:
        channel.sock.close()  # the predictor holds the listening socket now: if it dies, connects fail
    procs.worker_pid = predictor.proc.pid if predictor else None
    cols: dict[str, list[np.ndarray]] = {k: [] for k in FAULT_COLUMNS}
    mon = FaultMonitor(
        cfg.cmd, env=env, stdout=cfg.stdout, stderr=cfg.stderr, ring_pages=cfg.ring_pages, poll_ms=cfg.poll_ms
    )
    # Ctrl-C is for the program (the terminal sends it there); a SIGTERM is passed on: record until it exits
    relay = SignalRelay().__enter__()
    reaper = _set_subreaper(True)  # if the collector dies, its orphaned program becomes our child
    t_start = time.monotonic()
    reniced: list[tuple[int, int]] = []
    returncode = -1
    collector_error: str | None = None
    try:
        mon.start()
        relay.attach(mon.pid)
        if cfg.nice:
            extra = [predictor.proc.pid] if predictor and cfg.nice_predictor else []
            reniced = _renice_self_and_collector(mon, cfg.nice, extra)
        t0 = mon.t0_mono_ns
        procs.program_pid = mon.pid
        if predictor:
            predictor.send(("t0", t0))
        if on_started:
            on_started(procs)
        returncode, collector_error = _until_exit(
            mon, relay, reaper, lambda: _forward_batches(mon, predictor, cols, t0)
        )
        wall = time.monotonic() - t_start
    finally:
        _end_monitoring(mon, relay, reniced)
        if reaper:
            _set_subreaper(False)
        if predictor:
            predictor.finish()
        if channel is not None:
            channel.close()
    faults = _concat_columns(cols)
    issued = predictor.issued if predictor else []
    res = _summarise(cfg, mon, predictor, faults, issued, returncode, wall, anon_off)
    if collector_error is not None:
        res.collector_alive, res.collector_error = False, collector_error
        res.warning = (
            f"the fault collector (pid {mon.collector_pid}) died mid-run ({collector_error}): prefetching "
            "and recording stopped; the program ran to completion unprefetched"
        )
    elif lost_at_start:
        res.predictor_alive, res.predictor_error, res.warning = False, lost_at_start, lost_at_start
    elif predictor:
        res.warning = predictor.warning()
    return res


def _keep_batches(mon: FaultMonitor, cols: dict[str, list[np.ndarray]]) -> None:
    for batch in mon.batches():
        for k in cols:
            cols[k].append(getattr(batch, k))


def _until_exit(
    mon: FaultMonitor, relay: SignalRelay, reaper: bool, stream: Callable[[], None]
) -> tuple[int, str | None]:
    """``stream`` the faults until the program exits: (its exit status, None), or, when the
    collector died under the running program, (the program's exit status, how it died)."""
    try:
        stream()
        returncode = mon.returncode if mon.returncode is not None else -1
        relay.detach()
        return returncode, None
    except PagecastError:
        lost = _collector_lost(mon, reaper)
        if lost is None:
            raise
        how, returncode = lost
        return returncode, how


def _collector_lost(mon: FaultMonitor, reaper: bool) -> tuple[str, int] | None:
    """After the fault stream broke: None when the collector reported an error of its own or
    failed before the program existed (the caller re-raises). Otherwise it died under a
    running program: reap it (which also completes the orphan's move to this subreaper),
    wait for the program, and return (how the collector ended, the program's exit status)."""
    if mon.pid is None or mon.error is not None:
        return None
    mon.close()
    return _how_it_ended(mon.collector_returncode), _wait_orphan(mon.pid, reaper)


def _run_fast(
    cfg: LiveConfig, on_started: Callable[[LiveProcesses], None] | None, config: Path, mode: str
) -> LiveResult:
    """The native fast path: the collector predicts and issues; this process records."""
    from pagecast.live.fastpath import FastPathState, issued_from_monitor

    procs = LiveProcesses()
    state = FastPathState(cfg.source.label())
    cols: dict[str, list[np.ndarray]] = {k: [] for k in FAULT_COLUMNS}
    mon = FaultMonitor(
        cfg.cmd,
        env=cfg.env,
        stdout=cfg.stdout,
        stderr=cfg.stderr,
        ring_pages=cfg.ring_pages,
        poll_ms=cfg.fast_report_ms,
        fast=config,
        fast_poll_ms=cfg.fast_poll_ms,
        fast_wake_minor=cfg.fast_wake_minor,
    )
    relay = SignalRelay().__enter__()
    reaper = _set_subreaper(True)  # if the collector dies, its orphaned program becomes our child
    reniced: list[tuple[int, int]] = []
    returncode = -1
    how = ""
    t_start = time.monotonic()
    try:
        mon.start()
        relay.attach(mon.pid)
        if cfg.nice:  # the daemon only records now: the collector, doing the prefetching, keeps its priority
            reniced = _renice_self_and_collector(mon, cfg.nice, collector=False)
        if cfg.fast_nice and os.geteuid() == 0 and mon.collector_pid:
            _renice_self_and_collector(mon, cfg.fast_nice, collector=True, only_collector=True)
        procs.worker_pid = mon.collector_pid
        procs.program_pid = mon.pid
        if on_started:
            on_started(procs)
        returncode, how = _until_exit(mon, relay, reaper, lambda: _keep_batches(mon, cols))
        if how is not None:
            state.alive = False
            state.error = f"the fault collector (pid {mon.collector_pid}) died ({how})"
        wall = time.monotonic() - t_start
    finally:
        _end_monitoring(mon, relay, reniced)
        if reaper:
            _set_subreaper(False)
        config.unlink(missing_ok=True)
    faults = _concat_columns(cols)
    issued = issued_from_monitor(mon, mon.t0_mono_ns)
    state.stats = {"fast_path": True}
    fast = {"state": "on", "mode": mode, **(mon.fast_stats or {})}
    if mon.fast_stats is None:
        fast["state"] = "died"
    res = _summarise(
        cfg,
        mon,
        state,
        faults,
        issued,
        returncode,
        wall,  # type: ignore[arg-type]
        {"state": "off", "reason": "native fast path: file pages only (--no-fast for the shim)"},
    )
    res.fast_path = fast
    if not state.alive:
        res.collector_alive, res.collector_error = False, how
        res.warning = (
            f"the fault collector (pid {mon.collector_pid}) died mid-run ({how}): prefetching (native fast "
            "path) and recording stopped; the program ran to completion unprefetched"
        )
    return res


_PR_SET_CHILD_SUBREAPER = 36


def _end_monitoring(mon: FaultMonitor, relay: SignalRelay, reniced: list[tuple[int, int]]) -> None:
    """Give the signal handlers and the priorities back, and stop the collector (both run paths)."""
    relay.__exit__(None, None, None)
    _restore_nice(reniced)
    mon.close()


def _concat_columns(cols: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: (np.concatenate(v) if v else np.empty(0)) for k, v in cols.items()}


def _set_subreaper(on: bool) -> bool:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _wait_orphan(pid: int, adopted: bool) -> int:
    """Exit status of the program after its collector died (reparented to us when
    ``adopted``; -1 when it was not ours to wait for)."""
    while True:
        try:
            got, status = os.waitpid(pid, 0 if adopted else os.WNOHANG)
            if got == pid:
                return os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # not (or not yet) our child
            if not Path(f"/proc/{pid}").exists():
                return -1
        except InterruptedError:
            continue
        time.sleep(0.05)


def _anon_setup(cfg: LiveConfig) -> tuple[dict[str, str] | None, Any, dict[str, Any]]:
    """(program env, AnonChannel or None, anon_prefetch summary when off).

    The shim is only injected when a predictor runs, the program can take LD_PRELOAD
    (dynamic, not set-id) and the shim builds; otherwise anon prefetch is reported off.
    """
    if not cfg.anon:
        return cfg.env, None, {"state": "off", "reason": "disabled (--no-anon)"}
    if cfg.source.kind == "none":
        return cfg.env, None, {"state": "off", "reason": "no predictor"}
    from pagecast.live.anon import AnonChannel, preload_blocker, shim_path

    base = dict(cfg.env if cfg.env is not None else os.environ)
    why = preload_blocker(cfg.cmd, base)
    if why:
        return cfg.env, None, {"state": "off", "reason": why}
    try:
        shim = shim_path()
        channel = AnonChannel.open()
    except (PagecastError, OSError) as e:
        return cfg.env, None, {"state": "off", "reason": f"shim unavailable: {e}"}
    return channel.env(base, shim), channel, {}


def _latencies(
    rows: np.ndarray, p_t: np.ndarray, p_fault: np.ndarray, p_seen: np.ndarray, p_sub: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per causing fault, the first prefetch issued for it (of the prefetches ``rows``): from
    the daemon seeing the fault to the issue, from the fault to the issue, and from the
    daemon seeing it to the submission."""
    lat_seen = lat_fault = lat_sub = np.empty(0, np.int64)
    if rows.any():
        g = np.nonzero(rows)[0][np.lexsort((p_t[rows], p_seen[rows], p_fault[rows]))]
        gf, gs, gt = p_fault[g], p_seen[g], p_t[g]
        first = np.ones(len(g), bool)
        first[1:] = (gf[1:] != gf[:-1]) | (gs[1:] != gs[:-1])
        lat_seen = np.maximum(gt[first] - gs[first], 0)
        lat_fault = np.maximum(gt[first] - gf[first], 0)
        lat_sub = np.maximum(p_sub[g][first] - gs[first], 0)
    return lat_seen, lat_fault, lat_sub


def _summarise(
    cfg: LiveConfig,
    mon: FaultMonitor,
    predictor: _Predictor | None,
    faults: dict[str, np.ndarray],
    issued: Sequence[Issued],
    returncode: int,
    wall: float,
    anon_off: dict[str, Any] | None = None,
) -> LiveResult:
    f_t = faults["t_ns"].astype(np.int64)
    f_kind = faults["kind"].astype(np.uint8)
    f_key = page_keys(faults["region"], faults["page"]) if len(f_t) else np.empty(0, np.int64)
    cat = lambda name, dt: np.concatenate([getattr(i, name) for i in issued]).astype(dt) if issued else np.empty(0, dt)  # noqa: E731
    p_t, p_reg, p_page = cat("t_issue", np.int64), cat("region", np.int32), cat("page", np.int64)
    p_fault, p_seen, p_sub = cat("t_fault", np.int64), cat("t_seen", np.int64), cat("t_submit", np.int64)
    pre = p_reg < -1  # issued at start by file path, in the schedule's region ids
    if pre.any():
        p_reg = p_reg.copy()
        p_reg[pre] = _live_ids(cfg.source, mon.regions, -2 - p_reg[pre])
    # pre-issued rows have no causing fault: keep them out of the latency figures
    lat_rows = ~pre & (p_fault >= 0)  # -1: issued when its region appeared, not after a fault

    # First fault on each prefetched page at or after its prefetch: merge both streams
    # sorted by (page key, time, prefetch-before-fault) and look forward to the next fault.
    order = np.lexsort((f_t, f_key))  # faults by (key, t)
    nxt = _next_fault(f_key[order], f_t[order], page_keys(p_reg, p_page), p_t)
    has = nxt >= 0
    late = np.zeros(len(p_t), bool)
    late[has] = f_kind[order][nxt[has]] == Kind.FAULT_MAJOR
    useless = ~has
    used = has & ~late
    lat_seen, lat_fault, lat_sub = _latencies(lat_rows, p_t, p_fault, p_seen, p_sub)

    flags_f = np.zeros(len(f_t), np.uint8)
    if len(nxt) and late.any():
        flags_f[order[nxt[late]]] |= FLAG_LATE
    flags_p = (late * FLAG_LATE | useless * FLAG_USELESS).astype(np.uint8)

    n_major = int(np.count_nonzero(f_kind == Kind.FAULT_MAJOR))
    result = LiveResult(
        command=list(cfg.cmd),
        predictor=predictor.name if predictor else "none",
        returncode=returncode,
        wall_s=round(wall, 4),
        faults_major=n_major,
        faults_minor=int(len(f_t) - n_major),
        prefetch_pages=int(len(p_t)),
        prefetch_used=int(used.sum()),
        prefetch_late=int(late.sum()),
        prefetch_useless=int(useless.sum()),
        prefetch_at_start=int(pre.sum()),
        latency_submit_us=_percentiles(lat_sub),
        latency_seen_us=_percentiles(lat_seen),
        latency_fault_us=_percentiles(lat_fault),
        predictor_alive=bool(predictor.alive) if predictor else True,
        predictor_error=predictor.error if predictor else None,
        lost=int(mon.lost),
        trace=None,
        worker=dict(predictor.stats, dropped_batches=predictor.dropped_batches) if predictor else {},
        anon_prefetch=anon_off
        or (
            predictor.stats.get("anon")
            if predictor and predictor.stats.get("anon")
            else {"state": "off", "reason": "the predictor ended before reporting"}
        ),
    )
    if cfg.trace_out is not None:
        try:
            _write_live_trace(cfg, mon, result, faults, f_t, p_t, f_kind, flags_f, flags_p, p_reg, p_page)
        except OSError as e:  # the program ran: its exit status stays the result, the error is reported
            result.trace_error = one_line(from_os_error(e, "trace not written", cfg.trace_out))
        except PagecastError as e:
            result.trace_error = one_line(e)
    return result


def _write_live_trace(
    cfg: LiveConfig,
    mon: FaultMonitor,
    result: LiveResult,
    faults: dict[str, np.ndarray],
    f_t: np.ndarray,
    p_t: np.ndarray,
    f_kind: np.ndarray,
    flags_f: np.ndarray,
    flags_p: np.ndarray,
    p_reg: np.ndarray,
    p_page: np.ndarray,
) -> None:
    """The run's faults and PREFETCH rows, in time order, as the trace ``cfg.trace_out``."""
    t_all = np.concatenate([f_t, p_t])
    order_all = np.argsort(t_all, kind="stable")
    n_p = len(p_t)
    w = TraceWriter(
        cfg.trace_out,
        regions=list(mon.regions),
        source="live",
        meta={"command": list(cfg.cmd), "cwd": os.getcwd(), "predictor": result.predictor, "live": _meta(result)},
    )
    try:
        w.write(
            t_ns=t_all[order_all],
            region=np.concatenate([faults["region"].astype(np.int32), p_reg])[order_all],
            page=np.concatenate([faults["page"].astype(np.int64), p_page])[order_all],
            kind=np.concatenate([f_kind, np.full(n_p, int(Kind.PREFETCH), np.uint8)])[order_all],
            flags=np.concatenate([flags_f, flags_p])[order_all],
            tid=np.concatenate([faults["tid"].astype(np.int32), np.full(n_p, -1, np.int32)])[order_all],
            ip=np.concatenate([faults["ip"].astype(np.uint64), np.zeros(n_p, np.uint64)])[order_all],
            bytes=np.concatenate([np.zeros(len(f_t), np.uint32), np.full(n_p, PAGE_SIZE, np.uint32)])[order_all],
        )
    except BaseException:
        w.abort()
        raise
    w.close()
    result.trace = str(cfg.trace_out)


def _renice_self_and_collector(
    mon: FaultMonitor, inc: int, extra_pids: Sequence[int] = (), collector: bool = True, only_collector: bool = False
) -> list[tuple[int, int]]:
    """Add ``inc`` to the niceness of every thread of this process (unless ``only_collector``)
    and of the collector process (if ``collector``): +10 lowers the recording daemon's
    priority; the fast path raises the collector's with a negative ``inc``.

    The program was forked by the collector before this call, so it keeps its priority.
    Returns (tid, old niceness) to restore; empty when not root (could not undo it, and
    later programs started from this process would inherit it).
    """
    if os.geteuid() != 0:
        return []
    tids = [] if only_collector else [int(t) for t in os.listdir("/proc/self/task")]
    coll = mon.collector_pid if collector else None
    for pid in ([coll] if coll is not None else []) + list(extra_pids):
        try:
            tids += [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            pass
    done = []
    for tid in tids:
        try:
            old = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, max(-20, min(19, old + inc)))
            done.append((tid, old))
        except OSError:
            pass
    return done


def _restore_nice(done: list[tuple[int, int]]) -> None:
    for tid, old in done:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, old)
        except OSError:
            pass


def _live_ids(spec: SourceSpec, regions: Sequence, old: np.ndarray) -> np.ndarray:
    """Map a schedule's region ids to this run's (-1 where the region never appeared)."""
    from pagecast.live.sources import load_replay
    from pagecast.trace.regions import match_regions

    mapping = match_regions(load_replay(spec.path).regions, regions) if spec.kind == "schedule" else {}
    return np.asarray([mapping.get(int(o), -1) for o in old.tolist()], np.int32)


def _next_fault(fk: np.ndarray, ft: np.ndarray, pk: np.ndarray, pt: np.ndarray) -> np.ndarray:
    """For each prefetch (pk, pt): index into the (key, t)-sorted faults of the first fault
    with the same key and t >= pt, or -1."""
    nf, npf = len(fk), len(pk)
    if npf == 0 or nf == 0:
        return np.full(npf, -1, np.int64)
    key = np.concatenate([fk, pk])
    t = np.concatenate([ft, pt])
    is_p = np.concatenate([np.zeros(nf, np.int8), np.ones(npf, np.int8)])
    # at equal times the prefetch sorts first (-is_p), so a fault at the same instant counts
    o = np.lexsort((-is_p, t, key))
    pos_fault = np.where(is_p[o] == 0, np.arange(len(o)), len(o))
    nxt_pos = np.minimum.accumulate(pos_fault[::-1])[::-1]  # next fault position at or after i
    out = np.full(npf, -1, np.int64)
    ppos = np.nonzero(is_p[o] == 1)[0]
    pidx = o[ppos] - nf
    cand = nxt_pos[ppos]
    ok = cand < len(o)
    cand_c = np.minimum(cand, len(o) - 1)
    ok &= key[o[cand_c]] == pk[pidx]
    out[pidx[ok]] = o[cand_c[ok]]  # o[...] < nf: a fault row, already in (key, t) order
    return out


def _meta(r: LiveResult) -> dict[str, Any]:
    d = r.to_dict()
    d.pop("trace", None)
    return d


def exit_status(returncode: int) -> int:
    """Shell convention: a program killed by signal N exits 128 + N."""
    return 128 - returncode if returncode < 0 else returncode
