"""Live prefetching: real faults of the sparse-weights workload on a small cold file.

Truths used: the program's own major faults as counted by the kernel (FaultMonitor), the
program's JSON result line (must be identical with and without pagecast), its exit
status; helper functions are checked against brute-force references.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pagecast.bench import sparse_weights as wl
from pagecast.cli import main as cli_main
from pagecast.errors import PagecastError
from pagecast.live.injector import merge_ranges
from pagecast.live.loop import LiveConfig, _next_fault, run_live
from pagecast.live.sources import ReplaySource, default_min_runs, merge_schedules
from pagecast.live.worker import SourceSpec
from pagecast.trace import Kind, open_trace
from pagecast.trace.regions import Region
from pagecast.trace.schedule import Schedule
from perf_support import PredictorKiller, needs_perf

# small and quick: 32 MiB file, 16 layers of 512 rows; ~1.2k cold pages per run
SMALL = ["--hot", "96", "--pool", "128", "--tail", "2", "--ctx", "8"]


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("live")
    if subprocess.run(["stat", "-f", "-c", "%T", str(d)], capture_output=True, text=True).stdout.strip() == "tmpfs":
        pytest.skip("tmp dir is tmpfs: files cannot be made cold")
    return wl.ensure_weights(d / "w.bin", size_mib=32)


def _argv(weights: Path, prompt: int = 1, tokens: int = 2) -> list[str]:
    return wl.WorkloadConfig(weights, prompt=prompt, tokens=tokens, advice="random", extra=SMALL).argv()


def _run(
    weights: Path, spec: SourceSpec, trace: Path | None = None, prompt: int = 1, tokens: int = 2, on_started=None, **kw
):
    wl.drop_cache(weights)
    r, w = os.pipe()
    res = run_live(
        LiveConfig(_argv(weights, prompt, tokens), spec, trace_out=trace, stdout=w, **kw), on_started=on_started
    )
    os.close(w)
    with os.fdopen(r) as f:
        return res, wl.parse_result(f.read())


# -- pure functions ---------------------------------------------------------------------


def test_merge_ranges_exact():
    region = np.array([0, 0, 0, 0, 0, 1, 1, 0], np.int32)
    page = np.array([1, 2, 5, 11, 10, 12, 13, 14], np.int64)
    starts, reg, first, n = merge_ranges(region, page, gap=2)
    # 1,2 (+gap 3,4) 5 merge; 11 starts anew (gap 5); 10 < 11 breaks; region change; back to 0
    assert starts.tolist() == [0, 3, 4, 5, 7]
    assert reg.tolist() == [0, 0, 0, 1, 0]
    assert first.tolist() == [1, 11, 10, 12, 14]
    assert n.tolist() == [5, 1, 1, 2, 1]


def test_next_fault_matches_brute_force():
    rng = np.random.default_rng(3)
    fk, ft = rng.integers(0, 20, 500), rng.integers(0, 1000, 500)
    pk, pt = rng.integers(0, 25, 300), rng.integers(0, 1000, 300)
    order = np.lexsort((ft, fk))
    got = _next_fault(fk[order], ft[order], pk, pt)
    sfk, sft = fk[order], ft[order]
    for j in range(len(pk)):
        cand = [i for i in range(len(sfk)) if sfk[i] == pk[j] and sft[i] >= pt[j]]
        want = min(cand, key=lambda i: (sft[i], i)) if cand else -1
        assert got[j] == want or (want >= 0 and sft[got[j]] == sft[want] and sfk[got[j]] == pk[j])


def test_replay_source_paces_by_faults():
    regions = [Region(0, "w", kind="file", path="/nonexistent/w.bin", length=1 << 20)]
    pages = np.arange(100, 200)
    s = Schedule(np.arange(100), np.zeros(100), np.zeros(100, np.int32), pages, np.ones(100), regions=regions)
    src = ReplaySource(s, lookahead=10)
    live = [Region(3, "w", kind="file", path="/nonexistent/w.bin", length=1 << 20)]
    src.set_regions(live)
    fault = lambda pg: src.on_batch(
        np.array([0]),
        np.array([3], np.int32),
        np.array([pg]),  # noqa: E731
        np.array([Kind.FAULT_MAJOR], np.uint8),
    )
    # a fault on page 105 (schedule row 5, within the lookahead) jumps the cursor: rows 0..15 go out
    p = fault(105)
    assert p.region.tolist() == [3] * 16 and p.page.tolist() == list(range(100, 116))
    # page 190 is row 90: too far ahead to trust, so it counts as one step (row 16)
    assert fault(190).page.tolist() == [116]
    # an unknown page advances by one row too
    assert fault(999).page.tolist() == [117]
    # an already passed page as well
    assert fault(101).page.tolist() == [118]


def test_merge_schedules_union_in_relative_order():
    reg = [Region(0, "w", kind="file", path="/x")]
    a = Schedule(
        np.array([0, 1, 2]), np.zeros(3), np.zeros(3, np.int32), np.array([10, 20, 30]), np.ones(3), regions=reg
    )
    b = Schedule(
        np.array([0, 2, 4]),
        np.zeros(3),
        np.zeros(3, np.int32),
        np.array([15, 20, 40]),
        np.ones(3),
        regions=[Region(5, "w", kind="file", path="/x")],
    )
    b = Schedule(b.trigger, b.t_ns, np.full(3, 5, np.int32), b.page, b.score, regions=b.regions)
    m = merge_schedules([a, b])
    assert m.page.tolist() == [10, 15, 20, 30, 40] and set(m.region.tolist()) == {0}


def _run_schedule(pages: list[int]) -> Schedule:
    n = len(pages)
    return Schedule(
        np.arange(n),
        np.zeros(n),
        np.zeros(n, np.int32),
        np.array(pages),
        np.ones(n),
        regions=[Region(0, "w", kind="file", path="/x")],
    )


def test_merge_schedules_min_runs_keeps_pages_enough_runs_touched():
    runs = [[1, 2, 3, 9], [2, 3, 4, 9], [3, 5, 9, 2], [3, 6, 7, 8]]
    scheds = [_run_schedule(r) for r in runs]
    support = {p: sum(p in r for r in runs) for r in runs for p in r}
    for k in (1, 2, 3, 4):
        m = merge_schedules(scheds, min_runs=k)
        assert set(m.page.tolist()) == {p for p, c in support.items() if c >= k}
        assert m.score.tolist() == [support[p] / 4 for p in m.page.tolist()]
        assert m.meta["min_runs"] == k
    # order is still the earliest relative position over the runs (ties: the earlier run's
    # first): 2 and 3 are at 0 in runs 1 and 2, 9 at 2/3 in run 2
    assert merge_schedules(scheds, min_runs=2).page.tolist() == [2, 3, 9]
    # a page a run touches twice counts once
    twice = [_run_schedule([1, 1, 2]), _run_schedule([2, 3])]
    assert merge_schedules(twice, min_runs=2).page.tolist() == [2]
    for bad in (0, 5):
        with pytest.raises(PagecastError, match="min_runs"):
            merge_schedules(scheds, min_runs=bad)
    assert [default_min_runs(n) for n in (1, 3, 4, 12)] == [1, 1, 2, 2]


def test_train_prompts_parse_ranges_and_reject_junk():
    from pagecast.cli.bench import parse_prompts

    assert parse_prompts("101-104,110") == (101, 102, 103, 104, 110)
    assert parse_prompts(" 7 ") == (7,)
    for bad, msg in (("a,b", "integers or ranges"), ("9-3", "empty range")):
        with pytest.raises(PagecastError, match=msg):
            parse_prompts(bad)


def test_bench_min_runs_out_of_range_is_a_one_line_error(capfd):
    assert cli_main(["bench", "--train-prompts", "1,2", "--min-runs", "3"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--min-runs must be between 1 and the number of training prompts (2)" in err[0]


# -- live runs ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(weights, tmp_path_factory):
    """A cold run without prefetching, recorded: the baseline and the schedule to replay."""
    trace = tmp_path_factory.mktemp("rec") / "rec.parquet"
    base, out = _run(weights, SourceSpec(), trace=trace)
    assert base.returncode == 0 and out
    assert base.faults_major > 300  # cold: every first touch is a major fault
    return trace, base, out


@needs_perf
def test_replay_cuts_major_faults_and_keeps_output(weights, recorded, tmp_path):
    trace, base, out0 = recorded
    res, out1 = _run(weights, SourceSpec("schedule", "replay", str(trace)), trace=tmp_path / "live.parquet")
    assert out1["checksum"] == out0["checksum"]  # same computation, same result
    assert res.prefetch_pages > 0 and res.prefetch_used > 0
    assert res.faults_major < base.faults_major * 0.5, (res.faults_major, base.faults_major)
    t = open_trace(tmp_path / "live.parquet")
    kinds = t.read(["kind"])["kind"]
    assert int((kinds == Kind.PREFETCH).sum()) == res.prefetch_pages
    assert int((kinds == Kind.FAULT_MAJOR).sum()) == res.faults_major


@needs_perf
def test_replay_paced_by_live_faults(weights, recorded):
    trace, base, out0 = recorded
    # a short lookahead: most prefetches are issued in response to this run's faults
    res, out1 = _run(weights, SourceSpec("schedule", "replay", str(trace), lookahead=256))
    assert out1["checksum"] == out0["checksum"]
    assert res.prefetch_at_start <= 256 < res.prefetch_pages
    assert res.latency_submit_us["n"] > 0 and res.latency_submit_us["p50"] is not None
    assert res.prefetch_used > 0 and res.faults_major < base.faults_major


@needs_perf
def test_survives_predictor_killed_midrun(weights, tmp_path):
    killer = PredictorKiller()
    _, want = _run(weights, SourceSpec(), tokens=6)
    # the Python predictor process (nextline takes the native fast path by default: test_live_fastpath.py)
    res, got = _run(
        weights, SourceSpec("policy", "nextline"), trace=tmp_path / "k.parquet", tokens=6, on_started=killer, fast=False
    )
    assert killer.killed.wait(120) and killer.program_was_running == [True]
    assert res.returncode == 0
    assert got["checksum"] == want["checksum"] and got["tokens"] == 6
    assert res.predictor_alive is False
    assert res.faults_major > 0 and open_trace(tmp_path / "k.parquet").num_rows >= res.faults_major


@needs_perf
def test_exit_status_passes_through(capfd):
    assert cli_main(["run", "--", "sh", "-c", "echo hello; exit 7"]) == 7
    assert cli_main(["run", "--policy", "nextline", "--", "sh", "-c", "exit 3"]) == 3
    assert "hello" in capfd.readouterr().out


def test_malformed_schedule_one_line_error(tmp_path, capfd):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all\n")
    assert cli_main(["run", "--schedule", str(bad), "--", "true"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and "error" in err[0]


def test_unknown_policy_one_line_error(capfd):
    assert cli_main(["run", "--policy", "nosuch", "--", "true"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nosuch" in err[0]


def test_cuda_and_pager_errors_are_one_line(capfd, tmp_path):
    cases = [
        (["run", "--cuda", "--", "true"], "give exactly one of a schedule or a model"),
        (
            ["run", "--pager", str(tmp_path / "nodir" / "missing.bin") + ":1M", "--", "true"],
            "no such directory for the file to page",
        ),
    ]
    for argv, message in cases:
        assert cli_main(argv) == 2
        lines = capfd.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0]


def test_bad_pager_spec():
    with pytest.raises(SystemExit):
        raise SystemExit(cli_main(["run", "--pager", "nobudget", "--", "true"]))


@needs_perf
def test_program_keeps_priority_daemon_restored(tmp_path):
    out = tmp_path / "nice.txt"
    before = os.getpriority(os.PRIO_PROCESS, 0)
    # only root can undo a renice, so only then does the daemon renice itself (live.py)
    daemon_nice = min(19, before + 10) if os.geteuid() == 0 else before
    # the program reads its own niceness once it sees the daemon reniced (a condition, not
    # a delay: on a loaded machine the renice can come late); it gives up after 60 s
    nice_of = "$(cut -d' ' -f19 /proc/{}/stat)"
    script = (
        f'i=0; while [ "{nice_of.format(os.getpid())}" != {daemon_nice} ] && [ $i -lt 6000 ]; do '
        f'sleep 0.01; i=$((i+1)); done; echo "{nice_of.format(os.getpid())} {nice_of.format("self")}" > {out}'
    )
    res = run_live(LiveConfig(["sh", "-c", script], nice=10))
    assert res.returncode == 0
    seen_daemon, seen_program = map(int, out.read_text().split())
    assert seen_daemon == daemon_nice  # the daemon had reniced itself while the program ran
    assert seen_program == before  # the program was not reniced
    assert os.getpriority(os.PRIO_PROCESS, 0) == before  # and the daemon got its priority back


def test_bench_trains_the_learned_model_through_the_cli(tmp_path):
    # The demo trains through `pagecast train`: a renamed flag there must fail here, not in the demo.
    from pagecast.bench.harness import train_learned
    from pagecast.learn.train import load_model
    from pagecast.trace import TraceWriter

    pages = np.tile(np.array([0, 3, 4, 9, 10, 17], np.int64), 400) + np.repeat(np.arange(400) * 20, 6)
    trace = tmp_path / "t.parquet"
    with TraceWriter(trace, regions=[Region(0, "w.bin", "file", path="/w.bin", length=1 << 24)]) as w:
        w.write(t_ns=np.arange(len(pages)) * 1000, region=0, page=pages, kind=Kind.FAULT_MAJOR)
    model = train_learned([trace], tmp_path / "m.pt", epochs=1)
    assert model is not None and load_model(model).metrics["epochs_run"] == 1


@pytest.mark.parametrize("name", ["markov", "stride", "nextline"])
def test_warm_up_leaves_no_state_behind(name):
    # the predictor process warms its source up before the program starts (the first batch
    # compiles); what it predicts afterwards must be what a fresh source predicts
    from pagecast.live.worker import make_source

    regions = [
        Region(0, "w", kind="file", path="/w", length=1 << 26),
        Region(1, "v", kind="file", path="/v", length=1 << 24),
    ]
    rng = np.random.default_rng(3)
    batches = []
    for b in range(4):
        n = 200
        page = np.where(rng.random(n) < 0.5, np.arange(n) + 7 * b, rng.integers(0, 4096, n)).astype(np.int64)
        batches.append(
            (
                np.arange(n, dtype=np.int64) + 1000 * b,
                rng.integers(0, 2, n).astype(np.int32),
                page,
                np.full(n, int(Kind.FAULT_MAJOR), np.uint8),
            )
        )
    outs = []
    for warm in (False, True):
        src = make_source(SourceSpec("policy", name))
        if warm:
            src.warm_up()
        src.set_regions(regions)
        outs.append([src.on_batch(*b) for b in batches])
    for a, b in zip(*outs):
        assert a.cause.tolist() == b.cause.tolist() and a.region.tolist() == b.region.tolist()
        assert a.page.tolist() == b.page.tolist()
    assert sum(len(p) for p in outs[0]) > 0  # the check compared real predictions
