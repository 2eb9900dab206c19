"""The planner's choice by predicted time: the cost model on hand-computed numbers, and
real recordings (perf page sets of a program touching chosen pages) planned with a fixed
device so that the expected choice follows from the model, not from this machine."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pagecast.cli import main as cli_main
from pagecast.pager.pack import build_pack
from pagecast.plan.cost_model import DeviceCosts, Prediction, predict, predict_extent, predict_pack, program_reads
from pagecast.plan.format import FileIdentity, read_plan
from pagecast.plan.planner import (
    FilePricing,
    PlannerConfig,
    _Priced,
    choose,
    hot_thresholds,
    live_choices,
    overlap_upgrades,  # fmt: skip
    plan_by_predicted_time,
    price_file,
    small_files_group,
)
from pagecast.plan.shared_pages import merge_ranges, recurrence, recurrence_line
from pagecast.util.device_model import DeviceModel, RandomRead, save_model
from pagecast.util.pagecache import drop_file
from perf_support import needs_perf

# 1 ms per request at depth 1, 0.1 ms at depth 2; 4096 bytes take 4.096 µs; 4-page read-around
DEV = DeviceCosts(seq_bytes_per_s=1e9, iops_by_depth=((1, 1000.0), (2, 10000.0)), read_ahead_kb=16, source="test")
PAGE_S = 4096 / 1e9
# the same with a slow sequential transfer (100 MB/s: 40.96 µs a page), so that warming a
# 160-page file whole (6.6 ms) costs more than a few random reads, and a 16-page read-around
# (a default-advice miss through a mapping: 1.66 ms against 1.04 ms with read-ahead off)
SLOW = DeviceCosts(seq_bytes_per_s=1e8, iops_by_depth=((1, 1000.0), (2, 10000.0)), read_ahead_kb=64, source="test")


def a(*x: int) -> np.ndarray:
    return np.array(x, np.int64)


def test_iops_interpolates_between_measured_depths_and_is_flat_beyond():
    d = DeviceCosts(1e9, ((1, 1000.0), (4, 4000.0)))
    assert d.iops(1) == 1000.0 and d.iops(2) == 2000.0 and d.iops(4) == 4000.0 and d.iops(64) == 4000.0


def test_program_reads_by_advice_hand_computed():
    used = a(0, 1, 9, 30)
    # default, mapped: windows of 4 pages -> {0, 2, 7}: 3 requests, 12 pages (file of 40 pages)
    assert program_reads(DEV, used, a(), 40, "default", True) == (3, 12)
    # pages 2 and 3 already cached: window 0 reads 2 pages less
    assert program_reads(DEV, used, a(2, 3), 40, "default", True) == (3, 10)
    # the last window is cut at the file's end (file of 31 pages: window 7 is pages 28..30)
    assert program_reads(DEV, used, a(), 31, "default", True) == (3, 11)
    # random: one request per page
    assert program_reads(DEV, used, a(), 40, "random", True) == (4, 4)
    assert program_reads(DEV, used, a(), 40, "random", False) == (4, 4)  # read sizes unknown: a page each
    # default, read(): lone pages 9 and 30 read alone; the run 0-1 (L = 2): 1 + log2(2) = 2
    # requests, min(4, 2 * 2) = 4 pages ahead
    assert program_reads(DEV, used, a(), 40, "default", False) == (4, 8)
    # a run of 10 pages with W = 4: 1 + log2(4) + (10 - 4) // 4 = 4 requests, 4 pages ahead
    assert program_reads(DEV, np.arange(10), a(), 40, "default", False) == (4, 14)


def test_measured_read_around_prices_default_mapped_misses():
    dev = DeviceCosts(1e9, ((1, 1000.0), (2, 10000.0)), read_ahead_kb=16, readaround_s_per_page=1e-6)
    # windows {0, 2, 7}: 3 first reads (1 ms each) + 12 pages at the measured 1 µs
    assert predict(dev, a(0, 1, 9, 30), a(), 40, "nothing", True).seconds == pytest.approx(3e-3 + 12e-6)
    # read(): not a read-around fault, priced as before
    assert predict(dev, a(0, 1, 9, 30), a(), 40, "nothing", False).seconds == pytest.approx(4e-3 + 8 * PAGE_S)


def test_predict_hand_computed():
    used, warm = a(0, 1, 9, 30), a(0, 1, 9)
    assert predict(DEV, used, warm, 40, "nothing", True).seconds == pytest.approx(3e-3 + 12 * PAGE_S)
    assert predict(DEV, used, warm, 40, "nothing+random", True).seconds == pytest.approx(4e-3 + 4 * PAGE_S)
    # warm: ranges (0,2) and (9,1) = 2 requests at depth 2 (0.2 ms) + 3 pages; then page 30 misses
    assert predict(DEV, used, warm, 40, "warm+random", True).seconds == pytest.approx(2e-4 + 3 * PAGE_S + 1e-3 + PAGE_S)
    assert predict(DEV, used, warm, 40, "warm+default", True).seconds == pytest.approx(
        2e-4 + 3 * PAGE_S + 1e-3 + 4 * PAGE_S
    )
    # stream: 40 pages in one 1 MiB request at depth 2, no misses
    assert predict(DEV, used, warm, 40, "stream", True).seconds == pytest.approx(1e-4 + 40 * PAGE_S)


def test_leave_one_run_out_and_the_margin():
    runs = [a(0, 10, 20), a(10, 20, 30), a(0, 20, 30)]
    pred, skipped, how = price_file(runs, 100, True, DEV, PlannerConfig())
    assert how == "leave-one-run-out over 3 runs" and "stream" in skipped
    # default k: 2 of 3 runs, so 2 of the 2 left in a fold. Held out run 0: warm {20, 30}
    # (runs 1 and 2 both used them), misses 0 and 10; every fold likewise: 2 warm, 2 misses
    assert pred["warm+random"] == pytest.approx(2e-4 + 2 * PAGE_S + 2e-3 + 2 * PAGE_S)
    assert pred["nothing+random"] == pytest.approx(3e-3 + 3 * PAGE_S)
    # k = 1 (pages any other run used): every fold warms {0, 10, 20, 30}, 4 one-page ranges,
    # and the held-out run's 3 pages are all among them: no miss
    assert pred["warm+random@1"] == pytest.approx(4e-4 + 4 * PAGE_S)
    # whole file: 100 pages in one request at depth 2, no miss
    assert pred["whole"] == pytest.approx(1e-4 + 100 * PAGE_S)
    # warm+default@1 costs the same (no miss left to read around): read-ahead off does not
    # pay by the margin on its own, so the kernel's default stays
    assert pred["warm+default@1"] == pytest.approx(pred["warm+random@1"])
    assert choose(pred, 0.10)[0] == "warm+default@1"
    # on this fast-transfer device a 4-page read-around costs next to nothing: default kept
    assert choose({k: v for k, v in pred.items() if "@" not in k and k != "whole"}, 0.10)[0] == "warm+default"
    assert choose({"nothing": 1.0, "warm+random": 0.95}, 0.10)[0] == "nothing"
    assert choose({"nothing": 1.0, "warm+random": 0.85}, 0.10)[0] == "warm+random"


# ---- real recordings ------------------------------------------------------------------------


def _record(tmp_path: Path, tp: Path, f: Path, pages: list[int], name: str) -> Path:
    drop_file(f)  # cold + MADV_RANDOM in touchpages: exactly the listed pages fault
    out = tmp_path / f"{name}.parquet"
    assert cli_main(["record", "-o", str(out), "--", str(tp), str(f), ",".join(map(str, pages))]) == 0
    return out


def _plan(traces: list[Path], **kw):
    # overlap 0: the run-wide CPU credit depends on the recorded timestamps, not exact here
    kw = {"device": SLOW, "overlap": 0.0, "fit": False} | kw  # fit: the recordings' timing is not exact here
    if "pack_dir" in kw:
        kw.setdefault("pack_writer", build_pack)
    doc, choices = plan_by_predicted_time(traces, PlannerConfig(**kw))
    return doc, {c.path: c for c in choices}


@needs_perf
@pytest.mark.perf
def test_sparse_mapped_file_gets_warm_and_random(tmp_path, touchpages, datafile):
    runs = [[0, 20, 40, 60, 61], [20, 40, 61, 80], [40, 61, 100, 120]]
    traces = [_record(tmp_path, touchpages, datafile, p, f"r{i}") for i, p in enumerate(runs)]
    doc, why = _plan(traces)
    mine = next(f for f in doc.files if f.path == str(datafile))
    # by hand (SLOW: 1 ms a miss, 0.1 ms a warm range, 41 µs a page), folds holding out
    # runs 0, 1, 2: k = 2 warms {40, 61}, {40, 61}, {20, 40, 61}: 3.40 + 2.36 + 2.50 ms;
    # k = 1 warms the other runs' union (6, 6, 5 ranges) and misses 2, 1, 2 pages:
    # 2.93 + 1.93 + 2.83 ms. k = 1 is cheaper (2.56 vs 2.75 ms a run)
    c = why[str(datafile)]
    assert c.chosen == "warm+random@1", c
    assert c.predicted_s["warm+random@1"] == pytest.approx((2.93 + 1.93 + 2.83) / 3 * 1e-3, abs=2e-5)
    assert c.predicted_s["warm+random"] == pytest.approx((3.40 + 2.36 + 2.50) / 3 * 1e-3, abs=2e-5)
    assert (mine.strategy, mine.advice) == ("warm", "random")
    assert mine.ranges == merge_ranges(a(0, 20, 40, 60, 61, 80, 100, 120))  # used by >= 1 of 3 runs
    assert c.validation == "leave-one-run-out over 3 runs"
    assert mine.identity == FileIdentity.of(datafile)
    assert doc.note.splitlines()[0].startswith("recurrence over 3 recordings: ")  # every plan says it
    doc2, why2 = _plan(traces, min_runs=2)
    assert why2[str(datafile)].chosen == "warm+random"
    assert next(f for f in doc2.files if f.path == str(datafile)).ranges == [(20, 1), (40, 1), (61, 1)]
    doc3, _ = _plan(traces, min_runs=3)
    assert next(f for f in doc3.files if f.path == str(datafile)).ranges == [(40, 1), (61, 1)]
    # on a device whose sequential transfer is fast, reading this small file whole wins
    docf, whyf = _plan(traces, device=DEV)
    assert whyf[str(datafile)].chosen == "whole"
    assert next(f for f in docf.files if f.path == str(datafile)).ranges == [(0, 160)]


@needs_perf
@pytest.mark.perf
def test_file_used_whole_gets_stream(tmp_path, touchpages, datafile):
    traces = [_record(tmp_path, touchpages, datafile, list(range(160)), f"w{i}") for i in range(2)]
    doc, why = _plan(traces)
    mine = next(f for f in doc.files if f.path == str(datafile))
    assert why[str(datafile)].chosen == "stream", why[str(datafile)]
    assert (mine.strategy, mine.advice, mine.ranges) == ("stream", "default", [])


@needs_perf
@pytest.mark.perf
def test_runs_sharing_no_page_get_nothing_and_the_cli_explains(tmp_path, touchpages, datafile, capsys):
    traces = [
        _record(tmp_path, touchpages, datafile, p, f"d{i}") for i, p in enumerate([[0, 30], [60, 90], [120, 150]])
    ]
    doc, why = _plan(traces)
    mine = next(f for f in doc.files if f.path == str(datafile))
    c = why[str(datafile)]
    # no page is used by 2 of the runs in any fold: nothing to warm, not even priced
    assert c.chosen in ("nothing", "nothing+random") and mine.strategy == "nothing" and mine.ranges == []
    assert c.skipped["warm+random"] == c.skipped["warm+default"] == "no page used by >= 2 runs in any fold"
    # k = 1: every fold warms the other runs' pages, which the held-out run never uses
    assert c.predicted_s["warm+random@1"] > c.predicted_s["nothing+random"]
    assert c.predicted_s["whole"] > c.predicted_s["nothing+random"]  # 160 pages at 41 µs for 2 hits
    _, why1 = _plan(traces, min_runs=1)
    c1 = why1[str(datafile)]
    assert c1.chosen in ("nothing", "nothing+random")
    assert c1.predicted_s["warm+random"] > c1.predicted_s["nothing+random"]
    capsys.readouterr()
    out = tmp_path / "p.plan"
    slow = tmp_path / "slow.json"  # the SLOW device as a calibration file, for the command line
    save_model(DeviceModel("254:0", str(tmp_path), 0.0, 16, True, 1e8,
                           [RandomRead(1, 1000.0, 1, 1), RandomRead(2, 10000.0, 1, 1)]), slow)  # fmt: skip
    assert cli_main(["plan", *map(str, traces), "-o", str(out), "--explain", "--json", "--device-model", str(slow),
                     "--overlap", "0"]) == 0  # fmt: skip
    cap = capsys.readouterr()
    rep = json.loads(cap.out)
    ch = next(x for x in rep["choices"] if x["path"] == str(datafile))
    assert set(ch["predicted_s"]) == {"nothing", "nothing+random", "whole", "warm+random@1", "warm+default@1",
                                      "pack@1", "per-fault:extent"}  # fmt: skip
    assert ch["skipped"]["stream"].startswith("runs use")
    assert str(datafile) in cap.err and "leave-one-run-out over 3 runs" in cap.err
    assert [f for f in read_plan(out).files if f.path == str(datafile)][0].strategy == "nothing"
    # --device-model: this calibration prices every file, and --explain names it
    model = tmp_path / "dev.json"
    save_model(DeviceModel("254:0", str(tmp_path), 0.0, 16, True, 1e9, [RandomRead(1, 1000.0, 1, 1)]), model)
    assert cli_main(["plan", *map(str, traces), "-o", str(out), "--explain", "--device-model", str(model),
                     "--overlap", "0.5"]) == 0  # fmt: skip
    assert f"device: {model} (254:0)" in capsys.readouterr().err
    assert cli_main(["plan", *map(str, traces), "-o", str(out), "--device-model", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none.json" in err


@needs_perf
@pytest.mark.perf
def test_pack_chosen_when_the_live_start_up_is_free_and_built_with_the_shared_pages(tmp_path, touchpages, datafile):
    from pagecast.pager.pack import read_pack

    shared = list(range(0, 160, 4))  # 40 scattered pages every run maps, plus one of its own
    traces = [_record(tmp_path, touchpages, datafile, shared + [101 + 10 * i], f"p{i}") for i in range(3)]
    packs = tmp_path / "packs"
    packs.mkdir()
    # SLOW: warm+random = 40 ranges (4 ms) + 40 pages + 1 miss; the pack = 1 sequential read
    # (1 ms) + 40 pages + 1 pager miss: 3 ms less a run, > 10 % of the run's I/O (the
    # program's own ELF files included: no pack for them, the loader maps them)
    doc, why = _plan(traces, pack_dir=packs, live_startup_s=0.0)
    mine = next(f for f in doc.files if f.path == str(datafile))
    assert why[str(datafile)].chosen == "pack", why[str(datafile)]
    assert mine.strategy == "pack" and Path(mine.arg).parent == packs
    info = read_pack(mine.arg)
    assert info.source == str(datafile.resolve()) and sorted(info.pages.tolist()) == shared
    # the launcher runs a pack itself (the pager's shim preloaded, no Python started): the
    # default 0.5 s of live start-up, far more than the run's I/O, is not charged
    again = tmp_path / "again"
    again.mkdir()
    doc2, why2 = _plan(traces, pack_dir=again)
    assert why2[str(datafile)].chosen == "pack" and "0 ms of live start-up" in why2[str(datafile)].why
    # packs are named after their plan (`plan -o NAME` passes "NAME."): a second plan in the
    # same directory (a measured one, which removes the packs it does not keep) has its own
    doc3, _ = _plan(traces, pack_dir=again, pack_prefix="measured.plan.")
    two = [next(f.arg for f in d.files if f.path == str(datafile)) for d in (doc2, doc3)]
    assert Path(two[1]).name.startswith("measured.plan.") and two[0] != two[1]
    assert all(Path(p).is_file() for p in two)


# ---- hot-page thresholds, run-wide CPU overlap, the small-files group (synthetic predictions) ----


def test_hot_thresholds_are_the_distinct_fold_thresholds():
    # 3 runs: k = 2 (default, 2 of the 2 left in a fold) and k = 1; k = 3 folds onto 2
    assert hot_thresholds(PlannerConfig(), 3) == [2, 1]
    assert hot_thresholds(PlannerConfig(), 2) == [1]
    assert hot_thresholds(PlannerConfig(), 4) == [3, 2, 1]
    assert hot_thresholds(PlannerConfig(), 1) == [1]
    assert hot_thresholds(PlannerConfig(min_runs=3), 4) == [3]


def test_leave_one_run_out_picks_the_threshold_that_pays():
    # skewed: pages 0-4 are hot (every run), each run adds 20 pages of its own. k = 2 warms
    # exactly the hot pages; k = 1 warms 45 pages per fold for the same 5 hits
    hot = list(range(5))
    runs = [a(*hot, *range(100 + 200 * i, 160 + 200 * i, 3)) for i in range(3)]  # lone pages: read alone
    pred, _, _ = price_file(runs, 1000, False, SLOW, PlannerConfig())
    # k = 2: one range of 5 pages (0.1 ms + 5 pages), 20 misses of a page each
    assert pred["warm+default"] == pytest.approx(1e-4 + 5 * 4.096e-5 + 20 * (1e-3 + 4.096e-5))
    # k = 1: the hot pages and the other two runs' 40 lone pages: 41 ranges
    assert pred["warm+default@1"] == pytest.approx(41e-4 + 45 * 4.096e-5 + 20 * (1e-3 + 4.096e-5))
    assert choose(pred, 0.10)[0] == "warm+default"
    # a read() file keeps the kernel's read-ahead: no random-advice candidate
    assert "warm+random" not in pred and "nothing+random" not in pred
    # without the hot head the runs share nothing: nothing is chosen
    cold = [a(*range(100 + 200 * i, 160 + 200 * i, 3)) for i in range(3)]
    pc, skipped, _ = price_file(cold, 1000, False, SLOW, PlannerConfig())
    assert choose(pc, 0.10)[0] == "nothing" and skipped["warm+default"] == "no page used by >= 2 runs in any fold"


def _pricing(**cands: tuple[float, float]) -> FilePricing:
    """Two folds with the same (prefetch s, program s) per candidate."""
    folds = {c: [Prediction(pre + prog, pre_s=pre, prog_s=prog)] * 2 for c, (pre, prog) in cands.items()}
    return FilePricing(folds, {}, {}, "test")


def test_overlap_upgrades_spend_the_cpu_budget_on_the_best_saving_per_second():
    big = _Priced("big", 1000, [True, True], _pricing(nothing=(0, 0.100), **{"warm+random": (0.050, 0.040)}), "nothing")
    small = _Priced("small", 10, [True, True], _pricing(nothing=(0, 0.010), whole=(0.020, 0.0)), "nothing")
    # no budget: warm+random of big costs 90 ms, 10 % below nothing's 100 ms exactly -> it
    # passes the margin only with credit; whole of small costs 20 ms against 10 ms
    up, left = overlap_upgrades([big, small], 0.0, 0.10)
    assert up == {} and left == 0.0
    # 50 ms of CPU: big saves 60 ms for 50 ms of prefetching (1.2 per s), small 10 ms for
    # 20 ms (0.5 per s): big first, all of its prefetching hidden, then nothing left for small
    up, left = overlap_upgrades([big, small], 0.050, 0.10, max_regret=1.0)
    assert {k: v[0] for k, v in up.items()} == {"big": "warm+random"} and left == 0.0
    # 80 ms: small's 20 ms would fit in the 30 left, but without any credit whole costs 20 ms
    # against nothing's 10: 100 % more than nothing, over the 20 % a wrong CPU estimate may cost
    up, left = overlap_upgrades([big, small], 0.080, 0.10)
    assert {k: v[0] for k, v in up.items()} == {"big": "warm+random"} and left == pytest.approx(0.030)
    # allowed to regret up to 100 %: both, small's 20 ms from the 30 left
    up, left = overlap_upgrades([big, small], 0.080, 0.10, max_regret=1.0)
    assert {k: v[0] for k, v in up.items()} == {"big": "warm+random", "small": "whole"}
    assert left == pytest.approx(0.010)


def test_small_files_group_warms_files_one_run_read_when_the_held_out_runs_reuse_them():
    # three files one page each, 1 ms to miss, 0.1 ms to warm whole. Each read by one of
    # two runs except "c" (both). Fold i warms what run 1-i read.
    def f(name: str, used: list[bool]) -> _Priced:
        folds = {"nothing": [Prediction(1e-3 if u else 0.0, prog_s=1e-3 if u else 0.0) for u in used],
                 "whole": [Prediction(1e-4, pre_s=1e-4, prog_s=0.0)] * 2}  # fmt: skip
        return _Priced(name, 1, used, FilePricing(folds, {}, {}, "test"), "nothing")

    cfg = PlannerConfig(small_kib=4)
    files = [f("a", [True, False]), f("b", [False, True]), f("c", [True, True])]
    # fold 0 (run 0 held out): a missed (1 ms, b and c warmed: 0.2 ms), c hit; base: a + c = 2 ms
    # each fold: group 1 ms + 0.2 ms = 1.2 ms against 2 ms: 40 % less
    got = small_files_group(files, 0.0, cfg, 2)
    assert got is not None and sorted(got[0]) == ["a", "b", "c"]
    assert "predicted 1.2 ms vs 2.0 ms" in got[1]
    # files no run reuses: a and b only, every fold warms the other's file for nothing
    assert small_files_group(files[:2], 0.0, cfg, 2) is None
    # a file over small_kib is not in the group
    assert small_files_group([f("a", [True, False]), _Priced("big", 2, [True, True], files[2].pricing, "nothing")],
                             0.0, cfg, 2) is None  # fmt: skip


def test_pack_and_extent_costs_hand_computed():
    used, packed = a(1, 2, 3, 9), a(1, 2, 3)
    # the pack: one sequential read of 3 pages (1 ms + 3 pages); page 9 one pager miss (1 ms + a page)
    p = predict_pack(SLOW, used, packed)
    assert (p.pre_s, p.prog_s) == (pytest.approx(1e-3 + 3 * 4.096e-5), pytest.approx(1e-3 + 4.096e-5))
    # extent of a 10-page file: the first fault (1 ms + a page), the other 9 pages in one request behind it
    e = predict_extent(SLOW, used, 10)
    assert (e.pre_s, e.prog_s) == (pytest.approx(1e-4 + 9 * 4.096e-5), pytest.approx(1e-3 + 4.096e-5))
    assert predict_extent(SLOW, a(), 10).seconds == 0.0  # a run that does not use the file pays nothing


def test_live_candidates_pay_the_live_start_up_once_per_run():
    def f(name: str, cur: float, pack: float) -> _Priced:
        folds = {"nothing": [Prediction(cur, prog_s=cur)] * 2}
        return _Priced(name, 100, [True, True], FilePricing(folds, {}, {}, "test", {"pack": [Prediction(pack)] * 2}),
                       "nothing")  # fmt: skip

    files = [f("a", 0.300, 0.100), f("b", 0.300, 0.150), f("c", 0.010, 0.020)]
    # saving 0.2 + 0.15 = 0.35 s; with 0.5 s of start-up the run would be slower: no live plan
    assert live_choices(files, PlannerConfig(live_startup_s=0.5)) is None
    # 0.1 s of start-up: 0.61 - 0.35 + 0.1 = 0.36 s <= 0.9 * 0.61: a and b get the pack, c (no saving) does not
    got = live_choices(files, PlannerConfig(live_startup_s=0.1))
    assert got is not None and got[0] == {"a": "pack", "b": "pack"} and "100 ms of live start-up" in got[1]


def test_extent_on_a_read_file_runs_in_the_launcher_without_the_live_start_up():
    def f(name: str, mapped: bool) -> _Priced:
        folds = {"nothing": [Prediction(0.300, prog_s=0.300)] * 2}
        live = {"per-fault:extent": [Prediction(0.100)] * 2}
        return _Priced(name, 100, [True, True], FilePricing(folds, {}, {}, "test", live), "nothing", mapped)

    # read() file: the advice shim runs extent natively, so 0.2 s saved with no start-up to pay
    got = live_choices([f("r", mapped=False)], PlannerConfig(live_startup_s=0.5))
    assert got is not None and got[0] == {"r": "per-fault:extent"} and "0 ms of live start-up" in got[1]
    # mapped file: the shim sees no read(), the live machinery's 0.5 s start-up outweighs the saving
    assert live_choices([f("m", mapped=True)], PlannerConfig(live_startup_s=0.5)) is None


def test_recurrence_is_the_share_of_a_runs_pages_other_runs_used():
    runs = [
        {"/a": a(0, 1, 2, 3), "/b": a(7)},  # 5 pairs: 0, 1, 2 in another run (1, 2 in both), 3 and b:7 nowhere else
        {"/a": a(1, 2, 9)},  # 1 and 2 in the other two runs, 9 nowhere else
        {"/a": a(0, 1, 2), "/b": a(8)},  # 0, 1, 2 in another run (1, 2 in both), b:8 nowhere else
    ]
    # any other: 3/5, 2/3, 3/4; every other: 2/5, 2/3, 2/4
    got = recurrence(runs)
    assert got == pytest.approx(((3 / 5 + 2 / 3 + 3 / 4) / 3, (2 / 5 + 2 / 3 + 2 / 4) / 3))
    # the same page number in two files is two pages
    assert recurrence([{"/a": a(1)}, {"/b": a(1)}]) == (0.0, 0.0)
    assert recurrence([{"/a": a(1)}]) is None and recurrence_line([{"/a": a(1)}]) == ""
    assert recurrence_line(runs).startswith("recurrence over 3 recordings: 67% of a recording's file pages")
