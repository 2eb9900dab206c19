"""The oracle row bounds every row on full access traces, small capacities included."""

from __future__ import annotations

import json

import numpy as np

from pagecast.cli import main
from pagecast.policies.oracle import Oracle
from pagecast.sim import SimConfig, simulate
from pagecast.sim.bound import miss_oracle_schedule, oracle_bound, oracle_ks
from sim_helpers import ref_lru, write_trace


def hot_and_scan(n: int = 300, hot: int = 40) -> np.ndarray:
    """A hot set touched between the pages of a scan: at a miss, the next 32 distinct pages
    are hot pages already resident, so the next-k oracle names nothing that will miss."""
    out = []
    for j in range(n):
        out += list(range(hot)) + [1000 + j]
    return np.array(out)


def test_next_k_oracle_alone_loses_to_nextline_and_the_bound_does_not(tmp_path):
    path = write_trace(tmp_path / "t.parquet", hot_and_scan())
    cfg = SimConfig(capacity=100)  # room for the hot set and nextline's pages
    nextline = simulate(path, cfg, "nextline").faults
    old = min(simulate(path, cfg, Oracle(k=k)).faults for k in oracle_ks(32))
    assert nextline < old  # the failure: the reference had more faults than a prefetcher
    best = oracle_bound(path, cfg)
    assert best.extra["oracle_source"].startswith("miss-oracle")
    for name in ("none", "nextline", "stride", "leap", "markov", "bestoffset", "extent", "ampm"):
        assert best.faults <= simulate(path, cfg, name).faults, name


def test_miss_oracle_names_the_next_misses(tmp_path):
    pages = hot_and_scan(20, 6)
    path = write_trace(tmp_path / "t.parquet", pages)
    s = miss_oracle_schedule(path, 8, 2)
    assert ref_lru(pages.tolist(), 8) == 6 + 20
    first_scan = 6  # index of page 1000: the misses before it are the hot pages' first uses
    rows = s.trigger == first_scan
    assert s.page[rows].tolist() == [1001, 1002] and s.score[rows].tolist() == [2.0, 1.0]


def test_eval_oracle_row_bounds_every_row(tmp_path, capsys):
    path = write_trace(tmp_path / "t.parquet", hot_and_scan(200))
    for cap in ("5", "48", "50%"):
        assert main(["eval", str(path), "--capacity", cap, "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)["results"]
        oracle = rows[-1]
        assert oracle["prefetcher"] == "oracle" and oracle["oracle_source"]
        assert all(oracle["faults"] <= r["faults"] for r in rows), cap


def test_eval_skips_ranking_on_a_long_trace_and_says_so(tmp_path, capsys):
    path = write_trace(tmp_path / "t.parquet", hot_and_scan(50))
    assert main(["eval", str(path), "--capacity", "48", "--policy", "nextline", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert main(["eval", str(path), "--capacity", "48", "--policy", "nextline", "--json", "--rank-events", "100"]) == 0
    out = capsys.readouterr()
    short = json.loads(out.out)
    assert "ranking metrics skipped" in out.err and short["ranking"].startswith("skipped")
    assert [r["faults"] for r in short["results"]] == [r["faults"] for r in full["results"]]
    assert short["results"][0].get("rank_recall_at_k") is None and full["results"][0]["rank_recall_at_k"] > 0
