"""``pagecast bench``: kernel strategies vs pagecast's live prefetching on the sparse-weights
workload, cold page cache every run, measured side by side in the same run.

Every run starts cold: the previous process has exited (so no mapping of the weights is
left) and the file gets posix_fadvise(DONTNEED). Strategies run interleaved round by
round, so slow phases of a shared machine hit them all alike; medians are reported.

The time compared is the program's own wall time (from its start to its last token, as
it prints it): pagecast's predictor is loaded before the program starts, as a daemon
would be.

Page-pack rows run the program under the userfaultfd pager (LD_PRELOAD shim) with a pack
built from the training runs (``pagecast.pager.pack``): the pack file is made cold too,
and its bytes count in "bytes read"; their "major faults" are the pager's faults (the
program's mapping is anonymous memory there, so the kernel's counter says nothing).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pagecast.bench import sparse_weights as wl
from pagecast.bench.results import RunRow, summarise
from pagecast.errors import PagecastError
from pagecast.live.loop import LiveConfig, run_live
from pagecast.live.sources import default_min_runs, merge_schedules, schedule_from_trace
from pagecast.live.worker import SourceSpec
from pagecast.pager.pack import pack_from_schedules
from pagecast.policies.spec import parse_policy_spec
from pagecast.trace.schedule import write_schedule
from pagecast.util.atomic import atomic_output, atomic_write_text

KERNEL = ("random", "normal", "sequential", "willneed")
KERNEL_LABEL = {
    "random": "kernel: no prefetch (MADV_RANDOM)",
    "normal": "kernel: default read-around",
    "sequential": "kernel: MADV_SEQUENTIAL",
    "willneed": "kernel: WILLNEED whole file",
}


@dataclass
class BenchConfig:
    out_dir: Path
    weights: Path | None = None
    size_mib: int = 1024
    tokens: int = 4
    train_prompts: tuple[int, ...] = tuple(range(101, 109))
    min_runs: int | None = None  # pages kept in the replay schedule and pack: touched by >= this many training runs
    test_prompt: int = 7
    runs: int = 3
    policies: tuple[str, ...] = ("nextline", "markov")
    model: Path | None = None  # a trained model; None: train one if learn is available and train_model is set
    train_model: bool = True
    epochs: int = 3
    lookahead: int = 8192
    gap: int = 4
    threads: int = 2
    pack: bool = True  # page-pack rows (userfaultfd pager + sequential pack of the training runs)
    pack_defer: int | None = None  # pages a fault may wait for the pack loader (None: the pager's default)
    extra: list[str] = field(default_factory=list)  # more workload flags


def _workload(cfg: BenchConfig, weights: Path, prompt: int, advice: str) -> wl.WorkloadConfig:
    return wl.WorkloadConfig(weights, prompt=prompt, tokens=cfg.tokens, advice=advice, extra=list(cfg.extra))


def record_run(cfg: BenchConfig, weights: Path, prompt: int, out: Path) -> Path:
    """A cold run under the collector (no prefetching): every first touch is a major fault."""
    wl.drop_cache(weights)
    res = run_live(
        LiveConfig(_workload(cfg, weights, prompt, "random").argv(), trace_out=out, stdout=subprocess.DEVNULL)
    )
    if res.returncode != 0:
        raise PagecastError(f"recording run (prompt {prompt}) failed with status {res.returncode}")
    return out


def train_learned(traces: list[Path], out: Path, epochs: int) -> Path | None:
    """Train the default LSTM on the training runs (as `pagecast train` would); None without torch."""
    try:
        from pagecast.learn.train import TrainConfig, train_on_traces
    except ImportError:
        return None
    train_on_traces(traces, out, tcfg=TrainConfig(epochs=epochs, windows_per_epoch=4096, patience=1))
    return out


def _plain(cfg: BenchConfig, weights: Path, advice: str, name: str, rnd: int, warm: bool = False) -> RunRow:
    if warm:
        wl.warm_cache(weights)
    else:
        wl.drop_cache(weights)
    o = wl.run_plain(_workload(cfg, weights, cfg.test_prompt, advice))
    if o.returncode != 0:
        raise PagecastError(f"{name}: workload failed ({o.stderr.strip()[:200]})")
    return workload_row(name, "warm" if warm else "kernel", rnd, o.result, o.bytes_cached, o.major_faults)


def workload_row(
    name: str,
    kind: str,
    rnd: int,
    result: dict[str, Any],
    bytes_read: int,
    major_faults: int,
    prefetched: int = 0,
    case: str = "",
) -> RunRow:
    """The row of a run of the workload: its own timings and checksum (``result``, its JSON
    line) and what the harness counted around it; ``case``: a variant of the workload with
    its own baselines (its dense pass under a memory limit)."""
    return RunRow(
        name,
        kind,
        rnd,
        result["wall_s"],
        bytes_read,
        case=case,
        major_faults=major_faults,
        prefetched=prefetched,
        ttft_s=result["ttft_s"],
        tokens_per_s=result["tokens_per_s"],
        checksum=result["checksum"],
    )


def _live(cfg: BenchConfig, weights: Path, spec: SourceSpec, name: str, rnd: int, kind: str = "pagecast") -> RunRow:
    wl.drop_cache(weights)
    out_r, out_w = os.pipe()  # the workload's JSON line; it is one short line, the pipe cannot fill
    res = run_live(
        LiveConfig(
            _workload(cfg, weights, cfg.test_prompt, "random").argv(),
            spec,
            threads=cfg.threads,
            gap=cfg.gap,
            stdout=out_w,
        )
    )
    os.close(out_w)
    with os.fdopen(out_r) as f:
        r = wl.parse_result(f.read())
    if res.returncode != 0 or not r:
        raise PagecastError(f"{name}: workload failed under pagecast run (status {res.returncode})")
    cached = int(wl.resident_pages(weights).sum()) * wl.PAGE
    row = workload_row(name, kind, rnd, r, cached, res.faults_major, res.prefetch_pages)
    row.live = res  # type: ignore[attr-defined]
    return row


def _pager(cfg: BenchConfig, weights: Path, pack: Path | None, name: str, rnd: int, kind: str = "pagecast") -> RunRow:
    from pagecast.pager.runtime import run_pager

    wl.drop_cache(weights)
    if pack is not None:
        wl.drop_cache(pack)
    out_r, out_w = os.pipe()
    res = run_pager(
        _workload(cfg, weights, cfg.test_prompt, "random").argv(),
        [(str(weights), weights.stat().st_size)],
        policy="none",
        packs=[pack] if pack else (),
        pack_defer=cfg.pack_defer,
        stdout=out_w,
    )
    os.close(out_w)
    with os.fdopen(out_r) as f:
        r = wl.parse_result(f.read())
    if res.returncode != 0 or not r or len(res.stats) != 1:
        raise PagecastError(f"{name}: workload failed under the pager (status {res.returncode})")
    st = res.stats[0]
    # state 3 with pages installed: the program ended before the loader reached the pack's tail
    if pack is not None and (st["pack_state"] == 0 or st["pack_installed"] == 0):
        raise PagecastError(f"{name}: the page pack was not loaded (state {st['pack_state']}; see the warning above)")
    read, faults = st["bytes_read"] + st["pack_bytes_read"], st["faults"] + st["pack_deferred"]
    return workload_row(name, kind, rnd, r, read, faults, st["pack_installed"])


@dataclass
class _Inputs:
    """What every strategy of one benchmark is built from."""

    traces: list[Path]
    min_runs: int
    sched_len: int
    sched_path: Path
    oracle_path: Path
    pack_path: Path | None
    oracle_pack: Path | None
    model: Path | str | None
    learned_note: str | None


def _prepare(cfg: BenchConfig, weights: Path, out: Path, log: Callable[[str], None]) -> _Inputs:
    """The training runs and what is learned from them, the oracle run, and the packs."""
    traces = []
    for p in cfg.train_prompts:
        log(f"recording training run, prompt {p}")
        traces.append(record_run(cfg, weights, p, out / f"train_prompt{p}.parquet"))
    min_runs = cfg.min_runs if cfg.min_runs is not None else default_min_runs(len(traces))
    sched = merge_schedules([schedule_from_trace(str(t)) for t in traces], min_runs)
    sched_path = write_schedule(out / "replay.schedule.parquet", sched)
    log(f"replay schedule: {len(sched)} pages touched by at least {min_runs} of {len(traces)} training runs")
    log(f"recording the oracle run (test prompt {cfg.test_prompt})")
    oracle_trace = record_run(cfg, weights, cfg.test_prompt, out / f"oracle_prompt{cfg.test_prompt}.parquet")
    oracle_path = write_schedule(out / "oracle.schedule.parquet", schedule_from_trace(str(oracle_trace)))

    pack_path = oracle_pack = None
    if cfg.pack:
        # the pack holds the training runs' pages (never this run's); the oracle pack this run's
        pack_path = pack_from_schedules([sched], weights, out / "replay.pack").path
        oracle_pack = pack_from_schedules([schedule_from_trace(str(oracle_trace))], weights, out / "oracle.pack").path
        log(f"page pack: {pack_path.stat().st_size >> 10} KiB from the training runs")

    model = cfg.model
    learned_note = None
    if model is None and cfg.train_model:
        log("training the learned model (pagecast train)")
        model = train_learned(traces, out / "model.pt", cfg.epochs)
        if model is None:
            learned_note = "learned model skipped: torch is not installed (pip install 'pagecast[learn]')"
    return _Inputs(traces, min_runs, len(sched), sched_path, oracle_path, pack_path, oracle_pack, model, learned_note)


def _strategies(
    cfg: BenchConfig,
    weights: Path,
    inp: _Inputs,
    extra_rows: Callable[[list[Path], Path], list[tuple[str, Callable[[int], RunRow]]]] | None,
) -> list[tuple[str, Callable[[int], RunRow]]]:
    """Every strategy of a round, in the order they run: the kernel's, pagecast's, the oracles."""
    strategies: list[tuple[str, Callable[[int], RunRow]]] = []

    def plain(name: str, advice: str, warm: bool = False) -> None:
        strategies.append((name, lambda r: _plain(cfg, weights, advice, name, r, warm=warm)))

    def live(name: str, spec: SourceSpec, kind: str = "pagecast") -> None:
        strategies.append((name, lambda r: _live(cfg, weights, spec, name, r, kind)))

    def pager(name: str, pack: Path | None, kind: str = "pagecast") -> None:
        strategies.append((name, lambda r: _pager(cfg, weights, pack, name, r, kind)))

    for adv in KERNEL:
        plain(KERNEL_LABEL[adv], adv)
    live("pagecast: monitor only", SourceSpec())  # the collector and daemon alone: what watching costs
    for pol in cfg.policies:
        ps = parse_policy_spec(pol)
        live(f"pagecast: {pol}", SourceSpec("policy", ps.name, options=ps.options))
    live("pagecast: schedule replay", SourceSpec("schedule", "replay", str(inp.sched_path), lookahead=cfg.lookahead))
    if inp.model is not None:
        live("pagecast: learned model", SourceSpec("model", "model", str(inp.model)))
    if inp.pack_path is not None:
        pager("pagecast: pager, no pack", None)
        pager("pagecast: page pack (replay)", inp.pack_path)
    if extra_rows is not None:
        strategies.extend(extra_rows(inp.traces, weights))
    oracle_spec = SourceSpec("schedule", "oracle", str(inp.oracle_path), lookahead=cfg.lookahead)
    live("oracle (this run's pages)", oracle_spec, "oracle")
    if inp.oracle_pack is not None:
        pager("oracle page pack (this run's pages)", inp.oracle_pack, "oracle")
    plain("warm cache", "normal", warm=True)
    return strategies


def _run_rounds(
    cfg: BenchConfig, strategies: list[tuple[str, Callable[[int], RunRow]]], log: Callable[[str], None]
) -> tuple[list[RunRow], dict[str, list[dict]]]:
    """``cfg.runs`` rounds of every strategy in turn; the rows, and the live loop's latencies."""
    rows: list[RunRow] = []
    lat: dict[str, list[dict]] = {}
    for rnd in range(cfg.runs):
        for name, fn in strategies:
            log(f"round {rnd + 1}/{cfg.runs}: {name}")
            row = fn(rnd)
            live = getattr(row, "live", None)
            if live is not None:
                lat.setdefault(name, []).append(
                    {
                        "seen": live.latency_seen_us,
                        "submit": live.latency_submit_us,
                        "late": live.prefetch_late,
                        "useless": live.prefetch_useless,
                        "used": live.prefetch_used,
                    }
                )
                del row.live  # type: ignore[attr-defined]
            rows.append(row)
    return rows, lat


def run_bench(
    cfg: BenchConfig,
    log: Callable[[str], None] = lambda s: None,
    extra_rows: Callable[[list[Path], Path], list[tuple[str, Callable[[int], RunRow]]]] | None = None,
) -> dict[str, Any]:
    """``extra_rows(training traces, weights)``: more strategies, run in the same interleaved rounds."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    load_start = list(os.getloadavg())
    log("building the workload")
    wl.binary()
    weights = wl.ensure_weights(cfg.weights, cfg.size_mib)
    log(f"weights: {weights} ({weights.stat().st_size >> 20} MiB)")
    inp = _prepare(cfg, weights, out, log)
    strategies = _strategies(cfg, weights, inp, extra_rows)
    rows, lat = _run_rounds(cfg, strategies, log)
    summary = summarise(rows, [n for n, _ in strategies])
    cases = {r.case for r in rows}
    same = all(len({r.checksum for r in rows if r.case == c}) == 1 for c in cases)
    report = {
        "command": "pagecast bench",
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "weights": str(weights),
        "weights_mib": weights.stat().st_size >> 20,
        "replay_pages": inp.sched_len,
        "min_runs": inp.min_runs,
        "pack": str(inp.pack_path) if inp.pack_path else None,
        "load_average_start": load_start,
        "load_average_end": list(os.getloadavg()),
        "model": str(inp.model) if inp.model else None,
        "learned_note": inp.learned_note,
        "strategies": summary,
        "live": lat,
        "runs": [asdict(r) for r in rows],
        "same_output_every_run": same,
        "elapsed_s": round(time.time() - t_start, 1),
    }
    main = [s for s in summary if not s["case"]]
    report["best_kernel"] = next(s["strategy"] for s in main if s["best_kernel"])
    report["speedup_vs_best_kernel"] = {s["strategy"]: s["vs_best_kernel"] for s in main if s["kind"] == "pagecast"}
    for case in sorted(cases - {""}):
        rows_c = [s for s in summary if s["case"] == case]
        report.setdefault("cases", {})[case] = {
            "best_kernel": next((s["strategy"] for s in rows_c if s["best_kernel"]), None),
            "speedup_vs_best_kernel": {s["strategy"]: s["vs_best_kernel"] for s in rows_c if s["kind"] == "pagecast"},
        }
    atomic_write_text(out / "bench.json", json.dumps(report, indent=2))
    report["plot"] = str(plot(report, out / "bench.png"))
    report["report"] = str(out / "bench.json")
    return report


def plot(report: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = report["strategies"]
    names = [x["strategy"] for x in s]
    walls = [x["wall_s"] for x in s]
    lo = [x["wall_s"] - x["wall_min_s"] for x in s]
    hi = [x["wall_max_s"] - x["wall_s"] for x in s]
    colors = ["#999999" if x["kind"] == "kernel" else "#1f77b4" if x["kind"] == "pagecast" else "#2ca02c" for x in s]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(names) + 1.5))
    y = np.arange(len(names))
    ax.barh(y, walls, xerr=[lo, hi], color=colors)
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel("program wall time, s (median, min-max bars), cold page cache")
    ax.set_title(
        f"sparse weights ({report['weights_mib']} MiB, {report['config']['tokens']} tokens): "
        f"{report['config']['runs']} runs each"
    )
    for yi, x in zip(y, s):
        ax.text(x["wall_s"], yi, f"  {x['vs_best_kernel']:.2f}x", va="center")
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return path
