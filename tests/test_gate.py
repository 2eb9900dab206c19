"""The learned gate (sim/gate.py): it defers to the classic expert that is right, and uses
the model where the model is right.

Two kinds of stream, each with runs to fit the gate on and a run it never saw:
a sequential scan of a file (read-around names every next page; a model trained on
another pattern names nothing useful) and the interleaved irregular pattern of
``learn.synthetic`` (the model, trained for a few seconds, predicts it; read-around does
not). The gate's MLP is fitted on both kinds; its choices and the simulator's faults are
checked on the unseen runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from pagecast.learn.dataset import DatasetSpec, prepare, read_demand
from pagecast.learn.models import ModelConfig
from pagecast.learn.predict import predict_schedule
from pagecast.learn.synthetic import PatternSpec, write_pattern_trace
from pagecast.learn.train import TrainConfig, save_model, train_model
from pagecast.sim import SimConfig, simulate
from pagecast.sim import gate as G
from sim_helpers import scan_trace

CAP = 64  # pages of the simulated tier


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("gate")
    runs = {
        "pat_train": write_pattern_trace(d / "pt.parquet", 6000),
        "pat_fit": write_pattern_trace(d / "pf.parquet", 3000, PatternSpec(start_pages=[40, 10, 5, 30])),
        "pat_test": write_pattern_trace(d / "px.parquet", 3000, PatternSpec(start_pages=[7, 90, 20, 3])),
        "scan_fit": scan_trace(d / "sf.parquet", 2500),
        "scan_test": scan_trace(d / "sx.parquet", 3000, start=100),
    }
    spec = DatasetSpec()
    data = prepare([read_demand(runs["pat_train"])], spec, val_fraction=0.1)
    cfg = ModelConfig(kind="lstm", n_classes=len(data.vocab), n_slots=data.table.unknown, horizon=spec.horizon)
    res = train_model(data, cfg, TrainConfig(epochs=3, windows_per_epoch=512, patience=3, seed=0))
    model = save_model(d / "m.pt", res, data, spec, TrainConfig()) or d / "m.pt"

    def table(run):
        s = G.read_stream(run)
        p = G.expert_predictions(s, G.default_experts(None), predict_schedule(model, run, top_k=4))
        return s, p

    fit = [table(runs[k]) for k in ("pat_fit", "scan_fit")]
    gcfg = G.GateConfig(seed=0)
    gm = G.fit_gate([G.build_table(s, p, gcfg, G.label_horizon(CAP)) for s, p in fit], gcfg)
    return runs, model, gm, table


def _run(world, name):
    runs, model, gm, table = world
    s, p = table(runs[name])
    r = G.decide(gm, G.build_table(s, p, gm.config), p, s, 0.2)
    cfg = SimConfig(capacity=CAP)
    faults = {n: simulate(runs[name], cfg, n).faults for n in ("nextline", "stride", "markov")}
    faults["model"] = simulate(runs[name], cfg, predict_schedule(model, runs[name], top_k=4)).faults
    faults["none"] = simulate(runs[name], cfg, None).faults
    return r, simulate(runs[name], cfg, r.schedule).faults, faults, len(s.page)


def test_gate_defers_to_readaround_on_ascan_trace(world):
    r, gate, faults, n = _run(world, "scan_test")
    assert faults["model"] > faults["nextline"]  # the model is no help here
    read_around = r.choices["nextline"] + r.choices["nextline:window=5,before=0"]
    assert read_around >= 0.9 * n, r.choices
    assert r.choices[G.MODEL] <= 0.05 * n, r.choices
    assert gate <= faults["nextline"] * 1.05 + 1, (gate, faults)
    assert gate < faults["none"] / 2


def test_gate_uses_the_model_where_it_predicts(world):
    r, gate, faults, n = _run(world, "pat_test")
    best_classic = min(faults["nextline"], faults["stride"], faults["markov"])
    assert faults["model"] < best_classic  # the pattern is one the model learned
    assert r.choices[G.MODEL] >= 0.5 * n, r.choices
    assert gate < best_classic, (gate, faults)


def test_gate_file_round_trip(world, tmp_path):
    gm = world[2]
    gm.threshold["50%"] = 0.25
    gm.save(tmp_path / "g.pt")
    back = G.load_gate(tmp_path / "g.pt")
    assert back.experts == gm.experts and back.tau("50%") == 0.25
    runs, _, _, table = world
    s, p = table(runs["scan_test"])
    t = G.build_table(s, p, gm.config)
    assert np.allclose(back.scores(t), gm.scores(t))
    (tmp_path / "bad.pt").write_text("not a gate")
    with pytest.raises(Exception, match="not a gate file"):
        G.load_gate(tmp_path / "bad.pt")


def test_eval_reports_the_gates_choices(world, tmp_path, capsys):
    from pagecast.cli import main as cli_main

    runs, model, gm, _ = world
    gm.threshold["64"], gm.budget["64"] = 0.2, 1 / 16
    gm.save(tmp_path / "g.pt")
    code = cli_main(["eval", str(runs["pat_test"]), "--model", str(model), "--gate", str(tmp_path / "g.pt"),
                     "--capacity", "64", "--policy", "none,nextline"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("gate "))
    assert "model" in line and "nextline" in line and "none" in line
    assert f"gate:{tmp_path / 'g.pt'}" in out  # its row in the table
    assert cli_main(["eval", str(runs["pat_test"]), "--gate", str(tmp_path / "g.pt")]) == 2  # needs --model
