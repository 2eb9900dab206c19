"""The page side of the learned predictor: a page table of region-relative pages seen in
training, merged with the delta head by a mixture weight fitted on validation data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pagecast.learn.dataset import DatasetSpec, prepare, read_demand
from pagecast.learn.models import ModelConfig
from pagecast.learn.pagetable import STEP_DISCOUNT, PageTable, mix_row, page_keys
from pagecast.learn.predict import predict_schedule
from pagecast.learn.train import TrainConfig, load_model, save_model, train_model
from pagecast.policies.learned import load_predictor
from pagecast.sim import SimConfig, simulate
from pagecast.trace import Region, TraceWriter

N_PAGES = 20000


def _write(path, pages, region_id, base, extra_regions=0):
    """One file region (the "library") at ``region_id``, after ``extra_regions`` anonymous ones."""
    regions = [Region(i, f"anon{i}", kind="anon", order=i, length=4096 * 8) for i in range(extra_regions)]
    regions.insert(
        region_id, Region(region_id, "lib", kind="file", path="/usr/lib/libx.so", base=base, length=N_PAGES * 4096)
    )
    for i, r in enumerate(regions):
        r.id = i
    with TraceWriter(path, regions=regions) as w:
        w.write(
            t_ns=np.arange(len(pages), dtype=np.int64) * 1000,
            region=region_id,
            page=np.asarray(pages, np.int64),
            kind=0,
        )
    return path


@pytest.fixture(scope="module")
def walk():
    rng = np.random.default_rng(7)
    return rng.choice(N_PAGES, 400, replace=False)  # irregular jumps: every delta different


@pytest.fixture(scope="module")
def trained(tmp_path_factory, walk):
    d = tmp_path_factory.mktemp("pages")
    train_runs = [
        _write(d / f"train{i}.parquet", np.tile(walk, 3), 0, 0x7F00_0000_0000 + i * (1 << 30)) for i in range(2)
    ]
    torch.set_num_threads(1)
    spec = DatasetSpec(horizon=10)
    data = prepare([read_demand(t) for t in train_runs], spec, val_fraction=0.1)
    mcfg = ModelConfig(n_classes=len(data.vocab), n_slots=data.table.unknown, horizon=10)
    tcfg = TrainConfig(epochs=2, windows_per_epoch=1024, threads=1)
    res = train_model(data, mcfg, tcfg)
    path = save_model(d / "m.pt", res, data, spec, tcfg)
    # the next run: the library is another region id at another address, after other regions
    test = _write(d / "next.parquet", np.tile(walk, 2), 2, 0x5500_1234_0000, extra_regions=2)
    return path, res, test


def test_page_head_predicts_recurring_irregular_pages_in_next_run(trained, walk):
    path, res, test = trained
    assert res.mix > 0 and res.metrics["page_table_keys"] == len(walk)
    # the delta model alone names almost none of the next pages; the mixture nearly all
    recall = res.metrics["val_mix_recall"]
    assert recall["0.0"] < 0.1 and recall[str(res.mix)] > 0.95
    sched = predict_schedule(path, test, top_k=10)
    stream = read_demand(test)
    hit = 0
    for i in range(len(stream) - 1):
        sel = sched.trigger == i
        hit += int(((sched.region[sel] == 2) & (sched.page[sel] == stream.page[i + 1])).any())
    assert hit >= len(stream) - 2  # every next page but the first's is predicted, in the moved region
    cfg = SimConfig(capacity=200)
    assert simulate(test, cfg, None).faults == 800
    assert simulate(test, cfg, sched).faults <= 2


def test_live_predictor_equals_schedule_with_page_table(trained):
    path, _, test = trained
    stream = read_demand(test)
    sched = predict_schedule(path, test, top_k=10)
    for backend in ("numba", "onnx"):
        pf = load_predictor(path, top_k=10, backend=backend)
        pf.reset(stream.regions)
        live = []
        for i in range(len(stream)):
            live += [
                (i, r, p) for r, p in pf.observe(int(stream.t_ns[i]), int(stream.region[i]), int(stream.page[i]), False)
            ]
        batch = list(zip(sched.trigger.tolist(), sched.region.tolist(), sched.page.tolist()))
        assert len(set(live) ^ set(batch)) <= len(batch) // 200, backend


def test_model_file_round_trip_keeps_table(trained):
    path, res, _ = trained
    lm = load_model(path)
    assert lm.mix == res.mix
    np.testing.assert_array_equal(lm.page_table.keys, res.page_table.keys)
    np.testing.assert_array_equal(lm.page_table.succ, res.page_table.succ)


def test_table_counts_successors_within_horizon():
    keys = page_keys(np.zeros(9, np.int64), np.array([1, 2, 3, 1, 2, 4, 1, 5, 5]), 1)
    t = PageTable.build([keys], horizon=2, max_succ=4)
    assert t.keys.tolist() == [1, 2, 3, 4]  # 5 is last: no successor
    # after repeats are dropped: 1 2 3 1 2 4 1 5 → successors of 1 (3 times) within 2 steps:
    # {2 (step 1), 3 (step 2)}, {2 (1), 4 (2)}, {5 (1)}
    assert t.succ[0].tolist() == [2, 5, 3, 4]  # most frequent first, then the nearer, then the smaller page
    d = 1 - STEP_DISCOUNT
    np.testing.assert_allclose(t.prob[0], [2 / 3, 1 / 3, d / 3, d / 3], rtol=1e-6)
    assert t.succ[3].tolist() == [1, 5, -1, -1] and t.prob[3, 2] == 0


def test_mix_row_weights_and_ties():
    t = PageTable(np.array([7], np.int64), np.array([[9, 11, -1]], np.int64), np.array([[0.9, 0.2, 0]], np.float32))
    s2r = np.array([0, -1], np.int64)
    rp = np.array([100, 0], np.int64)
    o = [np.zeros(8, np.int64), np.zeros(8, np.int64), np.zeros(8, np.float32)]
    d = (np.array([0, 0], np.int64), np.array([8, 11], np.int64), np.array([0.5, 0.4], np.float32))
    n = mix_row(*d, 2, 7, t.keys, t.succ, t.prob, s2r, rp, 0, 7, 0.5, 3, *o)
    # 11: 0.5*0.4 + 0.5*0.2 = 0.3 ; 9: 0.45 ; 8: 0.25
    assert n == 3 and o[1][:3].tolist() == [9, 11, 8]
    n = mix_row(*d, 2, 7, t.keys, t.succ, t.prob, s2r, rp, 0, 7, 0.0, 3, *o)
    assert n == 2 and o[1][:2].tolist() == [8, 11]  # λ = 0: the delta model alone, its order


def test_access_trace_schedule_at_misses_equals_live_predictor(trained, walk, tmp_path):
    """On a full access trace the model is shown the tier's misses; a per-fault predictor fed
    those same events names the same pages, and the schedule fires only there."""
    from pagecast.sim.misses import miss_events

    path, _, _ = trained
    pages = []
    for p in np.tile(walk, 2):  # a hot loop of 4 pages between the library's irregular pages
        pages += [int(p)] + [N_PAGES - 1 - q for q in range(4)] * 3
    test = _write(tmp_path / "acc.parquet", pages, 2, 0x5500_1234_0000, extra_regions=2)
    cap = 8
    ev = miss_events(test, cap)
    assert 800 <= len(ev) < len(pages) // 4
    sched = predict_schedule(path, test, top_k=10, events=ev)
    assert set(np.unique(sched.trigger).tolist()) <= set(ev.tolist())
    stream = read_demand(test)
    pf = load_predictor(path, top_k=10, backend="numba")
    pf.reset(stream.regions)
    live = []
    for i in ev.tolist():
        live += [
            (i, r, p) for r, p in pf.observe(int(stream.t_ns[i]), int(stream.region[i]), int(stream.page[i]), False)
        ]
    batch = list(zip(sched.trigger.tolist(), sched.region.tolist(), sched.page.tolist()))
    assert live == batch
    cfg = SimConfig(capacity=cap)
    none = simulate(test, cfg, None).faults
    # the next library page, fetched at each miss, is there when needed (2 pages: room for the hot loop)
    assert none == len(ev) and simulate(test, cfg, predict_schedule(path, test, top_k=2, events=ev)).faults < none // 4


def test_two_runs_validate_leave_one_run_out(tmp_path, walk):
    runs = [read_demand(_write(tmp_path / f"r{i}.parquet", np.tile(walk, 2 + i), 0, i << 30)) for i in range(3)]
    spec = DatasetSpec(horizon=10)
    data = prepare(runs, spec, val_fraction=0.1)
    assert data.stats["validation"] == "leave-one-run-out"
    assert data.stats["val_events"] == len(runs[2]) and data.stats["train_events"] == len(runs[0]) + len(runs[1])
    timed = prepare(runs, spec, val_fraction=0.1, validation="time")
    assert timed.stats["validation"] == "time" and timed.stats["val_events"] == sum(round(len(r) * 0.1) for r in runs)
    one = prepare(runs[:1], spec, val_fraction=0.1)
    assert one.stats["validation"] == "time"


def test_budget_chosen_on_training_run(trained, tmp_path):
    """k per prediction chosen by simulating a training run; k = 0 gives an empty schedule."""
    from pagecast.sim.learned_budget import choose_top_k, schedule_with_budget

    path, _, test = trained
    k, faults = choose_top_k(path, test, 200)
    assert faults[0] == 800 and faults[k] == min(faults.values()) and k >= 1 and faults[k] < 10
    assert len(schedule_with_budget(path, test, 0).trigger) == 0
