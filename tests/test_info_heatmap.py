"""pagecast info / heatmap / recover on traces with known contents."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pagecast.cli import main as cli_main
from pagecast.report.heatmap import HeatmapConfig, compute
from pagecast.report.summary import summarize
from pagecast.trace import Kind, Region, TraceWriter, open_trace


@pytest.fixture()
def trace(tmp_path: Path) -> tuple[Path, dict]:
    rng = np.random.default_rng(0)
    n = 50_000
    regions = [
        Region(id=0, name="a", kind="file", path="/x", length=100 * 4096),
        Region(id=0, name="b", kind="anon", length=1000 * 4096),
        Region(id=0, name="c", kind="anon", length=0),  # unknown length: sort-based counting
        Region(id=0, name="d", kind="anon", length=50 * 4096),
    ]  # pages beyond its length too
    cols = {
        "t_ns": np.sort(rng.integers(0, 2_000_000_000, n)),
        "region": rng.choice([-1, 0, 1, 1, 2, 3], n).astype(np.int32),
        "page": rng.integers(0, 100, n),
        "kind": rng.choice([Kind.FAULT_MINOR, Kind.FAULT_MAJOR, Kind.ACCESS], n).astype(np.uint8),
    }
    p = tmp_path / "t.parquet"
    with TraceWriter(p, regions=regions, source="test", row_group_rows=7000) as w:
        for i in range(0, n, 9999):
            w.write(**{k: v[i : i + 9999] for k, v in cols.items()})
    return p, cols


def test_summary_matches_numpy(trace):
    p, c = trace
    s = summarize(p, batch_rows=4096)
    assert s.rows == len(c["t_ns"])
    assert s.kinds == {Kind(k).name: int(v) for k, v in zip(*np.unique(c["kind"], return_counts=True))}
    assert s.faults == int(np.isin(c["kind"], [Kind.FAULT_MINOR, Kind.FAULT_MAJOR]).sum())
    assert s.unmapped_rows == int((c["region"] == -1).sum())
    assert s.unique_pages == len(set(zip(c["region"].tolist(), c["page"].tolist())))
    by = {r.id: r for r in s.top_regions}
    assert by[1].rows == int((c["region"] == 1).sum())
    assert by[1].unique_pages == len(np.unique(c["page"][c["region"] == 1]))
    assert by[0].length_pages == 100
    for rid in (2, 3):
        assert by[rid].unique_pages == len(np.unique(c["page"][c["region"] == rid]))
    assert s.duration_s == pytest.approx((c["t_ns"].max() - c["t_ns"].min()) / 1e9)


def test_info_cli_json(trace, capsys):
    p, c = trace
    assert cli_main(["info", "--json", str(p)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["rows"] == len(c["t_ns"]) and d["regions"] == 4


def test_heatmap_grid_counts_every_event(trace, tmp_path):
    p, c = trace
    grids, tmin, tmax = compute(open_trace(p), HeatmapConfig(top=2, time_bins=50, page_bins=40, batch_rows=3000))
    assert grids[0].region == 1 and len(grids) == 2  # busiest first
    for g in grids:
        sel = c["region"] == g.region
        assert g.grid.sum() == sel.sum()
        # page 0..99 in 40 bins: rows of pages 0-2 go to bin 0
        assert g.grid[0].sum() == int((sel & (c["page"] < 3)).sum())
    out = tmp_path / "h.png"
    assert cli_main(["heatmap", str(p), "-o", str(out), "--region", "0", "--kind", "fault_major"]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_heatmap_bad_region_one_line(trace, tmp_path, capsys):
    p, _ = trace
    assert cli_main(["heatmap", str(p), "-o", str(tmp_path / "h.png"), "--region", "9"]) == 2
    assert "no region 9" in capsys.readouterr().err
    assert not (tmp_path / "h.png").exists()


def test_recover_cli(tmp_path, capsys):
    out = tmp_path / "r.parquet"
    w = TraceWriter(out, journal=True, row_group_rows=1000, source="test")
    w.add_region(Region(id=0, name="x", kind="anon", length=4096 * 10))
    w.write(t_ns=np.arange(2500), region=0, page=np.arange(2500) % 10)
    w._sink.flush()  # a recorder killed here: two complete row groups journaled, 500 rows buffered
    assert cli_main(["recover", "--json", str(out) + ".partial"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["rows"] == 2000 and d["regions"] == 1
    assert open_trace(out).read(["page"])["page"].tolist() == (np.arange(2000) % 10).tolist()


def test_info_strict_json_for_non_ns_clock(tmp_path, capsys):
    p = tmp_path / "i.parquet"
    with TraceWriter(
        p, regions=[Region(id=0, name="x", kind="anon", length=0)], meta={"time_unit": "instructions"}
    ) as w:
        w.write(t_ns=np.arange(100) * 3, region=0, page=np.arange(100) % 7)
    assert cli_main(["info", "--json", str(p)]) == 0

    def no_nan(name):
        raise AssertionError(f"not strict JSON: {name}")

    d = json.loads(capsys.readouterr().out, parse_constant=no_nan)
    assert d["duration_s"] is None and d["span"] == 297 and d["time_unit"] == "instructions"
    assert d["top_regions"][0]["touched_pct"] is None and d["top_regions"][0]["unique_pages"] == 7
