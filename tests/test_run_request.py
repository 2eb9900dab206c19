"""`pagecast run` as one description (RunRequest) handed to one launcher, and its one report shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pagecast.cli import build_parser
from pagecast.cli.run import request_from_args
from pagecast.errors import PagecastError
from pagecast.launch.launcher import RunReport, backend_of, check, launch
from pagecast.launch.request import Backends, PredictionSource, RunRequest
from perf_support import needs_perf

SRC = Path(__file__).resolve().parents[1] / "src"
# every report printed by `pagecast run --json` has these keys, whatever the source and backend
REPORT_KEYS = {
    "mode",
    "command",
    "source",
    "returncode",
    "exit_status",
    "wall_s",
    "trace",
    "warnings",
    "live",
    "pager",
    "cuda",
}
# shared with the native launcher's report of `--plan` (docs/plan.md, "The launcher")
SHARED_WITH_PLAN = {"mode", "returncode", "exit_status", "wall_s", "live"}


def _req(*argv: str) -> RunRequest:
    return request_from_args(build_parser().parse_args(["run", *argv]))


def test_every_option_lands_in_the_request():
    r = _req(
        "--policy",
        "stride",
        "--pager",
        "w.bin:256M",
        "--pack",
        "a.pack",
        "--pack",
        "b.pack",
        "-o",
        "t.parquet",
        "--gap",
        "7",
        "--threads",
        "3",
        "--poll-ms",
        "9",
        "--nice",
        "0",
        "--no-anon",
        "--no-fast",
        "--no-throttle",
        "--json",
        "--",
        "prog",
        "x",
    )
    assert r.argv == ["prog", "x"]
    assert (r.source.kind, r.source.policy, r.source.throttle) == ("policy", "stride", False)
    assert r.backends == Backends(anon=False, pager=[("w.bin", 256 << 20)], packs=["a.pack", "b.pack"], fast=False)
    assert (r.tuning.gap, r.tuning.threads, r.tuning.poll_ms, r.tuning.nice) == (7, 3, 9, 0)
    assert r.output == Path("t.parquet") and r.json
    assert backend_of(r) == "pager"

    m = _req("--model", "m.pt", "--top-k", "4", "--", "p")
    assert (m.source.kind, m.source.model, m.source.top_k, backend_of(m)) == ("model", "m.pt", 4, "live")
    s = _req("--schedule", "s.parquet", "--lookahead", "256", "--", "p")
    assert (s.source.kind, s.source.schedule, s.source.lookahead) == ("schedule", "s.parquet", 256)
    p = _req("--plan", "x.plan", "--plan-status", "st.json", "--", "p")
    assert (p.source.kind, p.source.plan, p.plan_status, backend_of(p)) == ("plan", "x.plan", "st.json", "plan")
    c = _req("--cuda", "--out-dir", "cu", "--", "p")
    assert (c.source.kind, c.cuda_out_dir, backend_of(c)) == ("cuda", Path("cu"), "cuda")
    n = _req("--", "p")
    assert (n.source.kind, backend_of(n)) == ("none", "live")


@pytest.mark.parametrize(
    "req, message",
    [
        (RunRequest([]), "no command given"),
        (RunRequest(["p"], PredictionSource("plan", plan="x"), Backends(packs=["a"])), "--plan chooses"),
        (RunRequest(["p"], PredictionSource("plan", plan="x"), output=Path("t")), "--plan chooses"),
        (RunRequest(["p"], PredictionSource("model", model="m"), Backends(pager=[("f", 4096)])), "--policy only"),
        (RunRequest(["p"], PredictionSource("schedule", schedule="s"), Backends(packs=["a"])), "--policy only"),
        (RunRequest(["p"], PredictionSource("oracle")), "unknown prediction source"),
    ],
)
def test_inconsistent_requests_are_refused_before_anything_runs(req, message):
    with pytest.raises(PagecastError, match=message):
        check(req)


def _run_json(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-m", "pagecast", "run", "--json", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    return r, json.loads(r.stdout)


@needs_perf
def test_live_report_shape_and_exit_status(tmp_path):
    r, rep = _run_json(tmp_path, "--nice", "0", "--", "sh", "-c", "echo out-$((40+2)); exit 3")
    assert (
        r.returncode == 3 and "out-42" in r.stderr.splitlines() and "out-42" not in r.stdout
    )  # stdout: the report only
    assert set(rep) == REPORT_KEYS
    assert rep["mode"] == "live" and rep["source"] == {"kind": "none", "spec": None}
    assert rep["command"] == ["sh", "-c", "echo out-$((40+2)); exit 3"]
    assert rep["returncode"] == 3 and rep["exit_status"] == 3
    assert rep["live"]["returncode"] == 3 and rep["pager"] is None and rep["cuda"] is None


def test_pager_report_shape_and_signal_status(tmp_path):
    from pagecast.pager.runtime import probe

    try:
        probe()
    except (PagecastError, OSError) as e:
        pytest.skip(f"userfaultfd not usable: {e}")
    f = tmp_path / "f.bin"
    f.write_bytes(bytes(range(256)) * 64)  # 4 pages
    r, rep = _run_json(tmp_path, "--pager", f"{f}:16K", "--", "sh", "-c", f"cat {f} >/dev/null; kill -USR1 $$")
    assert set(rep) == REPORT_KEYS
    assert rep["mode"] == "pager" and rep["source"] == {"kind": "none", "spec": None}
    assert rep["returncode"] == -10 and rep["exit_status"] == r.returncode == 128 + 10
    assert rep["live"] is None and isinstance(rep["pager"]["regions"], list)


def test_plan_report_shares_the_top_level_keys(tmp_path):
    plan = tmp_path / "empty.plan"
    plan.write_text("not a plan\n")
    r, rep = _run_json(tmp_path, "--plan", str(plan), "--", "sh", "-c", "exit 4")
    assert r.returncode == 4
    assert SHARED_WITH_PLAN <= set(rep) and rep["mode"] == "plan" and rep["exit_status"] == 4


def test_launch_from_python_returns_the_report(tmp_path, capfd):
    """A Python caller builds the request itself; warnings reach the callback and the report."""
    from pagecast.pager.runtime import probe

    try:
        probe()
    except (PagecastError, OSError) as e:
        pytest.skip(f"userfaultfd not usable: {e}")
    f = tmp_path / "f.bin"
    f.write_bytes(b"\1" * 8192)
    seen: list[str] = []
    rep = launch(RunRequest(["sh", "-c", "exit 5"], backends=Backends(pager=[(str(f), 8192)])), warn=seen.append)
    assert isinstance(rep, RunReport) and rep.mode == "pager" and rep.exit_status == 5
    # the program never maps the paged file: one warning, in the callback and in the report
    assert rep.warnings == seen and len(seen) == 1 and f"{f}: was never mapped by the program" in seen[0]
