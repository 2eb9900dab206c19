"""`pagecast simulate / eval / sweep` end to end, including a sweep on a local Ray instance."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from pagecast.cli import main
from pagecast.trace.schedule import Schedule, write_schedule
from sim_helpers import mixed_pages, ref_lru, write_trace


@pytest.fixture()
def trace(tmp_path):
    return write_trace(tmp_path / "t.parquet", mixed_pages(3000))


def test_simulate_json_matches_reference(trace, capsys):
    assert main(["simulate", str(trace), "--capacity", "200", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    pages = mixed_pages(3000).tolist()
    assert d["faults"] == ref_lru(pages, 200) and d["capacity_pages"] == 200


def test_simulate_capacity_forms(trace, capsys):
    distinct = len(np.unique(mixed_pages(3000)))
    main(["simulate", str(trace), "--capacity", "50%", "--json"])
    assert json.loads(capsys.readouterr().out)["capacity_pages"] == round(distinct * 0.5)
    main(["simulate", str(trace), "--capacity", "1MiB", "--json"])
    assert json.loads(capsys.readouterr().out)["capacity_pages"] == 256


def test_simulate_schedule_and_table(trace, tmp_path, capsys):
    pages = mixed_pages(3000)
    trig = np.arange(len(pages) - 1)
    sched = Schedule(trig, trig, np.zeros(len(trig), np.int32), pages[1:], np.ones(len(trig), np.float32))
    s = write_schedule(tmp_path / "s.parquet", sched)
    assert main(["simulate", str(trace), "--capacity", "64", "--schedule", str(s)]) == 0
    out = capsys.readouterr().out
    assert "faults" in out and "est_time_ns" in out


def test_errors_are_one_line(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "missing.parquet")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.parquet" in err[0]
    bad = write_trace(tmp_path / "b.parquet", [1, 2, 3])
    assert main(["simulate", str(bad), "--capacity", "lots"]) == 2
    assert "bad capacity" in capsys.readouterr().err
    assert main(["simulate", str(bad), "--prefetcher", "nosuch"]) == 2
    assert "unknown prefetcher" in capsys.readouterr().err


def test_eval_oracle_last(trace, capsys):
    assert main(["eval", str(trace), "--prefetchers", "oracle,none,stride", "--capacity", "100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    pairs = [(r["eviction"], r["prefetcher"]) for r in d["results"]]
    # every prefetcher with the eviction (lru), the oracle last, then the floor: MIN + oracle
    assert pairs == [("lru", "none"), ("lru", "stride"), ("lru", "oracle"), ("min", "oracle")]
    oracle = d["results"][2]
    assert oracle["rank_precision_at_k"] > d["results"][1]["rank_precision_at_k"]
    assert oracle["faults"] <= d["results"][0]["faults"]
    assert d["results"][3]["faults"] <= oracle["faults"]


def test_eval_every_prefetcher_with_every_eviction(trace, capsys):
    args = ["eval", str(trace), "--policy", "none,nextline", "--evictions", "lru,lfu", "--capacity", "100", "--json"]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    pairs = [(r["eviction"], r["prefetcher"]) for r in d["results"]]
    assert pairs == [(e, p) for e in ("lru", "lfu") for p in ("none", "nextline", "oracle")] + [("min", "oracle")]
    assert main(["eval", str(trace), "--evictions", "nosuch"]) == 2
    assert "unknown eviction policy 'nosuch'" in capsys.readouterr().err


def test_eval_model_without_learn(trace, tmp_path, capsys, monkeypatch):
    import sys

    model = tmp_path / "m.pt"
    model.write_bytes(b"PK\x03\x04")  # exists: the missing module is what is reported
    monkeypatch.setitem(sys.modules, "pagecast.learn.predict", None)
    assert main(["eval", str(trace), "--model", str(model)]) == 2
    assert "pagecast.learn" in capsys.readouterr().err


def test_sweep_local_csv_plot(trace, tmp_path, capsys):
    out_csv, out_png = tmp_path / "s.csv", tmp_path / "s.png"
    rc = main(
        [
            "sweep",
            str(trace),
            "--capacities",
            "50,200",
            "--evictions",
            "lru,min",
            "--prefetchers",
            "none,nextline",
            "-j",
            "2",
            "--csv",
            str(out_csv),
            "--plot",
            str(out_png),
        ]
    )
    assert rc == 0
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 8 + 2  # 2 capacities × 2 evictions × 2 prefetchers, and the floor (min × oracle) per capacity
    assert sum(1 for r in rows if (r["eviction"], r["prefetcher"]) == ("min", "oracle")) == 2
    pages = mixed_pages(3000).tolist()
    lru = {
        int(r["capacity_pages"]): int(r["faults"]) for r in rows if r["eviction"] == "lru" and r["prefetcher"] == "none"
    }
    assert lru == {50: ref_lru(pages, 50), 200: ref_lru(pages, 200)}
    assert out_png.stat().st_size > 1000


@pytest.mark.slow
def test_sweep_on_local_ray(trace, capsys):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        rc = main(["sweep", str(trace), "--capacities", "50,200", "--prefetchers", "none", "--ray", "auto", "--json"])
    finally:
        ray.shutdown()
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    pages = mixed_pages(3000).tolist()
    lru = [r["faults"] for r in rows if r["eviction"] == "lru"]
    assert lru == [ref_lru(pages, 50), ref_lru(pages, 200)]
    assert len(rows) == 4  # and the floor, min × oracle, at each capacity


def test_eval_json_is_strict_and_oracle_bounds_none(trace, capsys):
    def no_constants(name):
        raise ValueError(f"bare {name} in JSON output")

    for cap in ("3", "50%"):
        assert main(["eval", str(trace), "--prefetchers", "none,nextline", "--capacity", cap, "--json"]) == 0
        d = json.loads(capsys.readouterr().out, parse_constant=no_constants)
        none, oracle = d["results"][0], d["results"][-1]
        assert d["horizon"] == 10  # pagecast train's default, not a wider window
        assert none["accuracy"] is None  # no prefetches: no value, not NaN
        assert oracle["prefetcher"] == "oracle" and oracle["faults"] <= none["faults"]
        assert 0 < oracle["rank_event_coverage"] <= 1
