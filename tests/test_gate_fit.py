"""`pagecast train --target gate` (sim/gate_fit.py): a gate fitted from pairs of runs of two
kinds of program, loaded back and run by `pagecast eval --gate` on a run of each kind it
never saw.

The kinds are those of tests/test_gate.py: a sequential file scan (read-around is right,
a model of another pattern is not) and the interleaved irregular pattern of
``learn.synthetic`` (the model is right, read-around is not). Two pairs, one per kind, so
the cross-fitting has a fold of each.
"""

from __future__ import annotations

import json

import pytest

from pagecast.cli import main as cli_main
from pagecast.learn.synthetic import PatternSpec, write_pattern_trace
from pagecast.sim import gate as G
from pagecast.sim import gate_fit as GF
from sim_helpers import scan_trace

CAP = "64"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    d = tmp_path_factory.mktemp("gatefit")
    runs = {
        "pat_train": write_pattern_trace(d / "pt.parquet", 4000),
        "pat_fit": write_pattern_trace(d / "pf.parquet", 2000, PatternSpec(start_pages=[40, 10, 5, 30])),
        "pat_test": write_pattern_trace(d / "px.parquet", 2000, PatternSpec(start_pages=[7, 90, 20, 3])),
        "scan_train": scan_trace(d / "st.parquet", 1500),
        "scan_fit": scan_trace(d / "sf.parquet", 1500, start=50),
        "scan_test": scan_trace(d / "sx.parquet", 2000, start=100),
    }
    gate = d / "gate.pt"
    args = ["train", "--target", "gate", str(runs["pat_train"]), str(runs["pat_fit"]), str(runs["scan_train"]),
            str(runs["scan_fit"]), "-o", str(gate), "--capacity", CAP, "--epochs", "2"]  # fmt: skip
    assert cli_main(args) == 0
    model = d / "m.pt"
    assert cli_main(["train", str(runs["pat_train"]), "-o", str(model), "--epochs", "2",
                     "--windows-per-epoch", "512"]) == 0  # fmt: skip
    return runs, gate, model


def test_the_gate_file_loads_with_what_was_chosen(fitted):
    _, gate, _ = fitted
    gm = G.load_gate(gate)
    assert G.MODEL in gm.experts and "nextline" in gm.experts and "pagesucc(train)" in gm.experts
    one = gm.for_capacity(CAP)
    assert one.tau(CAP) in GF.GateFitConfig().taus
    assert one.budget[CAP] in GF.GateFitConfig().budgets
    assert one.alpha(CAP) in GF.GateFitConfig().alphas
    assert set(gm.states) == {CAP} and one.state["0.weight"].shape[0] == gm.config.hidden


@pytest.mark.parametrize("run", ["scan_test", "pat_test"])
def test_eval_runs_the_fitted_gate_and_reports_its_choices(fitted, run, capsys):
    runs, gate, model = fitted
    args = ["eval", str(runs[run]), "--model", str(model), "--gate", str(gate), "--capacity", CAP,
            "--policy", "none,nextline,stride"]  # fmt: skip
    assert cli_main(args + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    choices = d["gate_choices"]
    faults = {r["prefetcher"]: r["faults"] for r in d["results"]}
    n = sum(choices.values())
    assert n == 2000, choices  # every event of the run, given to one expert or none
    if run == "scan_test":  # read-around is right on a scan: the gate defers to it
        assert choices["nextline"] + choices["nextline:window=5,before=0"] >= 0.9 * n, choices
        assert faults[f"gate:{gate}"] <= faults["nextline"] * 1.05 + 1, faults
    else:  # the pattern the model learned: the gate uses it, and faults less than read-around
        assert choices[G.MODEL] >= 0.5 * n, choices
        assert faults[f"gate:{gate}"] < faults["nextline"], faults
    assert cli_main(args) == 0  # the table's report names each expert with its events
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("gate "))
    for name, v in choices.items():
        assert f"{name} {v:,} (" in line


def test_gate_target_needs_pairs(fitted, tmp_path, capsys):
    runs, _, _ = fitted
    code = cli_main(["train", "--target", "gate", str(runs["pat_fit"]), "-o", str(tmp_path / "g.pt")])
    assert code == 2
    assert "pairs of runs" in capsys.readouterr().err
    assert not (tmp_path / "g.pt").exists()
