"""Programs under a memory limit: the kernel alone against pagecast's plan for that limit, per pass.

A *case* is a program that goes over the same data again and again (tokens of a model,
passes of an iterative method, rounds of queries), with training inputs and a held-out
one. The program reports each pass's time itself (one ``pass SECONDS`` line per pass
and one ``result TEXT`` line, appended to the file named by ``$PAGECAST_BENCH_PASSES``),
so what is compared is the steady state after the first pass, not the start-up.

Per case, its working set is measured first: the peak memory (page cache included) of a
cold held-out run in an unlimited memory cgroup. Each limit is a fraction of it. At each
limit the training inputs are recorded under the limit (``pagecast record --memory``),
a plan is built from them (``pagecast plan --memory``), the held-out input is recorded
too (its demand stream priced under Belady's MIN: the floor of bytes read), and then
every strategy runs the held-out input from a cold page cache, interleaved round by
round: the kernel alone in a memory cgroup of the limit (default advice, MADV_RANDOM,
MADV_SEQUENTIAL through the advice shim), ``pagecast run --memory --plan`` with each
backend, the oracle (a plan made, and with ``--measure`` timed, on the held-out input's own
recording under the limit: what the plan's mechanisms reach knowing this run's pages, the
ceiling of any plan learned from other runs), and the roof: no limit, warm cache.

Bytes read are counted per run in a blkio cgroup (v1) holding everything the run starts,
pagecast's helpers included, so other processes' reads on a shared machine do not
count; without one, the device's counters are used.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import statistics
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

from pagecast.bench.coldstart import (
    Input,
    _preload,
    block_device,
    cached_bytes,
    device_sectors_read,
    pagecast_script,
    regular_files,
)
from pagecast.bench.results import KINDS, headroom
from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.util.memcg import remove_stale
from pagecast.util.pagecache import make_cold

PASSES_ENV = "PAGECAST_BENCH_PASSES"
KERNEL_ROWS = {
    "kernel: default": None,
    "kernel: MADV_RANDOM (advice shim)": "random",
    "kernel: MADV_SEQUENTIAL (advice shim)": "sequential",
}
BACKENDS = ("kernel", "pager")
ROOF = "no limit, warm cache (roof)"
ORACLE = "oracle: pagecast run --plan made from this input's own recording"
UNLIMITED = 1 << 40  # a cgroup "limit" that never binds: measures the working set


class Cgroup(Protocol):
    def wrap(self, argv: Sequence[str]) -> list[str]: ...

    def stats(self) -> Any: ...


CgroupFactory = Callable[[int], Any]  # limit bytes -> context manager yielding a Cgroup


@dataclass
class LimitCase:
    """A program, its inputs and the files it reads over and over."""

    name: str
    title: str
    unit: str  # what one pass is: "token", "pass"
    train: list[Input]
    heldout: Input
    files: list[Path]  # made cold before every run
    mmap_files: list[Path] = field(default_factory=list)
    note: str = ""


@dataclass
class Config:
    work_dir: Path
    cgroup: CgroupFactory
    fractions: tuple[float, ...] = (0.75, 0.5)
    rounds: int = 1
    backends: tuple[str, ...] = BACKENDS
    kernel_rows: tuple[str, ...] = tuple(KERNEL_ROWS)
    roof: bool = True
    oracle: bool = True  # a plan from the held-out input's own recording, as a row
    timeout_s: float = 1800.0
    measure_rounds: int = 0  # plan --measure: rounds of timing the plan on the training inputs (0: off)


@dataclass
class Row:
    case: str
    limit_bytes: int
    strategy: str
    kind: str  # of pagecast.bench.results.KINDS: kernel | pagecast | oracle | warm (the roof)
    round: int
    wall_s: float
    per_pass_s: float | None  # median over the passes after the first
    first_pass_s: float | None
    passes: int
    read_bytes: int
    refaults: int | None
    major_faults: int | None
    peak_bytes: int | None
    result: str


# --------------------------------------------------------------------------- accounting


READS_PREFIX = "pagecast-bench-"  # ReadCounter's blkio cgroups: READS_PREFIX<pid>-<hex>


class ReadCounter:
    """Bytes read from block devices by a process tree: a blkio (v1) cgroup beneath this
    process's own, entered by an sh in front of the command; else the data's device."""

    def __init__(self, data: Path):
        self.dir: Path | None = None
        self.dev = block_device(data)
        base = _v1_dir("blkio")
        if base is not None and (base / "blkio.throttle.io_service_bytes").exists():
            remove_stale(base, READS_PREFIX)  # left by a run that was killed (close never ran)
            d = base / f"{READS_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
            try:
                d.mkdir()
                self.dir = d
                # v1 counts a cgroup's bios only on a device it has a throttle rule for: one that never binds
                (d / "blkio.throttle.read_bps_device").write_text(f"{_disk_of(data)} {1 << 50}")
            except OSError:
                self.close()

    @property
    def source(self) -> str:
        return "blkio cgroup of the run" if self.dir else f"device {self.dev} (every process's reads)"

    @contextmanager
    def count(self, argv: Sequence[str]) -> Iterator[tuple[list[str], Callable[[], int]]]:
        if self.dir is None:
            s0 = device_sectors_read(self.dev)
            yield list(argv), lambda: (device_sectors_read(self.dev) - s0) * 512
            return
        before = self._read()
        enter = 'echo 0 > "$0" || exit 125; exec "$@"'
        yield ["/bin/sh", "-c", enter, str(self.dir / "cgroup.procs"), *argv], lambda: self._read() - before

    def _read(self) -> int:
        total = 0
        assert self.dir is not None
        for line in (self.dir / "blkio.throttle.io_service_bytes").read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "Read":
                total += int(parts[2])
        return total

    def close(self) -> None:
        if self.dir is not None:
            for _ in range(50):
                try:
                    self.dir.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)
            self.dir = None


def _disk_of(path: Path) -> str:
    """MAJ:MIN of the whole disk holding ``path`` (a partition's parent)."""
    st = os.stat(path)
    sys_dev = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}").resolve()
    if (sys_dev / "partition").exists():
        sys_dev = sys_dev.parent
    return (sys_dev / "dev").read_text().strip()


def _v1_dir(controller: str) -> Path | None:
    """This process's own directory in a cgroup v1 hierarchy of ``controller``."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            d = Path("/sys/fs/cgroup", controller) / parts[2].lstrip("/")
            return d if d.is_dir() else None
    return None


# --------------------------------------------------------------------------- one run


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    limit: int | None = None  # run inside a memory cgroup of this many bytes (the harness's own)
    warm: bool = False  # run once untimed before, no cold drop
    pagecast_json: bool = False  # stdout is pagecast run's --json report


def read_passes(path: Path) -> tuple[list[float], str]:
    times, result = [], ""
    try:
        text = path.read_text()
    except OSError:
        return times, result
    for line in text.splitlines():
        key, _, val = line.partition(" ")
        if key == "pass":
            times.append(float(val))
        elif key == "result":
            result = val.strip()
    return times, result


def _stats_dict(stats: Any) -> dict[str, Any]:
    if stats is None:
        return {}
    return stats.to_dict() if hasattr(stats, "to_dict") else dict(stats)


def _last_json(text: str) -> dict[str, Any]:
    start = text.find("{")
    while start >= 0:
        try:
            return json.loads(text[start:])
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    return {}


def run_once(
    case: LimitCase, inp: Input, launch: Launch, cfg: Config, counter: ReadCounter, cold: Sequence[Path]
) -> tuple[float, list[float], str, int, dict[str, Any]]:
    """One run: (wall s, pass times, result, bytes read, memory stats)."""
    with tempfile.TemporaryDirectory(prefix="pc-passes-") as tmp:
        passes = Path(tmp) / "passes"
        env = {**os.environ, **(inp.env or {}), **launch.env, PASSES_ENV: str(passes)}
        if launch.warm:
            _run(launch.argv, env, cfg.timeout_s)
            passes.unlink(missing_ok=True)
        else:
            make_cold(cold)
        mem: dict[str, Any] = {}
        if launch.limit is not None:
            with cfg.cgroup(launch.limit) as cg, counter.count(cg.wrap(launch.argv)) as (argv, read):
                t0 = time.perf_counter()
                out = _run(argv, env, cfg.timeout_s)
                wall = time.perf_counter() - t0
                nbytes = read()
                mem = _stats_dict(cg.stats())
        else:
            with counter.count(launch.argv) as (argv, read):
                t0 = time.perf_counter()
                out = _run(argv, env, cfg.timeout_s)
                wall = time.perf_counter() - t0
                nbytes = read()
        if launch.pagecast_json:
            mem = dict(_last_json(out).get("memory") or {})
        times, result = read_passes(passes)
    return wall, times, result, nbytes, mem


def _run(argv: Sequence[str], env: dict[str, str], timeout: float) -> str:
    with tempfile.TemporaryFile() as err:
        proc = subprocess.run(
            list(argv), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, timeout=timeout
        )
        if proc.returncode != 0:
            err.seek(0)
            tail = " | ".join(err.read().decode(errors="replace").strip().splitlines()[-3:])
            raise PagecastError(f"command failed with status {proc.returncode}: {' '.join(argv)[:160]}: {tail[:400]}")
    return proc.stdout.decode(errors="replace")


# --------------------------------------------------------------------------- preparation


def pagecast(*args: str) -> list[str]:
    return [*pagecast_script(), *args]


@dataclass
class WorkingSet:
    """What a cold run with no limit that binds used: its peak (page cache included) and
    the part of it that is the case's data files (their pages cached afterwards)."""

    peak_bytes: int
    data_bytes: int

    @property
    def own_bytes(self) -> int:
        """The program's own memory (heap, libraries, stacks): the peak beside its data, with
        a margin of an eighth (at least 4 MiB). One run's peak is a sample: an interpreter's
        next run can need a few MiB more, and a limit below what the program itself needs
        gets the kernel row killed by the OOM killer instead of measured."""
        own = max(0, self.peak_bytes - self.data_bytes)
        return own + max(own // 8, 4 << 20)

    def limit(self, fraction: float) -> int:
        """The program's own memory plus ``fraction`` of its data, in whole pages."""
        return int(self.own_bytes + fraction * self.data_bytes) // PAGE_SIZE * PAGE_SIZE


def working_set(case: LimitCase, cfg: Config, counter: ReadCounter) -> WorkingSet:
    launch = Launch(list(case.heldout.argv), limit=UNLIMITED)
    _, _, _, _, mem = run_once(case, case.heldout, launch, cfg, counter, case.files)
    peak = int(mem.get("peak_bytes") or 0)
    if peak <= 0:
        raise PagecastError(f"{case.name}: the memory cgroup reported no peak usage")
    return WorkingSet(peak, cached_bytes(regular_files(case.files)))


def record(inp: Input, limit: int, out: Path, case: LimitCase, timeout: float) -> Path:
    make_cold(case.files)
    argv = pagecast("record", "--memory", str(limit), "-o", str(out), "--json", "--", *inp.argv)
    with tempfile.TemporaryDirectory(prefix="pc-passes-") as tmp:
        env = {**os.environ, **(inp.env or {}), PASSES_ENV: str(Path(tmp) / "passes")}
        _run(argv, env, timeout)
    return out


def make_plan(
    traces: Sequence[Path], limit: int, out: Path, timeout: float, measure_rounds: int = 0
) -> tuple[Path | None, str]:
    """``pagecast plan --memory`` on the training recordings; with ``measure_rounds``, the plan
    timed against the kernel alone on the training inputs (``--measure``), kept only if faster."""
    measure = ["--measure", "--rounds", str(measure_rounds)] if measure_rounds else []
    argv = pagecast("plan", "--memory", str(limit), *map(str, traces), "-o", str(out), *measure)
    with tempfile.TemporaryDirectory(prefix="pc-passes-") as tmp:
        env = {**os.environ, PASSES_ENV: str(Path(tmp) / "passes")}  # the programs write their pass times
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        return None, (proc.stderr.strip().splitlines() or ["?"])[-1]
    return out, ""


# the pager's budget for MIN's stream: a page is asked again once 256 others were used since
EXACT_BUDGET = "1M"


def record_uses(inp: Input, files: Sequence[Path], out: Path, timeout: float) -> Path:
    """``inp``'s uses of the pages of ``files`` in order, for MIN: the program run with the
    files served by the userfaultfd pager at a 1 MiB budget (``pagecast pager run -o``), so
    every use of a page not among the last 256 it used is a fault in the trace. A recording
    under the limit shows only what the kernel missed: a page it held between two uses
    appears once, and MIN on that stream is priced below what any policy can read."""
    specs = ",".join(f"{f}:{EXACT_BUDGET}" for f in files)
    with tempfile.TemporaryDirectory(prefix="pc-passes-") as tmp:
        env = {**os.environ, **(inp.env or {}), PASSES_ENV: str(Path(tmp) / "passes")}
        _run(pagecast("pager", "run", specs, "-o", str(out), "--json", "--", *inp.argv), env, timeout)
    return out


def min_read_bytes(trace: Path, files: Sequence[Path], capacity: int) -> int | None:
    """Bytes Belady's MIN reads on the demand stream of ``files`` in ``trace`` with
    ``capacity`` bytes of cache (page granularity, demand paging only); None in a build
    without it. On ``record_uses``' stream that is the floor of what a policy reads; on a
    recording under the limit, a bound below it (the uses the kernel hit are not there)."""
    try:
        import numpy as np

        from pagecast.plan.memory import read_run
        from pagecast.sim.misses import min_misses
    except ImportError:
        return None
    names = {str(Path(f).resolve()): i for i, f in enumerate(files)}
    n = len(names)
    run = read_run(trace, names)  # adds the run's other files after ours
    sel = run.file < n
    if not sel.any():
        return 0
    keys = run.file[sel].astype(np.int64) * (1 << 40) + run.page[sel].astype(np.int64)
    uniq, ids = np.unique(keys, return_inverse=True)
    miss = min_misses(ids.astype(np.int64), len(uniq), max(1, capacity // PAGE_SIZE))
    return int(miss.sum()) * PAGE_SIZE


# --------------------------------------------------------------------------- a case


def strategies(
    case: LimitCase, cfg: Config, limit: int, plan: Path | None, oracle: Path | None = None
) -> list[tuple[str, str, Launch]]:
    argv = list(case.heldout.argv)
    out = []
    for name in cfg.kernel_rows:
        advice = KERNEL_ROWS[name]
        out.append((name, "kernel", Launch(argv, _preload(advice) if advice else {}, limit=limit)))
    if plan is not None:
        for b in cfg.backends:
            cmd = pagecast("run", "--memory", str(limit), "--plan", str(plan), "--backend", b, "--json", "--", *argv)
            out.append((f"pagecast run --plan ({b} backend)", "pagecast", Launch(cmd, pagecast_json=True)))
    if oracle is not None:  # with the backend the oracle's own measuring chose
        cmd = pagecast("run", "--memory", str(limit), "--plan", str(oracle), "--json", "--", *argv)
        out.append((ORACLE, "oracle", Launch(cmd, pagecast_json=True)))
    if cfg.roof:
        out.append((ROOF, "warm", Launch(argv, warm=True)))
    return out


def run_case(case: LimitCase, cfg: Config, log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    work = Path(cfg.work_dir) / case.name
    work.mkdir(parents=True, exist_ok=True)
    files = regular_files(case.files)
    make_cold(files, sync=True)
    counter = ReadCounter(files[0])
    try:
        log(f"{case.name}: measuring the working set (cold, no limit)")
        ws = working_set(case, cfg, counter)
        limits = [ws.limit(f) for f in cfg.fractions]
        uses, why = _held_out_uses(case, cfg, work, files, log)
        per_limit: dict[int, dict[str, Any]] = {}
        for limit in limits:
            per_limit[limit] = _prepare_limit(case, cfg, limit, limit - ws.own_bytes, work, files, uses, log)
            per_limit[limit]["notes"] += [why] if why else []
        rows: list[Row] = []
        for rnd in range(cfg.rounds):
            for limit in limits:
                prep = per_limit[limit]
                runs = prep["strategies"]
                for name, kind, launch in random.Random(rnd * 7919 + limit).sample(runs, len(runs)):
                    if name in prep["failed"]:
                        continue
                    log(f"{case.name} @ {limit >> 20} MiB r{rnd + 1}: {name}")
                    try:
                        rows.append(_row(case, cfg, counter, files, limit, name, kind, launch, rnd))
                    except (PagecastError, subprocess.SubprocessError) as e:
                        # a strategy this build cannot run is reported, not the end of the benchmark
                        prep["failed"].add(name)
                        prep["notes"].append(f"{name}: {str(e)[-300:]}")
        return {
            "case": case.name,
            "title": case.title,
            "unit": case.unit,
            "note": case.note,
            "command": list(case.heldout.argv),
            "train_inputs": [i.name for i in case.train],
            "heldout_input": case.heldout.name,
            "working_set_bytes": ws.peak_bytes,
            "data_bytes": ws.data_bytes,
            "own_bytes": ws.own_bytes,
            "bytes_read_source": counter.source,
            "limits": [
                _summarise_limit(limit, f, [r for r in rows if r.limit_bytes == limit], per_limit[limit])
                for limit, f in zip(limits, cfg.fractions)
            ],
            "runs": [asdict(r) for r in rows],
        }
    finally:
        counter.close()


def _prepare_limit(
    case: LimitCase,
    cfg: Config,
    limit: int,
    data_room: int,
    work: Path,
    files: list[Path],
    uses: Path | None,
    log: Callable[[str], None],
) -> dict[str, Any]:
    d = work / f"limit-{limit >> 20}M"
    d.mkdir(exist_ok=True)
    notes: list[str] = []
    traces: list[Path] = []
    plan: Path | None = None
    oracle: Path | None = None
    min_bytes = min_faults = None
    min_stream = "every use (pager)" if uses is not None else "faults under the limit"
    if not cfg.backends:  # nothing of pagecast's to measure: no recordings, no plan, no MIN
        return {
            "strategies": strategies(case, cfg, limit, None),
            "notes": notes,
            "min_read_bytes": None,
            "min_read_bytes_faults": None,
            "min_stream": None,
            "failed": set(),
        }
    try:
        for i, inp in enumerate(case.train):
            log(f"{case.name} @ {limit >> 20} MiB: recording training input {inp.name}")
            traces.append(record(inp, limit, d / f"train{i}.parquet", case, cfg.timeout_s))
        plan, why = make_plan(traces, limit, d / "train.plan", cfg.timeout_s, cfg.measure_rounds)
        if plan is None:
            notes.append(f"no plan: {why}")
        log(f"{case.name} @ {limit >> 20} MiB: recording the held-out input")
        held = record(case.heldout, limit, d / "heldout.parquet", case, cfg.timeout_s)
        if cfg.oracle:
            log(f"{case.name} @ {limit >> 20} MiB: the oracle's plan, from the held-out input's own recording")
            oracle, why = make_plan([held], limit, d / "oracle.plan", cfg.timeout_s, cfg.measure_rounds)
            if oracle is None:
                notes.append(f"no oracle plan: {why}")
        min_faults = min_read_bytes(held, case.mmap_files or files, data_room)
        min_bytes = min_faults if uses is None else min_read_bytes(uses, case.mmap_files or files, data_room)
        if min_bytes is None:
            notes.append("MIN's bytes: this build's simulator has no MIN")
    except (PagecastError, subprocess.SubprocessError) as e:
        notes.append(f"no recordings under the limit: {str(e)[:300]}")
    make_cold([p for p in (plan, oracle) if p is not None], sync=True)
    return {
        "strategies": strategies(case, cfg, limit, plan, oracle),
        "notes": notes,
        "min_read_bytes": min_bytes,
        "min_read_bytes_faults": min_faults,
        "min_stream": min_stream,
        "failed": set(),
    }


def _held_out_uses(
    case: LimitCase, cfg: Config, work: Path, files: list[Path], log: Callable[[str], None]
) -> tuple[Path | None, str]:
    """MIN's stream of the held-out input (``record_uses``), or None and why not."""
    if not cfg.backends:
        return None, ""
    log(f"{case.name}: recording the held-out input's page uses through the pager (MIN's stream)")
    try:
        return record_uses(case.heldout, case.mmap_files or files, work / "heldout-uses.parquet", cfg.timeout_s), ""
    except (PagecastError, subprocess.SubprocessError) as e:
        return (
            None,
            f"MIN priced on the faults under the limit: the pager could not serve the held-out run ({str(e)[:200]})",
        )


def _row(
    case: LimitCase,
    cfg: Config,
    counter: ReadCounter,
    files: list[Path],
    limit: int,
    name: str,
    kind: str,
    launch: Launch,
    rnd: int,
) -> Row:
    wall, times, result, nbytes, mem = run_once(case, case.heldout, launch, cfg, counter, files)
    after = times[1:]
    return Row(
        case.name,
        limit,
        name,
        kind,
        rnd,
        wall,
        float(statistics.median(after)) if after else None,
        times[0] if times else None,
        len(times),
        nbytes,
        mem.get("refaults"),
        mem.get("major_faults"),
        mem.get("peak_bytes"),
        result,
    )


def _kind_of(rows: list[Row], name: str) -> str:
    return next(r.kind for r in rows if r.strategy == name)


def _summarise_limit(limit: int, fraction: float, rows: list[Row], prep: dict[str, Any]) -> dict[str, Any]:
    med = lambda xs: float(statistics.median(xs)) if xs else None  # noqa: E731
    # listed by kind as every harness lists them (pagecast.bench.results.KINDS), run order within
    names = sorted(dict.fromkeys(r.strategy for r in rows), key=lambda n: KINDS.index(_kind_of(rows, n)))
    out = []
    for n in names:
        rs = [r for r in rows if r.strategy == n]
        per = [r.per_pass_s for r in rs if r.per_pass_s is not None]
        # over the rounds, each run's median pass after the first; pooled passes would mix rounds
        out.append(
            {
                "strategy": n,
                "kind": rs[0].kind,
                "runs": len(rs),
                "per_pass_s": med(per),
                "first_pass_s": med([r.first_pass_s for r in rs if r.first_pass_s is not None]),
                "wall_s": med([r.wall_s for r in rs]),
                "read_bytes": med([r.read_bytes for r in rs]),
                "refaults": med([r.refaults for r in rs if r.refaults is not None]),
                "peak_bytes": med([r.peak_bytes for r in rs if r.peak_bytes is not None]),
                "results": sorted({r.result for r in rs}),
            }
        )
    kern = [x for x in out if x["kind"] == "kernel" and x["per_pass_s"]]
    best = min(kern, key=lambda x: x["per_pass_s"]) if kern else None
    roof = next((x for x in out if x["kind"] == "warm" and x["per_pass_s"] is not None), None)
    for x in out:
        x["best_kernel"] = x is best
        ok = best is not None and x["per_pass_s"]
        x["vs_best_kernel"] = best["per_pass_s"] / x["per_pass_s"] if ok else None
        x["headroom_captured"] = (
            headroom(best["per_pass_s"], x["per_pass_s"], roof["per_pass_s"]) if ok and roof else None
        )
    results = {r for x in out if x["kind"] != "warm" for r in x["results"]}
    return {
        "limit_bytes": limit,
        "fraction": fraction,
        "min_read_bytes": prep["min_read_bytes"],
        "min_read_bytes_faults": prep["min_read_bytes_faults"],
        "min_stream": prep["min_stream"],
        "notes": prep["notes"],
        "same_result": len(results) <= 1,
        "strategies": out,
    }


# --------------------------------------------------------------------------- reporting


def _mib(x: float | None) -> str:
    return "—" if x is None else f"{x / 2**20:,.0f}"


def format_limit(case: dict[str, Any], lim: dict[str, Any]) -> str:
    unit = case["unit"]
    lines = [
        f"#### {case['case']} at {lim['limit_bytes'] >> 20} MiB: its own {case['own_bytes'] >> 20} MiB and "
        f"{lim['fraction']:.0%} of the {case['data_bytes'] >> 20} MiB of data it reads",
        "",
        f"| strategy | s per {unit} after the first (median) | first {unit} s | MiB read | refaults | "
        "vs best kernel | headroom captured |",
        "|---|---|---|---|---|---|---|",
    ]
    for x in lim["strategies"]:
        name = x["strategy"] + (" — best kernel" if x["best_kernel"] else "")
        per = "—" if x["per_pass_s"] is None else f"{x['per_pass_s']:.3f}"
        first = "—" if x["first_pass_s"] is None else f"{x['first_pass_s']:.3f}"
        ratio = "—" if x["vs_best_kernel"] is None else f"{x['vs_best_kernel']:.2f}×"
        hr = "—" if x["headroom_captured"] is None or x["kind"] == "warm" else f"{x['headroom_captured']:.0%}"
        ref = "—" if x["refaults"] is None else f"{x['refaults']:,.0f}"
        lines.append(f"| {name} | {per} | {first} | {_mib(x['read_bytes'])} | {ref} | {ratio} | {hr} |")
    if lim["min_read_bytes"] is not None:
        lines.append(
            f"| Belady's MIN (simulated, held-out input's {lim['min_stream']}) | — | — | {_mib(lim['min_read_bytes'])} | — | — | — |"
        )
    for n in lim["notes"]:
        lines.append(f"\n{n}")
    if not lim["same_result"]:
        lines.append("\nWARNING: the program's result differed between strategies")
    return "\n".join(lines)


def summary(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (case, limit): the best pagecast row against the best kernel row, bytes against MIN,
    and the acceptance figures over all of them."""
    cells = []
    for c in cases:
        for lim in c["limits"]:
            pc = [x for x in lim["strategies"] if x["kind"] == "pagecast" and x["vs_best_kernel"]]
            best = max(pc, key=lambda x: x["vs_best_kernel"]) if pc else None
            mn = lim["min_read_bytes"]
            orc = next((x for x in lim["strategies"] if x["kind"] == "oracle"), None)
            cells.append(
                {
                    "case": c["case"],
                    "limit_bytes": lim["limit_bytes"],
                    "fraction": lim["fraction"],
                    "best_pagecast": best["strategy"] if best else None,
                    "vs_best_kernel": best["vs_best_kernel"] if best else None,
                    "headroom_captured": best["headroom_captured"] if best else None,
                    "read_vs_min": best["read_bytes"] / mn if best and mn else None,
                    "oracle_vs_best_kernel": orc["vs_best_kernel"] if orc else None,
                    "oracle_read_vs_min": orc["read_bytes"] / mn if orc and mn else None,
                }
            )
    ratios = [x["vs_best_kernel"] for x in cells if x["vs_best_kernel"] is not None]
    oracles = [x["oracle_vs_best_kernel"] for x in cells if x["oracle_vs_best_kernel"] is not None]
    return {
        "cells": cells,
        "least_vs_best_kernel": min(ratios) if ratios else None,
        "median_vs_best_kernel": float(statistics.median(ratios)) if ratios else None,
        "cells_measured": len(ratios),
        "median_oracle_vs_best_kernel": float(statistics.median(oracles)) if oracles else None,
    }


def format_summary(s: dict[str, Any]) -> str:
    lines = [
        "| case | limit | best pagecast row | vs best kernel | headroom captured | bytes read / MIN's | oracle | "
        "oracle's bytes / MIN's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    f = lambda v, fmt: "—" if v is None else format(v, fmt)  # noqa: E731
    for x in s["cells"]:
        lines.append(
            f"| {x['case']} | {x['limit_bytes'] >> 20} MiB ({x['fraction']:.0%}) | {x['best_pagecast'] or '—'} | "
            f"{f(x['vs_best_kernel'], '.2f')}× | {f(x['headroom_captured'], '.0%')} | {f(x['read_vs_min'], '.2f')}× | "
            f"{f(x['oracle_vs_best_kernel'], '.2f')}× | {f(x['oracle_read_vs_min'], '.2f')}× |"
        )
    lines.append(
        f"\nleast {f(s['least_vs_best_kernel'], '.2f')}×, median {f(s['median_vs_best_kernel'], '.2f')}× "
        f"over {s['cells_measured']} case×limit cells; the oracle's median "
        f"{f(s['median_oracle_vs_best_kernel'], '.2f')}×"
    )
    return "\n".join(lines)
