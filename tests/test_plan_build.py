"""Plans with pack / per-fault files: packs the launcher runs itself (the pager's shim
preloaded), what it hands to the live machinery, the plan command's input errors, and
page-range merging."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pagecast.bench import sparse_weights as wl
from pagecast.cli import main as cli_main
from pagecast.pager.pack import build_pack
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, write_plan
from pagecast.plan.shared_pages import merge_ranges
from perf_support import needs_perf
from plan_support import pagecast_env
from uffd_support import needs_uffd


def test_merge_ranges_exact():
    assert merge_ranges(np.array([0, 1, 2, 5, 7, 8, 100])) == [(0, 3), (5, 1), (7, 2), (100, 1)]
    assert merge_ranges(np.array([], np.int64)) == []


# Shared pages and the choice between candidates on real recordings: tests/test_planner.py.


def test_plan_bad_inputs_one_line(tmp_path, capsys):
    bad = tmp_path / "x.parquet"
    bad.write_text("not parquet")
    assert cli_main(["plan", str(bad), "-o", str(tmp_path / "p.plan")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err
    assert not (tmp_path / "p.plan").exists()


# ---- hand-over to the live machinery ------------------------------------------------------


SMALL = ["--hot", "96", "--pool", "128", "--tail", "2", "--ctx", "8"]


def _packed(tmp_path: Path):
    """A weights file, the workload's argv on it, its bare run (cold), a pack of pages 1-1999
    and a plan naming that pack; the file left cold."""
    w = wl.ensure_weights(tmp_path / "w.bin", size_mib=32)
    argv = wl.WorkloadConfig(w, prompt=1, tokens=2, advice="random", extra=SMALL).argv()
    wl.drop_cache(w)
    bare = subprocess.run(argv, capture_output=True, text=True)
    pack = build_pack(w, np.arange(1, 2000), tmp_path / "w.pack")
    plan = tmp_path / "p.plan"
    write_plan(plan, PlanDoc([FilePlan(str(w), FileIdentity.of(w), "pack", arg=str(pack.path))]))
    wl.drop_cache(w)
    return w, argv, bare, pack, plan


@needs_uffd
def test_pack_in_a_plan_runs_through_the_pager(tmp_path):
    w, argv, bare, pack, plan = _packed(tmp_path)
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--json", "--", *argv],
                       env=pagecast_env(), capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["mode"] == "plan" and rep["exit_status"] == 0 and rep["files"][0]["status"] == "native"
    assert rep["live"]["regions"][0]["pack_installed"] > 0
    same = {k for k in ("rows", "checksum")}
    result = wl.parse_result(r.stderr)  # --json: the program's stdout goes to stderr
    assert {k: result[k] for k in same} == {k: wl.parse_result(bare.stdout)[k] for k in same}
    # a pack of another file in the plan: one warning naming the file, reported as not run
    other = tmp_path / "other.bin"
    other.write_bytes(bytes(8192))
    write_plan(plan, PlanDoc([FilePlan(str(w), FileIdentity.of(w), "pack", arg=str(pack.path)),
                              FilePlan(str(other), FileIdentity.of(other), "pack", arg=str(pack.path))]))  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--json", "--", *argv],
                       env=pagecast_env(), capture_output=True, text=True)  # fmt: skip
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and [f["status"] for f in rep["files"]] == ["native", "not-run"]
    assert [ln for ln in r.stderr.splitlines() if "warning" in ln] == [
        f"pagecast run: warning: {other}: pack {pack.path} is a pack of {w.resolve()}, not of this file; "
        "the file is read on demand"
    ]
    assert rep["live"]["regions"][0]["pack_installed"] > 0  # the good pack ran all the same
    # a pack gone since the plan was made: one warning, the program runs on demand, and the
    # launcher says so itself (no Python started to say it: `live` stays null)
    pack.path.unlink()
    write_plan(plan, PlanDoc([FilePlan(str(w), FileIdentity.of(w), "pack", arg=str(pack.path))]))
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--json", "--", *argv],
                       env=pagecast_env(), capture_output=True, text=True)  # fmt: skip
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and rep["files"][0]["status"] == "not-run" and rep["live"] is None
    assert [ln for ln in r.stderr.splitlines() if "warning" in ln] == [
        f"pagecast run: warning: {w}: pack {pack.path} not used (cannot open it: No such file or directory); "
        "the file is read on demand"
    ]
    result = wl.parse_result(r.stderr)
    assert {k: result[k] for k in same} == {k: wl.parse_result(bare.stdout)[k] for k in same}


@needs_uffd
def test_a_pack_runs_in_the_launcher_alone_without_python(tmp_path):
    # the launcher binary with no Python to hand over to: the pack still runs (before, it was
    # "unavailable"), and exactly the pack's pages come from it
    from pagecast.launch.binary import launcher_path

    w, argv, bare, _, plan = _packed(tmp_path)
    r = subprocess.run([launcher_path(), "--wait", str(plan), "--", *argv], capture_output=True, text=True,
                       env={k: v for k, v in pagecast_env().items() if not k.startswith("PAGECAST_PAGER")})  # fmt: skip
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    rep = json.loads(r.stdout)
    assert rep["files"][0]["status"] == "native" and "userfaultfd pager" in rep["files"][0]["detail"]
    (region,) = rep["live"]["regions"]
    assert region["path"] == str(w.resolve()) and region["pack_installed"] == region["pack_pages"] == 1999
    assert region["pack_state"] == 2 and region["errors"] == 0  # loaded whole, nothing refused
    same = ("rows", "checksum")
    assert [wl.parse_result(r.stderr)[k] for k in same] == [wl.parse_result(bare.stdout)[k] for k in same]
    # exec mode (no report): the program is the launcher's own process, its output untouched
    wl.drop_cache(w)
    plain = subprocess.run([launcher_path(), str(plan), "--", *argv], capture_output=True, text=True)
    assert plain.returncode == 0 and plain.stderr == ""
    assert [wl.parse_result(plain.stdout)[k] for k in same] == [wl.parse_result(bare.stdout)[k] for k in same]


@needs_perf
@pytest.mark.perf
def test_per_fault_in_a_plan_runs_the_live_loop(tmp_path, touchpages, datafile):
    plan = tmp_path / "p.plan"
    write_plan(plan, PlanDoc([FilePlan(str(datafile), FileIdentity.of(datafile), "per-fault", arg="nextline")]))
    cmd = [str(touchpages), str(datafile), "1,5,9", "--exit", "3"]
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--json", "--", *cmd],
                       env=pagecast_env(), capture_output=True, text=True)  # fmt: skip
    bare = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == bare.returncode == 3
    rep = json.loads(r.stdout)
    assert rep["exit_status"] == 3 and rep["files"][0]["status"] == "live" and rep["live"]["returncode"] == 3
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    plain = subprocess.run([sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--", *cmd],
                           env={**pagecast_env(), "TMPDIR": str(tmpdir)}, capture_output=True, text=True)  # fmt: skip
    assert (plain.returncode, plain.stdout) == (3, bare.stdout)
    assert not [p for p in tmpdir.iterdir() if p.name.startswith("pagecast-plan-status")]  # no report left behind
