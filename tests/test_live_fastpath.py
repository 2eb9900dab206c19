"""The live loop's native fast path (native/live/fastpath.c inside the collector).

Truths used: the kernel's own fault reports (the collector's trace of the very run), the
program's JSON result line and exit status, the Python ReplaySource fed the same faults
(independent implementation of the same rule), and next-line's definition.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pagecast.bench import sparse_weights as wl
from pagecast.cli import main as cli_main
from pagecast.collect.faultmon import FaultMonitor
from pagecast.errors import PagecastError
from pagecast.live.fastpath import write_config
from pagecast.live.loop import LiveConfig, run_live
from pagecast.live.sources import ReplaySource, load_replay
from pagecast.live.worker import SourceSpec
from pagecast.trace import Kind, open_trace
from pagecast.trace.regions import Region
from pagecast.trace.schedule import Schedule, write_schedule
from perf_support import PredictorKiller, needs_perf

# small and quick: 32 MiB file, 16 layers of 512 rows; ~1.2k cold pages per run
SMALL = ["--hot", "96", "--pool", "128", "--tail", "2", "--ctx", "8"]


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("fast")
    if (
        subprocess.run(["stat", "-f", "-c", "%T", str(d)], check=False, capture_output=True, text=True).stdout.strip()
        == "tmpfs"
    ):
        pytest.skip("tmp dir is tmpfs: files cannot be made cold")
    return wl.ensure_weights(d / "w.bin", size_mib=32)


def _run(weights: Path, spec: SourceSpec, trace: Path | None = None, tokens: int = 2, on_started=None, **kw):
    wl.drop_cache(weights)
    r, w = os.pipe()
    argv = wl.WorkloadConfig(weights, prompt=1, tokens=tokens, advice="random", extra=SMALL).argv()
    res = run_live(LiveConfig(argv, spec, trace_out=trace, stdout=w, **kw), on_started=on_started)
    os.close(w)
    with os.fdopen(r) as f:
        return res, wl.parse_result(f.read())


@pytest.fixture(scope="module")
def recorded(weights, tmp_path_factory):
    trace = tmp_path_factory.mktemp("rec") / "rec.parquet"
    base, out = _run(weights, SourceSpec(), trace=trace)
    assert base.returncode == 0 and base.faults_major > 300
    return trace, base, out


def _sane(lat: dict) -> None:
    assert lat["n"] > 0
    assert 0 <= lat["p50"] <= lat["p99"] <= lat["max"]


@needs_perf
def test_fast_replay_prefetches_what_the_program_touches(weights, recorded, tmp_path):
    trace, base, out0 = recorded
    res, out1 = _run(weights, SourceSpec("schedule", "replay", str(trace), lookahead=256), trace=tmp_path / "f.parquet")
    assert res.fast_path["state"] == "on" and res.fast_path["mode"] == "replay"
    assert out1["checksum"] == out0["checksum"] and res.returncode == 0
    assert res.prefetch_used > 0
    assert res.faults_major < base.faults_major * 0.5, (res.faults_major, base.faults_major)
    # the short lookahead: most prefetches follow faults, so latencies are measured
    assert res.prefetch_at_start <= 256 < res.prefetch_pages
    for lat in (res.latency_fault_us, res.latency_seen_us, res.latency_submit_us):
        _sane(lat)
    # per fault: fault time <= seen time <= issue time, so the fault-based figure is the larger
    assert res.latency_fault_us["p50"] >= res.latency_seen_us["p50"]
    assert res.latency_fault_us["max"] <= res.wall_s * 1e6
    assert res.fast_path["faults"] == res.faults_major + res.faults_minor  # it saw every sample
    assert res.fast_path["fadvise_errors"] == 0 and res.fast_path["handler_ns_p50"] > 0
    t = open_trace(tmp_path / "f.parquet")
    c = t.read(["kind", "flags", "region"])
    assert int((c["kind"] == Kind.PREFETCH).sum()) == res.prefetch_pages
    assert int((c["kind"] == Kind.FAULT_MAJOR).sum()) == res.faults_major
    weights_region = [r.id for r in t.regions if r.path == str(weights)]
    assert np.isin(c["region"][c["kind"] == Kind.PREFETCH], weights_region).mean() > 0.95


@needs_perf
def test_fast_replay_issues_what_the_python_rule_issues(weights, recorded, tmp_path):
    """Feed the live run's faults, in time order, to the Python ReplaySource: it must ask
    for the same weight-file pages the fast path issued during the run."""
    trace, _, _ = recorded
    la = 64
    res, _ = _run(weights, SourceSpec("schedule", "replay", str(trace), lookahead=la), trace=tmp_path / "f.parquet")
    assert res.fast_path["state"] == "on"
    live = open_trace(tmp_path / "f.parquet")
    c = live.read(["t_ns", "region", "page", "kind"])
    wid = next(r.id for r in live.regions if r.path == str(weights))
    got = set(c["page"][(c["kind"] == Kind.PREFETCH) & (c["region"] == wid)].tolist())
    sched = load_replay(trace)
    src = ReplaySource(sched, lookahead=la)
    src.set_regions(live.regions)
    start, _ = src.initial()
    old_wid = next(r.id for r in sched.regions if r.path == str(weights))
    want = set(start.page[start.region == -2 - old_wid].tolist())  # the start window, in schedule ids
    d = np.isin(c["kind"], [int(Kind.FAULT_MAJOR), int(Kind.FAULT_MINOR)])
    # the fast path knows file pages only: other faults count as unknown pages there
    files = [r.id for r in live.regions if r.kind == "file"]
    region = np.where(np.isin(c["region"][d], files), c["region"][d], -1).astype(np.int32)
    p = src.on_batch(c["t_ns"][d], region, c["page"][d], c["kind"][d])
    want |= set(p.page[p.region == wid].tolist())
    assert len(got) > 300
    assert got == want, (len(got - want), len(want - got))


@needs_perf
def test_fast_nextline_issues_the_neighbours_of_each_major_fault(weights, tmp_path):
    res, _ = _run(weights, SourceSpec("policy", "nextline"), trace=tmp_path / "n.parquet")
    assert res.fast_path["state"] == "on" and res.fast_path["mode"] == "nextline"
    t = open_trace(tmp_path / "n.parquet")
    c = t.read(["region", "page", "kind"])
    wid = next(r.id for r in t.regions if r.path == str(weights))
    npages = -(-weights.stat().st_size // 4096)
    maj = c["page"][(c["kind"] == Kind.FAULT_MAJOR) & (c["region"] == wid)]
    want = set()
    for pg in maj.tolist():  # Linux read-around: 16 pages before, 15 after, clipped to the file
        want |= {q for q in range(pg - 16, pg + 16) if q != pg and 0 <= q < npages}
    got = set(c["page"][(c["kind"] == Kind.PREFETCH) & (c["region"] == wid)].tolist())
    assert len(maj) > 100 and got == want


@needs_perf
def test_fast_path_killed_midrun_program_completes(weights, tmp_path, recorded):
    trace, _, _ = recorded
    # enough tokens that the program is still running when the collector is killed (right after its exec)
    _, want = _run(weights, SourceSpec(), tokens=40)
    killer = PredictorKiller()
    res, got = _run(
        weights,
        SourceSpec("schedule", "replay", str(trace), lookahead=256),
        trace=tmp_path / "k.parquet",
        tokens=40,
        on_started=killer,
    )
    assert killer.killed.wait(120) and killer.program_was_running == [True]
    assert res.returncode == 0 and got["checksum"] == want["checksum"] and got["tokens"] == 40
    assert res.predictor_alive is False and res.fast_path["state"] == "died"
    assert "died" in res.predictor_error
    assert open_trace(tmp_path / "k.parquet").num_rows >= res.faults_major


@needs_perf
def test_fast_exit_status_and_output_pass_through(recorded, capfd):
    trace, _, _ = recorded
    assert cli_main(["run", "--schedule", str(trace), "--", "sh", "-c", "echo fast; exit 5"]) == 5
    assert cli_main(["run", "--policy", "stride", "--", "sh", "-c", "kill -TERM $$"]) == 128 + 15
    captured = capfd.readouterr()
    assert "fast" in captured.out and "fast_path" in captured.err and "state=on" in captured.err


@needs_perf
def test_bad_fast_config_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.cfg"
    bad.write_bytes(b"PCFAST1\0" + b"\x01\x00")
    with pytest.raises(PagecastError) as e, FaultMonitor(["true"], fast=bad) as mon:
        list(mon.batches())
    assert str(bad) in str(e.value) and "truncated" in str(e.value) and "\n" not in str(e.value)


def test_anonymous_schedule_stays_on_the_python_path(tmp_path):
    regions = [
        Region(0, "w", kind="file", path="/x/w.bin", length=1 << 20),
        Region(1, "//anon", kind="anon", length=1 << 20),
    ]
    n = 100
    s = Schedule(
        np.arange(n),
        np.zeros(n),
        np.where(np.arange(n) < 50, 0, 1).astype(np.int32),
        np.arange(n),
        np.ones(n),
        regions=regions,
    )
    path = write_schedule(tmp_path / "s.parquet", s)
    why = write_config(SourceSpec("schedule", "replay", str(path)), gap=4)
    assert isinstance(why, str) and "50%" in why and "anonymous" in why
    made = write_config(SourceSpec("schedule", "replay", str(path)), gap=4, anon=False)
    assert not isinstance(made, str) and made[1] == "replay"
    made[0].unlink()
    assert isinstance(write_config(SourceSpec("policy", "markov"), gap=4), str)


@needs_perf
def test_fast_path_follows_the_program_through_fork_and_exec(weights, recorded):
    """The shell forks, the child execs the workload: the fast path's map table must
    follow (fork copies, exec empties, the child's mmaps fill it)."""
    import shlex

    trace, base, out0 = recorded
    argv = wl.WorkloadConfig(weights, prompt=1, tokens=2, advice="random", extra=SMALL).argv()
    wl.drop_cache(weights)
    r, w = os.pipe()
    res = run_live(
        LiveConfig(
            ["sh", "-c", "true; " + shlex.join(argv) + "; exit 3"],
            SourceSpec("schedule", "replay", str(trace), lookahead=256),
            stdout=w,
        )
    )
    os.close(w)
    with os.fdopen(r) as f:
        out = wl.parse_result(f.read())
    assert res.returncode == 3 and out["checksum"] == out0["checksum"]
    assert res.fast_path["state"] == "on" and res.prefetch_used > 0
    assert res.faults_major < base.faults_major * 0.5, (res.faults_major, base.faults_major)


@pytest.mark.parametrize(
    "name,opts", [("nextline", {}), ("nextline", {"window": 9, "before": 0}), ("stride", {"degree": 8, "min_conf": 2})]
)
def test_config_carries_the_registry_id_and_native_params(tmp_path, name, opts):
    """The fast path runs a policy by its registry id (native/policy/pc_policy_ids.h) with the
    parameters its module gives the C step; policies the registry does not give it stay out."""
    import struct

    from pagecast.live.fastpath import MAGIC, REPLAY_MODE
    from pagecast.policies.base import get_prefetcher, policies_for, policy_entry

    assert policies_for("live") == ["nextline", "stride"]
    path, mode = write_config(SourceSpec("policy", name, options=opts), gap=4, directory=str(tmp_path))
    raw = path.read_bytes()
    kind, nfiles, lookahead, gap, p0, p1, nrows = struct.unpack_from("<II4qQ", raw, len(MAGIC))
    assert mode == name and kind == policy_entry(name).native_id != REPLAY_MODE and gap == 4 and nrows == 0
    assert (p0, p1) == get_prefetcher(name, **opts).native_params()
    why = write_config(SourceSpec("policy", "ampm"), gap=4)
    assert isinstance(why, str) and "nextline, stride only" in why
