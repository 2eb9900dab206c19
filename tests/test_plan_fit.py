"""The cost model fitted to the recordings' own timing (``fit_scale``, ``plan_with_model``).

Hand-computed: a device model that prices a run's reads above the run's own recorded span
is scaled down by the median of span / modelled I/O, never up; the planner's predictions
are the fitted ones, and the run model predicts each held-out recording's wall time as the
least CPU time of the recordings (span less fitted I/O) plus the files' predicted I/O.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pagecast.plan.cost_model import DeviceCosts
from pagecast.plan.planner import PlannerConfig, fit_scale, plan_with_model, scaled
from pagecast.trace import Kind, Region, TraceWriter

# 1 ms a request at any depth, 100 MB/s, 128 KiB read-around (32-page windows)
SLOW = DeviceCosts(seq_bytes_per_s=100e6, iops_by_depth=((1, 1000.0), (4, 1000.0)), read_ahead_kb=128, source="test")
# a run of the file below under no plan: windows 0-31 and 32-63, two requests of 32 pages
NOTHING_S = 2 / 1000 + 64 * 4096 / 100e6


def test_fit_scale_hand_computed():
    io = np.array([0.4, 0.4, 0.4])
    assert fit_scale(np.array([0.1, 0.2, 0.8]), io) == pytest.approx(0.5)  # median of 0.25, 0.5, 2
    assert fit_scale(np.array([0.8, 1.2, 2.0]), io) == 1.0  # the model is not slower than the runs: never up
    assert fit_scale(np.array([0.1, 0.0, 0.3]), np.array([0.0, 0.4, 0.4])) == pytest.approx(0.75)  # usable runs only
    assert fit_scale(np.zeros(2), np.zeros(2)) == 1.0
    half = scaled(SLOW, 0.5)
    assert half.iops(1) == 2000.0 and half.seq_bytes_per_s == 200e6 and "x 0.50" in half.source


def _trace(path: Path, data: Path, pages: list[int], span_s: float) -> Path:
    region = Region(0, str(data), kind="file", path=str(data), length=data.stat().st_size)
    with TraceWriter(path, regions=[region], meta={}) as w:
        n = len(pages)
        w.write(t_ns=np.linspace(0, span_s * 1e9, n).astype(np.int64), region=np.zeros(n, np.int32),
                page=np.array(pages), kind=np.full(n, int(Kind.FILE_MAPPED), np.uint8))  # fmt: skip
    return path


def test_planner_prices_with_the_fitted_device_and_predicts_each_run(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"\1" * (64 * 4096))
    shared = list(range(0, 64, 4))
    spans = [0.25 * NOTHING_S, 0.5 * NOTHING_S, 2.0 * NOTHING_S]
    traces = [_trace(tmp_path / f"r{i}.parquet", data, shared + [1 + i], s) for i, s in enumerate(spans)]
    cfg = dict(device=SLOW, overlap=0.0, startup_s=0.0, noise=0.0)
    doc, choices, model = plan_with_model(traces, PlannerConfig(**cfg))
    assert model.scale == pytest.approx(0.5)
    assert model.io_s == pytest.approx([0.5 * NOTHING_S] * 3)
    assert model.cpu_s == pytest.approx([0.0, 0.0, 1.5 * NOTHING_S])
    (c,) = choices
    assert c.predicted_s["nothing"] == pytest.approx(0.5 * NOTHING_S)
    assert model.per_run["default"] == pytest.approx([0.5 * NOTHING_S] * 3)
    assert model.wall("default") == pytest.approx([0.5 * NOTHING_S] * 3)  # the least CPU time: 0
    assert "fitted to the recordings: I/O times x 0.50" in doc.note
    # without the fit: the device as given, and no note
    doc, choices, model = plan_with_model(traces, PlannerConfig(**cfg, fit=False))
    assert model.scale == 1.0 and choices[0].predicted_s["nothing"] == pytest.approx(NOTHING_S)
    assert "fitted" not in doc.note
