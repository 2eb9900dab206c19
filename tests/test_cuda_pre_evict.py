"""The injector's pre-evictions (``evict`` lines: cuMemPrefetchAsync to the host) against
the driver TEST DOUBLE: the calls issued, their order and arguments. No GPU here, so
nothing about what the real driver does with them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from _cuda_double import build_libs, run_client
from pagecast.collect.cuda import read_timeline
from pagecast.trace import Region
from pagecast.trace.schedule import Schedule

pytestmark = pytest.mark.cuda_double

PAGE = 4096
LOC_DEVICE, LOC_HOST = 1, 2  # CU_MEM_LOCATION_TYPE_DEVICE / _HOST of the CUDA 13 headers


@pytest.fixture(scope="module")
def libs():
    return build_libs()


def _schedule(rows, regions):
    n = len(rows)
    return Schedule(np.arange(n), np.arange(n), [r for r, _ in rows], [p for _, p in rows], np.ones(n), regions=regions)


def test_pre_evictions_go_to_the_host_before_prefetches_driver_double(libs, tmp_path):
    from pagecast.cuda.injector import write_prefetch_file

    regions = [Region(0, "managed#0", "managed", order=0, length=1 << 20)]
    pf = tmp_path / "plan.txt"
    prefetch = _schedule([(0, 0), (0, 1)], regions)
    evict = _schedule([(0, 40), (0, 41), (0, 42), (0, 100)], regions)
    stats = write_prefetch_file(prefetch, pf, pre_evict=evict)
    assert stats["pages"] == 2 and stats["evict_pages"] == 4
    text = pf.read_text().splitlines()
    assert text[2:6] == [
        "evict managed 0 40 1",
        "evict managed 0 41 1",
        "evict managed 0 42 1",
        "evict managed 0 100 1",
    ]
    r = run_client(
        libs,
        tmp_path,
        ["resolve", "gpa2", "managed", str(1 << 20), "sleep", "300", "launch", "launch"],
        PREDICTIONS_FILE=str(pf),
        PREFETCH_POLL_MS="20",
        PREFETCH_DEVICE="3",
    )
    assert r.rc == 0, r.stderr
    base = r.allocs()[0][0]
    calls = r.calls("cuMemPrefetchAsync_v2")
    got = [(int(c["ptr"], 16) - base, int(c["bytes"]), int(c["loc_type"]), int(c["loc_id"])) for c in calls]
    # merged runs, evictions first (in file order), then the prefetch to device 3
    assert got == [
        (40 * PAGE, 3 * PAGE, LOC_HOST, 0),
        (100 * PAGE, PAGE, LOC_HOST, 0),
        (0, 2 * PAGE, LOC_DEVICE, 3),
    ]
    assert all(c["result"] == "0" and c["flags"] == "0" for c in calls)
    assert len({c["stream"] for c in calls}) == 1  # the injector's own stream
    names = [c["fn"] for c in r.calls() if c["fn"] in ("cuMemPrefetchAsync_v2", "cuLaunchKernel")]
    assert names == ["cuMemPrefetchAsync_v2"] * 3 + ["cuLaunchKernel"] * 2  # once, before the first launch
    st = json.loads(r.file("injector").read_text())
    assert (st["evict_chunks"], st["evict_bytes"]) == (2, 4 * PAGE)
    assert (st["chunks"], st["bytes"]) == (1, 2 * PAGE)
    tl = read_timeline(r.file("timeline"))
    pre = [(t["ptr"] - base, t["direction"]) for t in tl if t["name"] == "pagecast_pre_evict"]
    assert pre == [(40 * PAGE, "to_host"), (100 * PAGE, "to_host")]


def test_bad_evict_line_is_one_message_driver_double(libs, tmp_path):
    pf = tmp_path / "plan.txt"
    pf.write_text("pagecast-prefetch 1\nevict managed 0\n")
    r = run_client(
        libs, tmp_path, ["resolve", "gpa2", "managed", "65536", "sleep", "200", "launch"], PREDICTIONS_FILE=str(pf),
        PREFETCH_POLL_MS="20",
    )  # fmt: skip
    assert r.rc == 0, r.stderr
    assert r.calls("cuMemPrefetchAsync_v2") == []
    msgs = [m for m in r.file("messages").read_text().splitlines() if "plan.txt:2" in m]
    assert len(msgs) == 1 and "expected '[evict] <managed|device> <order> <page> [score]'" in msgs[0]


def test_cuda_run_pre_evict_plan_cli_driver_double(libs, tmp_path, monkeypatch, capsys):
    from pagecast.cli import main
    from pagecast.trace.schedule import write_schedule

    monkeypatch.setenv("PAGECAST_CUDA_DRIVER", str(libs.double))
    monkeypatch.setenv("PAGECAST_TEST_DOUBLE_LOG", str(tmp_path / "double.log"))
    regions = [Region(0, "managed#0", "managed", order=0, length=1 << 20)]
    write_schedule(tmp_path / "s.parquet", _schedule([(0, 4)], regions))
    write_schedule(tmp_path / "e.parquet", _schedule([(0, 200), (0, 201)], regions))
    out = tmp_path / "run"
    argv = ["cuda", "run", "--schedule", str(tmp_path / "s.parquet"), "--pre-evict", str(tmp_path / "e.parquet")]
    argv += ["--out-dir", str(out), "--poll-ms", "20", "--json", "--"]
    argv += [str(libs.client), "resolve", "gpa2", "managed", "1048576", "sleep", "400", "launch"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["evict_pages"] == 2 and summary["pages"] == 1
    (st,) = summary["api"]["injector"].values()
    assert (st["evict_chunks"], st["evict_bytes"], st["chunks"], st["bytes"]) == (1, 2 * PAGE, 1, PAGE)
    log = [ln.split() for ln in (tmp_path / "double.log").read_text().splitlines()]
    locs = [dict(kv.split("=", 1) for kv in ln[1:])["loc_type"] for ln in log if ln[0] == "cuMemPrefetchAsync_v2"]
    assert locs == [str(LOC_HOST), str(LOC_DEVICE)]
    # a ready predictions file cannot take a plan beside it: one line, no traceback
    (tmp_path / "p.txt").write_text("pagecast-prefetch 1\nmanaged 0 1\n")
    argv[3] = str(tmp_path / "p.txt")
    assert main(argv) != 0
    assert "pre-eviction plan" in capsys.readouterr().err


def _managed_run(path, seed: int):
    """A recording of a program over one managed allocation of 256 pages: a hot set of 24
    pages it keeps coming back to, between pages of a scan each used once (pages 64-255)."""
    from sim_helpers import write_trace

    rng = np.random.default_rng(seed)
    hot = rng.permutation(24)
    pages: list[int] = []
    for k in range(192):
        pages += [int(hot[(3 * k + j) % 24]) for j in range(3)] + [64 + k]
    regions = [Region(0, "managed#0", "managed", order=0, length=256 * PAGE)]
    return write_trace(path, pages, regions=regions)


def test_pre_evict_plan_from_a_model_cli_driver_double(libs, tmp_path, monkeypatch, capsys):
    # at 16 pages LRU lets the scan push the hot set out and MIN keeps most of it; the plan
    # from a learned eviction names the scan's pages (used once) after their use; the
    # injector sends exactly the plan's pages to the host before the first launch
    from pagecast.cli import main
    from pagecast.cuda.injector import pre_evict_from_model
    from pagecast.learn.eviction import EvictionModel, EvictionTrainConfig, read_run, train_eviction

    runs = [_managed_run(tmp_path / f"r{s}.parquet", s) for s in (1, 2, 3)]
    model = tmp_path / "ev.pt"
    train_eviction(runs[:2], model, EvictionTrainConfig(capacities=(0.05, 0.1), rows_per_case=2000))
    plan = pre_evict_from_model(model, runs[2], 16)
    # independent reference: the model's score at each page's last access, below 0.5
    d = read_run(runs[2])
    p = EvictionModel.load(model).scores(d, 16)
    last = {int(pg): i for i, pg in enumerate(d["page"])}
    expect = sorted(pg for pg, i in last.items() if p[i] < 0.5)
    assert sorted(plan.page.tolist()) == expect
    assert len(set(expect) & set(range(64, 256))) >= 150
    from pagecast.cuda.injector import replay_schedule
    from pagecast.trace.schedule import write_schedule

    monkeypatch.setenv("PAGECAST_CUDA_DRIVER", str(libs.double))
    monkeypatch.setenv("PAGECAST_TEST_DOUBLE_LOG", str(tmp_path / "double.log"))
    write_schedule(tmp_path / "s.parquet", replay_schedule(runs[2]))
    head = ["cuda", "run", "--schedule", str(tmp_path / "s.parquet"), "--pre-evict", str(model)]
    rest = ["--pre-evict-capacity", "16", "--out-dir", str(tmp_path / "run"), "--poll-ms", "20", "--json", "--"]
    rest += [str(libs.client), "resolve", "gpa2", "managed", str(256 * PAGE), "sleep", "400", "launch"]
    assert main([*head, "--trace", str(runs[2]), *rest]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["evict_pages"] == len(expect) and summary["pre_evict_capacity_pages"] == 16
    (st,) = summary["api"]["injector"].values()
    assert st["evict_bytes"] == len(expect) * PAGE
    log = [ln.split() for ln in (tmp_path / "double.log").read_text().splitlines()]
    host = [dict(kv.split("=", 1) for kv in ln[1:]) for ln in log if ln[0] == "cuMemPrefetchAsync_v2"]
    assert sum(int(c["bytes"]) for c in host if c["loc_type"] == str(LOC_HOST)) == len(expect) * PAGE
    # without a recording to play the model on: one line, no traceback
    assert main([*head, *rest]) != 0
    assert "needs a previous recording" in capsys.readouterr().err
