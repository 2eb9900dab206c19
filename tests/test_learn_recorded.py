"""Cross-run learning on a real program: record touchpages twice (cold file, different
ASLR bases), train on run 1, and let the model's schedule prefetch run 2 in the simulator."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from pagecast.bench.workloads import build_workload
from pagecast.cli import main as cli_main
from pagecast.learn.dataset import read_demand
from pagecast.learn.predict import predict_schedule
from pagecast.util.pagecache import drop_file
from perf_support import needs_perf

# A repeating irregular walk over a file: no constant stride, and order-1 delta successors
# are ambiguous (5 → 2, 5 → 9).
DELTAS = np.array([5, 2, 9, 5, 9, 3, 2, 5, 2, 11, 1, 4])
N = 1500


pytestmark = [pytest.mark.perf, pytest.mark.slow, needs_perf]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tp = build_workload("touchpages")
    # on the disk file system, not tmpfs, so the reads are real major faults
    base = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata"
    base.mkdir(parents=True, exist_ok=True)
    data = base / f"walk-{os.getpid()}.bin"
    pages = np.concatenate([[0], np.cumsum(DELTAS[np.arange(N - 1) % len(DELTAS)])])
    data.write_bytes(np.random.default_rng(0).integers(0, 256, (int(pages.max()) + 1) * 4096, dtype=np.uint8).tobytes())
    out = tmp_path_factory.mktemp("rec")
    traces = []
    try:
        for run in (1, 2):
            drop_file(data)
            t = out / f"run{run}.parquet"
            assert (
                cli_main(["record", "-o", str(t), "--", str(tp), str(data), ",".join(map(str, pages)), "--anon", "300"])
                == 0
            )
            traces.append(t)
    finally:
        data.unlink(missing_ok=True)
    return out, traces, data, pages


def test_model_from_run1_prefetches_run2(runs, capsys):
    from pagecast.policies import available_prefetchers
    from pagecast.sim import SimConfig, simulate

    out, (run1, run2), data, pages = runs
    s1, s2 = read_demand(run1), read_demand(run2)
    # the recording is the program's truth: every file page once, in program order, both runs
    for s in (s1, s2):
        fid = [r.id for r in s.regions if r.kind == "file" and r.path == str(data)]
        assert len(fid) == 1
        assert s.page[s.region == fid[0]].tolist() == pages.tolist()
    b1 = {r.path: r.base for r in s1.regions if r.kind == "file"}
    b2 = {r.path: r.base for r in s2.regions if r.kind == "file"}
    assert b1[str(data)] != b2[str(data)]  # mapped elsewhere: raw addresses would not transfer

    model = out / "model.pt"
    assert (
        cli_main(
            [
                "train",
                str(run1),
                "-o",
                str(model),
                "--epochs",
                "6",
                "--windows-per-epoch",
                "2048",
                "--lr",
                "1e-2",
                "--json",
            ]
        )
        == 0
    )
    capsys.readouterr()
    sched = predict_schedule(model, run2, top_k=10)
    from pagecast.learn.ranking import ranking_metrics

    assert ranking_metrics(sched, run2, k=10, horizon=10)["recall_at_k"] >= 0.9
    cfg = SimConfig(capacity=512)
    none = simulate(run2, cfg, "none").faults
    oracle = simulate(run2, cfg, "oracle").faults
    learned = simulate(run2, cfg, sched).faults
    classic = {
        n: simulate(run2, cfg, n).faults for n in available_prefetchers() if n not in ("none", "oracle", "learned")
    }
    assert none >= N
    assert (none - learned) >= 0.8 * (none - oracle), (none, learned, oracle)
    assert learned < min(classic.values()), (learned, classic)
