"""``pagecast bench``'s harness end to end on a small weights file, one round: the table is
the shared one (pagecast.bench.results), every strategy ran once and is listed by kind.

Timings are not asserted (benchmarks print them); the test checks what the table is made of."""

from __future__ import annotations

import json
from pathlib import Path

from pagecast.bench.harness import KERNEL_LABEL, BenchConfig, _plain, run_bench
from pagecast.bench.results import KINDS
from perf_support import needs_perf


@needs_perf
def test_one_round_of_every_strategy_listed_by_kind(tmp_path: Path) -> None:
    cfg = BenchConfig(out_dir=tmp_path / "out", weights=tmp_path / "w.bin", size_mib=16, tokens=1,
                      train_prompts=(101, 102), runs=1, policies=("nextline",), train_model=False)  # fmt: skip
    extra = "kernel: listed after the pagecast rows"

    def extra_rows(traces: list[Path], weights: Path):
        assert len(traces) == 2
        return [(extra, lambda r: _plain(cfg, weights, "random", extra, r))]

    rep = run_bench(cfg, extra_rows=extra_rows)
    names = [x["strategy"] for x in rep["strategies"]]
    kinds = [x["kind"] for x in rep["strategies"]]
    assert kinds == sorted(kinds, key=KINDS.index)  # kernel rows, pagecast rows, oracle rows, warm cache
    assert names[:5] == [*KERNEL_LABEL.values(), extra]  # the extra kernel row joined the kernel rows
    assert names[-1] == "warm cache" and kinds.count("warm") == 1
    assert {"pagecast: nextline", "pagecast: schedule replay", "pagecast: page pack (replay)"} <= set(names)
    assert [n for n, k in zip(names, kinds) if k == "oracle"] == [
        "oracle (this run's pages)",
        "oracle page pack (this run's pages)",
    ]
    assert all(x["runs"] == 1 for x in rep["strategies"])
    best = [x for x in rep["strategies"] if x["best_kernel"]]
    assert len(best) == 1 and best[0]["kind"] == "kernel" and rep["best_kernel"] == best[0]["strategy"]
    assert list(rep["speedup_vs_best_kernel"]) == [n for n, k in zip(names, kinds) if k == "pagecast"]
    assert rep["same_output_every_run"]
    # every run's row, as bench.json keeps it, names its kind and has the workload's own measures
    runs = json.loads((tmp_path / "out" / "bench.json").read_text())["runs"]
    assert sorted(r["strategy"] for r in runs) == sorted(names)
    assert all(r["kind"] in KINDS and r["ttft_s"] is not None and r["checksum"] is not None for r in runs)
    assert Path(rep["plot"]).stat().st_size > 0
