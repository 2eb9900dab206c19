"""A program reading a file with ``read()`` pass after pass under a memory limit: the
recording shows its re-reads (``FILE_REREAD``), the plan keeps part of the file, and the run
under the plan reads less again than the kernel alone, with the same output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cold_support import cold_file_maker
from conftest import record_under_limit, require_memcg
from pagecast.constants import PAGE_SIZE
from pagecast.plan.memory_format import read_memory_plan
from pagecast.trace.reader import open_trace
from pagecast.trace.schema import Kind
from pagecast.util.pagecache import make_cold

FILE_PAGES = 96 * 256  # 96 MiB
LIMIT = "80M"
PASSES = 4
# every pass reads the whole file with read() and prints a checksum of it
PROGRAM = """
import hashlib, sys
for _ in range(int(sys.argv[2])):
    h = hashlib.sha1()
    with open(sys.argv[1], "rb", buffering=0) as f:
        while b := f.read(1 << 17):
            h.update(b)
    print(h.hexdigest())
"""


def _run(args: list[str], f) -> tuple[subprocess.CompletedProcess, dict]:
    make_cold([f])
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--json", *args, "--", sys.executable, "-c", PROGRAM,
                        str(f), str(PASSES)], capture_output=True, text=True, timeout=180)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r, json.loads(r.stdout[r.stdout.index("{") :])


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    require_memcg("memory cgroups and tracepoints need root")
    out = tmp_path_factory.mktemp("memread")
    with cold_file_maker("memread") as make:
        f = make(FILE_PAGES)
        traces = [t for t, _ in record_under_limit(out, f, [sys.executable, "-c", PROGRAM, str(f), str(PASSES)], LIMIT)]
        plan = out / "p.plan"
        r = subprocess.run([sys.executable, "-m", "pagecast", "plan", "--memory", LIMIT, *map(str, traces), "-o",
                            str(plan)], capture_output=True, text=True, timeout=180)  # fmt: skip
        assert r.returncode == 0, r.stderr
        yield f, traces, plan


def test_the_recording_shows_every_pass_of_reads(planned):
    f, traces, _ = planned
    t = open_trace(traces[0])
    region = [r.id for r in t.regions if r.path == str(f)]
    kinds = []
    for b in t.iter_batches(["region", "kind"], 1 << 20):
        kinds.append(b["kind"][np.isin(b["region"], region)])
    k = np.concatenate(kinds)
    assert np.count_nonzero(k == Kind.FILE_READ) == FILE_PAGES  # each page once, at its first read
    # and every later read (a call that waited for its pages under read asks again: a few twice)
    rereads = np.count_nonzero(k == Kind.FILE_REREAD)
    assert (PASSES - 1) * FILE_PAGES <= rereads <= (PASSES - 1) * FILE_PAGES * 1.05


def test_the_plan_keeps_part_of_the_file_and_the_run_reads_less(planned):
    f, _, plan_path = planned
    plan = read_memory_plan(plan_path)
    row = next(p for p in plan.files if p.path == str(f))
    assert plan.backend != "kernel" and row.keep_chunks() > 0
    assert row.predicted["plan"] < row.predicted["lru"]
    alone, rep_alone = _run(["--memory", LIMIT], f)
    with_plan, rep = _run(["--memory", LIMIT, "--plan", str(plan_path)], f)
    assert with_plan.stdout.split("{")[0] == alone.stdout.split("{")[0]  # the checksums, every pass
    assert rep["controller"]["pinned_bytes"] > 0 and rep["memory"]["oom_kills"] == 0
    # the kernel alone reads the whole file again every pass; the kept part is read once
    assert rep_alone["memory"]["refaults"] >= (PASSES - 1) * FILE_PAGES * 0.9
    # the controller locks the keep set in pieces while the program runs: on a quiet machine
    # within the first pass (every later pass saves it), on a loaded one by the end of the
    # second; from then on no pass reads it again
    kept = row.keep_chunks() * plan.chunk_bytes // PAGE_SIZE
    assert rep["memory"]["refaults"] <= rep_alone["memory"]["refaults"] - (PASSES - 2) * kept * 0.95


def _run_env(args: list[str], argv_file, data, warm: list) -> tuple[subprocess.CompletedProcess, dict]:
    """The program hashing ``data``, named on its command line as ``argv_file`` (``-``: not
    named there, given through the environment)."""
    make_cold(warm)
    prog = PROGRAM.replace("sys.argv[1]", "os.environ['DATA']").replace("import hashlib", "import hashlib, os")
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--json", *args, "--", sys.executable, "-c", prog,
                        str(argv_file), str(PASSES)], capture_output=True, text=True, timeout=180,
                       env={**os.environ, "DATA": str(data)})  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r, json.loads(r.stdout[r.stdout.index("{") :])


def test_a_plan_for_another_file_locks_nothing_of_it_and_says_so(planned):
    # the same program on another input: the plan's file is never opened, and locking its
    # keep set would take the limit's memory from the file the program does read
    f, _, plan_path = planned
    with cold_file_maker("memread-other") as make:
        other = make(FILE_PAGES)
        r, rep = _run_env(["--memory", LIMIT, "--plan", str(plan_path)], other, other, [f, other])
    assert rep["controller"]["pinned_bytes"] == 0
    assert rep["controller"]["files_unused"] == [str(f)]
    assert [w for w in rep["warnings"] if str(f) in w and "never opened" in w]
    assert "never opened" in r.stderr


def test_a_plan_file_opened_without_being_named_is_locked_once_open(planned):
    # not on the command line (an environment variable names it): locked once the program
    # has it open, and not reported
    f, _, plan_path = planned
    r, rep = _run_env(["--memory", LIMIT, "--plan", str(plan_path)], "-", f, [f])
    assert rep["controller"]["pinned_bytes"] > 0 and rep["controller"]["files_unused"] == []
    assert "never opened" not in r.stderr


def test_recordings_without_a_limit_that_show_no_reread_are_said_so(planned, tmp_path):
    # without a limit the passes after the first read pages still in memory: the recording has
    # each page once, and the plan has nothing to keep; the planner says why and what to do
    f, traces, _ = planned
    make_cold([f])
    t = tmp_path / "nolimit.parquet"
    r = subprocess.run([sys.executable, "-m", "pagecast", "record", "-o", str(t), "--", sys.executable, "-c", PROGRAM,
                        str(f), str(PASSES)], capture_output=True, text=True, timeout=180)  # fmt: skip
    assert r.returncode == 0, r.stderr
    plan = tmp_path / "p.plan"
    r = subprocess.run([sys.executable, "-m", "pagecast", "plan", "--memory", LIMIT, str(t), "-o", str(plan), "--json"],
                       capture_output=True, text=True, timeout=180)  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [p["keep"] for p in out["files"] if p["path"] == str(f)] == [[]]
    assert len(out["warnings"]) == 1 and "--memory" in out["warnings"][0]
    assert r.stderr.count("pagecast plan: warning:") == 1
    # recordings made under the limit show the passes: no such line
    r = subprocess.run([sys.executable, "-m", "pagecast", "plan", "--memory", LIMIT, *map(str, traces), "-o", str(plan),
                        "--json"], capture_output=True, text=True, timeout=180)  # fmt: skip
    assert r.returncode == 0 and json.loads(r.stdout)["warnings"] == [] and "warning" not in r.stderr


def test_no_sequential_variant_for_a_file_read_with_read(planned, tmp_path):
    # the advice is for mappings: a keep set rebuilt for it would take the room the read()
    # reader's own read-ahead needs
    _, traces, _ = planned
    plan = tmp_path / "seq.plan"
    r = subprocess.run([sys.executable, "-m", "pagecast", "plan", "--memory", LIMIT, *map(str, traces), "-o", str(plan),
                        "--sequential"], capture_output=True, text=True, timeout=180)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "--sequential: nothing to advise" in r.stderr
    assert not any(f.advice for f in read_memory_plan(plan).files)


def test_the_pager_s_share_of_a_file_read_with_read_is_none(planned):
    # the pager serves mappings only: plan --measure leaves its variants out here
    from pagecast.plan.memory import mapped_share

    _, traces, plan = planned
    assert mapped_share(traces, read_memory_plan(plan)) < 0.05


def test_the_text_report_says_what_the_plan_did(planned):
    f, _, plan_path = planned
    make_cold([f])
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--memory", LIMIT, "--plan", str(plan_path), "--",
                        sys.executable, "-c", PROGRAM, str(f), str(PASSES)], capture_output=True, text=True,
                       timeout=180)  # fmt: skip
    assert r.returncode == 0, r.stderr
    line = [x for x in r.stderr.splitlines() if x.startswith("pagecast run: plan: locked ")]
    assert len(line) == 1 and int(line[0].split("locked ")[1].split()[0]) > 0, r.stderr
