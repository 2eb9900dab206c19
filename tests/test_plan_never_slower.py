"""Never slower: a plan whose predicted gain is not above the start-up and the noise is "nothing".

``never_slower`` on hand-computed per-file predictions (the planner's run-wide step), and
``plan_by_predicted_time`` end to end on synthetic recordings: the same recordings give a
plan when its gain clears the floor and a plan of nothing but ``nothing`` when it does not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pagecast.plan.cost_model import DeviceCosts, Prediction
from pagecast.plan.format import read_plan, write_plan
from pagecast.plan.planner import FilePricing, PlannerConfig, _Priced, never_slower, plan_by_predicted_time
from pagecast.trace import Kind, Region, TraceWriter

SLOW = DeviceCosts(seq_bytes_per_s=100e6, iops_by_depth=((1, 1000.0), (4, 1000.0)), source="test")


def _priced(path: str, chosen: str, **cands: tuple[float, float]) -> _Priced:
    folds = {c: [Prediction(pre + prog, pre_s=pre, prog_s=prog)] * 2 for c, (pre, prog) in cands.items()}
    return _Priced(path, 100, [True, True], FilePricing(folds, {}, {}, "test"), chosen)


def test_gain_below_start_up_and_noise_is_nothing_hand_computed():
    cfg = PlannerConfig(startup_s=0.002, noise=0.05)
    a = _priced("a", "warm+default", nothing=(0, 0.100), **{"warm+default": (0.010, 0.080)})
    b = _priced("b", "nothing", nothing=(0, 0.020))
    # base 120 ms; planned 90 + 20 = 110 ms: gain 10 ms, floor 2 + 6 = 8 ms -> kept
    assert never_slower([a, b], 0.0, cfg, live=False) is None
    # the floor at 12 ms (noise 8.33 %): the gain of 10 ms no longer clears it
    why = never_slower([a, b], 0.0, PlannerConfig(startup_s=0.002, noise=0.0834), live=False)
    assert why and "10.0 ms of 120.0 ms" in why
    # 5 ms of CPU to hide the prefetching behind: planned 105 ms, gain 15 ms -> kept again
    assert never_slower([a, b], 0.005, PlannerConfig(startup_s=0.002, noise=0.0834), live=False) is None
    # a plan that needs the Python live machinery pays its start-up too
    assert never_slower([a, b], 0.0, PlannerConfig(startup_s=0.002, noise=0.05, live_startup_s=0.5), live=True)
    # nothing chosen anywhere: nothing to undo
    assert never_slower([b], 0.0, cfg, live=False) is None


def _trace(path: Path, data: Path, pages: list[int]) -> Path:
    """A recording as the recorder writes it, without perf: one file region, its mapped pages."""
    region = Region(0, str(data), kind="file", path=str(data), length=data.stat().st_size)
    with TraceWriter(path, regions=[region], meta={}) as w:
        n = len(pages)
        w.write(t_ns=np.arange(n), region=np.zeros(n, np.int32), page=np.array(pages),
                kind=np.full(n, int(Kind.FILE_MAPPED), np.uint8))  # fmt: skip
    return path


@pytest.fixture
def recordings(tmp_path) -> list[Path]:
    data = tmp_path / "data.bin"
    data.write_bytes(b"\1" * (64 * 4096))
    shared = list(range(0, 64, 4))  # every run uses these 16 pages, plus one of its own
    return [_trace(tmp_path / f"r{i}.parquet", data, shared + [1 + i]) for i in range(3)]


def test_plan_is_nothing_when_its_gain_does_not_clear_the_start_up(recordings, tmp_path):
    cfg = dict(device=SLOW, overlap=0.0, startup_s=0.0, noise=0.0, fit=False)  # spans of a few µs: no fit
    doc, choices = plan_by_predicted_time(recordings, PlannerConfig(**cfg))
    gain = sum(f.gain_ms for f in doc.files)
    assert gain > 0.5 and any(f.strategy != "nothing" for f in doc.files), [c.why for c in choices]
    # the same recordings, a start-up just above that gain: every file nothing, the note says why
    doc, choices = plan_by_predicted_time(recordings, PlannerConfig(**cfg | {"startup_s": (gain + 0.1) / 1e3}))
    assert all(f.strategy == "nothing" and f.advice == "default" and not f.ranges for f in doc.files)
    assert all(c.chosen == "nothing" for c in choices) and "not above the start-up" in doc.note
    out = tmp_path / "n.plan"
    write_plan(out, doc)
    assert [f.strategy for f in read_plan(out).files] == ["nothing"] * len(doc.files)
