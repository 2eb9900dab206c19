"""The shared --policy option: new spellings, lists, deprecated aliases, errors, help."""

from __future__ import annotations

import json

import pytest

from pagecast.cli import build_parser, main
from pagecast.cli._options import policy_texts
from sim_helpers import mixed_pages, write_trace


@pytest.fixture()
def trace(tmp_path):
    return write_trace(tmp_path / "t.parquet", mixed_pages(2000))


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_policy_and_its_old_spelling_agree(trace, capsys):
    new = _json(
        capsys, ["simulate", str(trace), "--capacity", "100", "--policy", "stride:degree=8,min_conf=2", "--json"]
    )
    old = _json(
        capsys, ["simulate", str(trace), "--capacity", "100", "--prefetcher", "stride:degree=8,min_conf=2", "--json"]
    )
    default = _json(capsys, ["simulate", str(trace), "--capacity", "100", "--policy", "stride", "--json"])
    for d in (new, old):
        d.pop("wall_s"), d.pop("extra")  # timings
    assert new == old
    # the options reach the prefetcher: degree 8 issues more pages than the default 4
    assert new["prefetches"] > default["prefetches"] > 0


def test_simulate_policy_excludes_schedule(trace, tmp_path):
    with pytest.raises(SystemExit):
        build_parser("simulate").parse_args(["simulate", str(trace), "--policy", "none", "--schedule", "s.parquet"])


def test_eval_repeated_policy_equals_comma_list(trace, capsys):
    rep = _json(
        capsys,
        [
            "eval",
            str(trace),
            "--capacity",
            "100",
            "--policy",
            "none",
            "--policy",
            "stride:degree=8,min_conf=2",
            "--policy",
            "nextline",
            "--json",
        ],
    )
    csv = _json(
        capsys,
        ["eval", str(trace), "--capacity", "100", "--policy", "none,stride:degree=8,min_conf=2,nextline", "--json"],
    )
    old = _json(
        capsys,
        [
            "eval",
            str(trace),
            "--capacity",
            "100",
            "--prefetchers",
            "none,stride:degree=8,min_conf=2,nextline",
            "--json",
        ],
    )
    names = [r["prefetcher"] for r in rep["results"]]
    # the floor (MIN + oracle) comes last
    assert names == ["none", "stride:degree=8,min_conf=2", "nextline", "oracle", "oracle"]
    for other in (csv, old):
        assert [(r["prefetcher"], r["faults"]) for r in other["results"]] == [
            (r["prefetcher"], r["faults"]) for r in rep["results"]
        ]


def test_sweep_policies(trace, capsys):
    rows = _json(
        capsys,
        [
            "sweep",
            str(trace),
            "--capacities",
            "100",
            "--policy",
            "none",
            "--policy",
            "stride:degree=2",
            "-j",
            "1",
            "--json",
        ],
    )
    assert sorted(r["prefetcher"] for r in rows if r["eviction"] == "lru") == ["none", "stride:degree=2"]
    assert [(r["eviction"], r["prefetcher"]) for r in rows if r["eviction"] != "lru"] == [("min", "oracle")]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["simulate", "{t}", "--policy", "nosuch"], ["unknown prefetcher 'nosuch'", "stride"]),
        (
            ["simulate", "{t}", "--policy", "stride:degre=8"],
            ["stride has no option 'degre'", "valid: degree, min_conf"],
        ),
        (["eval", "{t}", "--policy", "none", "--policy", "stride:degree=x"], ["degree='x' is not an integer"]),
        (["sweep", "{t}", "--policy", "none,nosuch"], ["unknown prefetcher 'nosuch'"]),
    ],
)
def test_bad_specs_are_one_line_errors(trace, capsys, argv, words):
    assert main([a.replace("{t}", str(trace)) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    for w in words:
        assert w in err[0]


def test_help_lists_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--policy NAME[:k=v,...]" in out and "stride: degree=4, min_conf=1" in out and "--prefetcher " not in out


def test_bench_policy_lists():
    p = build_parser("bench")
    assert policy_texts(p.parse_args(["bench"]), "nextline,markov") == ["nextline", "markov"]
    a = p.parse_args(["bench", "--policy", "stride:degree=8,min_conf=2", "--policy", "leap"])
    assert policy_texts(a, "nextline,markov") == ["stride:degree=8,min_conf=2", "leap"]
    assert policy_texts(p.parse_args(["bench", "--policies", "nextline,stride"]), "x") == ["nextline", "stride"]
    assert policy_texts(p.parse_args(["bench", "--policy", ""]), "nextline,markov") == []


def test_other_meanings_have_their_own_names():
    p = build_parser("gym")
    assert p.parse_args(["gym", "train", "x", "-o", "y", "--arch", "mlp"]).arch == "mlp"
    assert p.parse_args(["gym", "train", "x", "-o", "y", "--policy", "mlp"]).arch == "mlp"  # deprecated spelling
    assert p.parse_args(["gym", "train", "x", "-o", "y"]).arch == "chunkwise"
    assert p.parse_args(["gym", "play", "x", "--baseline", "random"]).baseline == "random"
    assert p.parse_args(["gym", "play", "x", "--policy", "random"]).baseline == "random"
    assert p.parse_args(["gym", "eval", "x", "--baselines", "all-slow"]).baselines == "all-slow"
    assert p.parse_args(["gym", "eval", "x", "--policies", "all-slow"]).baselines == "all-slow"
    with pytest.raises(SystemExit):
        p.parse_args(["gym", "play", "x", "--policy", "stride"])


def test_run_policy_is_checked_before_the_program_starts(tmp_path, capsys):
    marker = tmp_path / "ran"
    assert main(["run", "--policy", "stride:degre=8", "--", "touch", str(marker)]) == 2
    assert "stride has no option 'degre'" in capsys.readouterr().err
    assert not marker.exists()


def test_pager_table_policy(tmp_path, capsys):
    data = tmp_path / "d.bin"
    data.write_bytes(b"\0" * (64 * 4096))
    import numpy as np

    from pagecast.trace.regions import Region
    from pagecast.trace.writer import TraceWriter

    t = tmp_path / "p.parquet"
    pages = np.arange(0, 60, 3)
    with TraceWriter(t, regions=[Region(0, str(data), kind="file", path=str(data), length=64 * 4096)]) as w:
        w.write(
            t_ns=np.arange(len(pages)),
            region=np.zeros(len(pages), np.int32),
            page=pages,
            kind=np.full(len(pages), 2, np.uint8),
        )
    outs = []
    for flag in ("--policy", "--prefetcher"):
        out = tmp_path / f"t{flag}.table"
        outs.append(
            _json(capsys, ["pager", "table", "--trace", str(t), flag, "stride:degree=2", "-o", str(out), "--json"])
        )
        assert out.exists()
    assert outs[0]["entries"] == outs[1]["entries"] > 0
