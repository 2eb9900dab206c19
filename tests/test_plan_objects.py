"""Learned objects: the size and alignment of what a program reads whole, and warming the
objects that recur across runs (``pagecast.plan.objects``, the planner's ``objects`` candidates).

Layouts are checked on hand-made page sets (objects of 64 pages at page 8, neighbours
merged into longer runs, a run that breaks the layout); the planner on synthetic
recordings of an object reader: the layout is found, the ``objects`` candidate warms
exactly the whole objects at least k training runs touched, leave-one-run-out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pagecast.plan.cost_model import DeviceCosts
from pagecast.plan.objects import ObjectLayout, learn_layout, object_pages, page_runs
from pagecast.plan.planner import PlannerConfig, plan_by_predicted_time, price_folds, shared_objects
from pagecast.trace import Kind, Region, TraceWriter

SLOW = DeviceCosts(seq_bytes_per_s=100e6, iops_by_depth=((1, 1000.0), (4, 1000.0)), read_ahead_kb=128, source="test")


def objs(*ids: int, size: int = 64, align: int = 8) -> np.ndarray:
    return np.concatenate([np.arange(align + i * size, align + (i + 1) * size) for i in ids]).astype(np.int64)


def test_page_runs():
    s, n = page_runs(np.array([1, 2, 3, 7, 9, 10]))
    assert s.tolist() == [1, 7, 9] and n.tolist() == [3, 1, 2]


def test_layout_of_objects_read_whole():
    runs = [objs(0, 3, 4), objs(1, 3, 9), objs(2, 5, 6, 7)]  # 3+4 and 5+6+7: merged neighbours
    lay = learn_layout(runs)
    assert (lay.pages, lay.align, lay.coverage, lay.objects) == (64, 8, 1.0, 10)
    # a stray run of 10 pages: 10 of 650 pages outside whole objects, still the layout
    lay = learn_layout([*runs, np.arange(2000, 2010)])
    assert (lay.pages, lay.align) == (64, 8) and lay.coverage == pytest.approx(640 / 650)
    # scattered pages and runs of many sizes: no layout
    rng = np.random.default_rng(0)
    assert learn_layout([np.unique(rng.integers(0, 10_000, 500)) for _ in range(3)]) is None
    assert learn_layout([np.arange(0, 100), np.arange(300, 337)]) is None  # two reads are not evidence
    assert learn_layout([]) is None


def test_object_pages_and_shared_objects():
    lay = ObjectLayout(64, 8, 1.0, 9)
    assert object_pages(np.array([8, 100, 71]), lay, 1000).tolist() == list(range(8, 136))
    assert object_pages(np.array([3]), lay, 1000).tolist() == list(range(0, 8))  # before the first object: clipped
    assert object_pages(np.array([990]), lay, 1000).tolist() == list(range(968, 1000))  # the file's end
    runs = [np.array([8, 9]), np.array([10, 200]), np.array([300])]  # objects 0; 0, 3; 4
    assert shared_objects(runs, 2, lay, 1000).tolist() == list(range(8, 72))
    assert shared_objects(runs, 1, lay, 1000).tolist() == [*range(8, 72), *range(200, 264), *range(264, 328)]


def _trace(path: Path, data: Path, pages: np.ndarray) -> Path:
    region = Region(0, str(data), kind="file", path=str(data), length=data.stat().st_size)
    with TraceWriter(path, regions=[region], meta={}) as w:
        n = len(pages)
        w.write(t_ns=np.arange(n), region=np.zeros(n, np.int32), page=pages,
                kind=np.full(n, int(Kind.FILE_READ), np.uint8))  # fmt: skip
    return path


def test_planner_warms_the_recurring_objects_whole(tmp_path):
    data = tmp_path / "weights.bin"
    data.write_bytes(b"\1" * ((8 + 64 * 16) * 4096))
    # object 0 in every run, object 2 in two, the rest in one each
    runs = [objs(0, 2, 5), objs(0, 2, 7), objs(0, 4, 9)]
    traces = [_trace(tmp_path / f"r{i}.parquet", data, r) for i, r in enumerate(runs)]
    cfg = PlannerConfig(device=SLOW, overlap=0.0, startup_s=0.0, noise=0.0, fit=False, margin=0.0)
    doc, choices = plan_by_predicted_time(traces, cfg)
    (c,) = choices
    assert c.objects.startswith("objects of 64 pages (256 KiB) at page 8 + k x 64")
    assert "objects+default@1" in c.predicted_s and "objects+default" in c.predicted_s
    doc2, choices2 = plan_by_predicted_time(traces, PlannerConfig(**{**vars(cfg), "objects": False}))
    assert "objects+default" not in choices2[0].predicted_s
    # the plans' warm sets: the whole objects k of the 3 runs touched (k = 2: objects 0 and 2)
    fp = price_folds(runs, 8 + 64 * 16, False, SLOW, cfg)
    assert fp.warm_sets["objects+default"].tolist() == objs(0, 2).tolist()
    assert fp.warm_sets["objects+default@1"].tolist() == objs(0, 2, 4, 5, 7, 9).tolist()
    # and the plan written for a chosen objects candidate warms exactly its set
    doc, choices = plan_by_predicted_time(traces, PlannerConfig(**{**vars(cfg), "min_runs": 2}))
    best = min((v, k) for k, v in choices[0].predicted_s.items() if k.startswith("objects"))[1]
    assert choices[0].predicted_s[best] <= choices[0].predicted_s["warm+default"]


def test_native_object_fetch_is_chosen_without_the_live_start_up_of_other_files():
    from pagecast.plan.cost_model import Prediction
    from pagecast.plan.planner import OBJECTS, FilePricing, _Priced, live_choices

    def priced(path: str, nothing: float, live: dict[str, float]) -> _Priced:
        fold = {"nothing": [Prediction(nothing, prog_s=nothing)] * 2}
        lv = {c: [Prediction(v, prog_s=v)] * 2 for c, v in live.items()}
        return _Priced(path, 1000, [True, True], FilePricing(fold, {}, {}, "test", lv), "nothing", mapped=True)

    weights = priced("weights", 0.300, {OBJECTS: 0.180})  # the shim runs it: no start-up
    # extent on a mapped file: the Python live loop (no read() for the shim to see)
    lib = priced("lib", 0.010, {"per-fault:extent": 0.002})
    cfg = PlannerConfig(live_startup_s=0.5, margin=0.10)
    chosen, why = live_choices([weights, lib], cfg)
    # all live candidates: 310 - 128 + 500 ms; the native ones alone: 310 - 120 = 190 ms
    assert chosen == {"weights": OBJECTS} and "0 ms of live start-up" in why
    # with a free start-up the per-fault policy comes along
    chosen, _ = live_choices([weights, lib], PlannerConfig(live_startup_s=0.0, margin=0.10))
    assert chosen == {"weights": OBJECTS, "lib": "per-fault:extent"}
    # a pack of a mapped file runs in the launcher too (the pager's shim): no start-up either
    packed = priced("lib", 0.010, {"pack": 0.002})
    chosen, why = live_choices([weights, packed], cfg)
    assert chosen == {"weights": OBJECTS, "lib": "pack"} and "0 ms of live start-up" in why
