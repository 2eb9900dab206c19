"""The oversubscription benchmark's harness on one small real case: a program re-reading an
mmap'd file pass after pass, run cold in a real memory cgroup of half its data and warm with
no limit. Checked against what the program must have done, not against timings."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from pagecast.bench.coldstart import Input
from pagecast.bench.oversub import Config, LimitCase, format_limit, run_case, summary
from pagecast.errors import PagecastError

N, PASSES = 2048, 4  # a 16 MiB float32 matrix, read whole every pass: more than the margin on its own memory

POWER = r"""
import os, sys, time
import numpy as np
path, n, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
a = np.memmap(path, np.float32, "r", shape=(n, n))
x = np.ones(n, np.float32)
log = open(os.environ["PAGECAST_BENCH_PASSES"], "a", buffering=1)
for _ in range(passes):
    t0 = time.perf_counter()
    y = np.empty(n, np.float32)
    for i in range(0, n, 64):
        y[i : i + 64] = a[i : i + 64] @ x
    x = y / np.linalg.norm(y)
    log.write(f"pass {time.perf_counter() - t0}\n")
log.write(f"result {float(x.sum()):.5e}\n")
"""


def _memory_cgroup():
    from pagecast.util.memcg import MemoryCgroup, find_hierarchy

    if os.geteuid() != 0:
        pytest.skip("creating cgroups needs root (or a delegated cgroup)")
    try:
        find_hierarchy()
    except PagecastError as e:
        pytest.skip(f"no memory cgroup here: {e}")
    return MemoryCgroup


def _power_case(tmp_path: Path, seed: int) -> tuple[Path, np.ndarray, LimitCase]:
    """The power iteration over a matrix of its own, as a case: two training inputs, one held out."""
    data = tmp_path / "a.f32"
    m = np.random.default_rng(seed).random((N, N), np.float32)
    m.tofile(data)
    if not Path(f"/sys/dev/block/{os.major(data.stat().st_dev)}:{os.minor(data.stat().st_dev)}").exists():
        pytest.skip("the temporary directory is not on a block device (page cache cannot be made cold)")
    argv = [sys.executable, "-c", POWER, str(data), str(N), str(PASSES)]
    case = LimitCase("power", "power iteration", "pass", [Input("a", argv), Input("b", argv)], Input("h", argv), [data])
    return data, m, case


def test_harness_runs_a_case_cold_under_a_limit(tmp_path: Path) -> None:
    cgroup = _memory_cgroup()
    data, m, case = _power_case(tmp_path, 3)
    cfg = Config(tmp_path / "work", cgroup, fractions=(0.5,), backends=(), kernel_rows=("kernel: default",))
    r = run_case(case, cfg)

    # the program's own reference: the same iteration in this process
    x = np.ones(N, np.float32)
    for _ in range(PASSES):
        y = np.concatenate([m[i : i + 64] @ x for i in range(0, N, 64)])
        x = y / np.linalg.norm(y)
    assert r["data_bytes"] == data.stat().st_size  # a cold unlimited run leaves the whole file cached
    (lim,) = r["limits"]
    assert lim["limit_bytes"] < r["own_bytes"] + data.stat().st_size
    rows = {x["strategy"]: x for x in lim["strategies"]}
    assert set(rows) == {"kernel: default", "no limit, warm cache (roof)"}
    for row in rows.values():
        assert row["results"] == [f"{float(x.sum()):.5e}"]
        assert row["per_pass_s"] is not None and row["first_pass_s"] is not None
    kernel, roof = rows["kernel: default"], rows["no limit, warm cache (roof)"]
    # cold, the first pass reads the whole file; with half of it fitting, every pass after
    # the first reads again what LRU evicted: more than the file in all, and refaults
    assert kernel["read_bytes"] > data.stat().st_size
    assert kernel["refaults"] > 0
    assert kernel["peak_bytes"] <= lim["limit_bytes"]
    assert roof["read_bytes"] < data.stat().st_size // 4  # warm: (nearly) nothing from the device
    assert [(c["case"], c["best_pagecast"]) for c in summary([r])["cells"]] == [("power", None)]
    assert "kernel: default — best kernel" in format_limit(r, lim)


def test_mins_stream_is_every_use_not_only_what_the_kernel_missed(tmp_path: Path) -> None:
    """MIN's bytes come from the held-out input run through the pager at a 1 MiB budget: the
    power iteration reads the matrix whole, in order, every pass, so its uses are a cyclic
    scan of the file's pages, and MIN on them must equal MIN on that scan written out here
    (the project's simulator on an independent stream)."""
    from pagecast.bench.oversub import min_read_bytes, record_uses
    from pagecast.constants import PAGE_SIZE
    from pagecast.sim.misses import min_misses

    data = tmp_path / "a.f32"
    np.random.default_rng(4).random((N, N), np.float32).tofile(data)
    argv = [sys.executable, "-c", POWER, str(data), str(N), str(PASSES)]
    uses = record_uses(Input("h", argv), [data], tmp_path / "uses.parquet", 600)
    pages = data.stat().st_size // PAGE_SIZE
    for cap in (pages // 2, pages * 3 // 4):
        scan = np.tile(np.arange(pages, dtype=np.int64), PASSES)
        want = int(min_misses(scan, pages, cap).sum()) * PAGE_SIZE
        got = min_read_bytes(uses, [data], cap * PAGE_SIZE)
        assert got is not None and abs(got - want) <= PASSES * PAGE_SIZE, (cap, got, want)
        assert got > pages * PAGE_SIZE  # passes after the first read again: the hits are seen


def test_the_oracle_row_runs_a_plan_made_from_the_held_out_inputs_own_recording(tmp_path: Path) -> None:
    """Beside the plan learned from the training inputs, the oracle: the same planner given
    the held-out input's own recording under the limit. It is a row of its own kind, never
    counted as pagecast's result, and the program's output is the same under it."""
    from pagecast.bench.oversub import ORACLE
    from pagecast.plan.memory_format import read_memory_plan

    cgroup = _memory_cgroup()
    _, _, case = _power_case(tmp_path, 5)
    cfg = Config(
        tmp_path / "work", cgroup, fractions=(0.5,), backends=("kernel",), kernel_rows=("kernel: default",), roof=False
    )
    r = run_case(case, cfg)

    (lim,) = r["limits"]
    rows = {x["strategy"]: x for x in lim["strategies"]}
    assert set(rows) == {"kernel: default", "pagecast run --plan (kernel backend)", ORACLE}, lim["notes"]
    assert rows[ORACLE]["kind"] == "oracle"
    assert len({x["results"][0] for x in rows.values()}) == 1 and lim["same_result"]
    d = tmp_path / "work" / "power" / f"limit-{lim['limit_bytes'] >> 20}M"
    oracle, learned = read_memory_plan(d / "oracle.plan"), read_memory_plan(d / "train.plan")
    assert oracle.validation["runs"] == 1 and learned.validation["runs"] == 2
    (cell,) = summary([r])["cells"]
    assert cell["best_pagecast"] == "pagecast run --plan (kernel backend)"
    assert cell["oracle_vs_best_kernel"] == rows[ORACLE]["vs_best_kernel"] is not None
    assert ORACLE in format_limit(r, lim)
