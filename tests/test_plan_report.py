"""`pagecast run --plan --json` has one shape whatever the strategy (nothing, warm, pack,
native extent), and every plan entry that cannot act says so in one warning line naming
the file: a pack of an ELF file (warmed through the page cache instead, exact pages by
mincore), a changed file, a missing file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cold_support import ResidencyWatch
from pagecast.pager.pack import build_pack
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, write_plan
from pagecast.util.pagecache import drop_file, resident
from plan_support import pagecast_env
from uffd_support import needs_uffd

PAGE = 4096
TOP = {"mode", "plan", "plan_error", "returncode", "exit_status", "wall_s", "prefetch", "files", "live"}
FILE = {"path", "strategy", "advice", "advice_applied", "status", "pages_planned", "pages_issued", "bytes_issued",
        "detail", "feedback", "pages_used", "pages_outside"}  # fmt: skip


@pytest.fixture()
def disk(tmp_path: Path):
    base = (
        Path(__file__).resolve().parents[1] / "native" / "build" / "testdata" / f"report-{os.getpid()}-{tmp_path.name}"
    )
    base.mkdir(parents=True, exist_ok=True)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _data(base: Path, name: str, pages: int) -> Path:
    p = base / name
    p.write_bytes(np.random.default_rng(pages).integers(0, 256, pages * PAGE, dtype=np.uint8).tobytes())
    return p


def _run_json(plan: Path, cmd: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--json", "--", *cmd], env=pagecast_env(),
                       capture_output=True, text=True)  # fmt: skip
    return r, json.loads(r.stdout)


def _shape(rep: dict) -> None:
    assert set(rep) == TOP
    for f in rep["files"]:
        assert set(f) == FILE, f


def test_one_json_shape_for_nothing_warm_and_extent(tmp_path, disk):
    a, b, c = (_data(disk, n, 32) for n in ("a.bin", "b.bin", "c.bin"))
    for strategy, extra in (("nothing", {}), ("warm", {"ranges": [(0, 8)]}), ("per-fault", {"arg": "extent"})):
        plan = tmp_path / f"{strategy}.plan"
        write_plan(plan, PlanDoc([FilePlan(str(a), FileIdentity.of(a), strategy, **extra),
                                  FilePlan(str(b), FileIdentity.of(b), "nothing", advice="random"),
                                  FilePlan(str(c), FileIdentity.of(c), "warm", [(0, 2)])]))  # fmt: skip
        r, rep = _run_json(plan, ["sh", "-c", "sleep 0.3; echo hi; exit 2"])  # lives while 2 pages are warmed
        assert r.returncode == 2 and rep["exit_status"] == 2 and r.stderr == "hi\n", strategy
        _shape(rep)
        assert [f["status"] for f in rep["files"]] == [{"nothing": "nothing", "warm": "warmed", "per-fault": "native"}[strategy],
                                                       "nothing", "warmed"]  # fmt: skip


def test_pack_of_an_elf_file_is_warmed_instead_with_one_warning(tmp_path, disk):
    lib = disk / "libcopy.so"
    shutil.copyfile(os.path.realpath(shutil.which("true")), lib)  # an ELF file, as a shared library is
    pages = np.array([0, 1, 2, 5], np.int64)
    pack = build_pack(lib, pages, tmp_path / "lib.pack")
    plan = tmp_path / "p.plan"
    write_plan(plan, PlanDoc([FilePlan(str(lib), FileIdentity.of(lib), "pack", arg=str(pack.path))]))
    drop_file(lib)
    want = np.zeros(len(resident(lib)), bool)
    want[pages] = True
    with ResidencyWatch(lib) as watch:
        r, rep = _run_json(plan, ["sh", "-c", "echo ran"])
        seen = watch.seen(lib, want, timeout_s=10.0)  # WILLNEED is queued by the detached prefetcher
    _shape(rep)
    warnings = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert r.returncode == 0 and "ran" in r.stderr
    assert warnings == [f"pagecast run: warning: {lib}: a pack cannot act on an ELF file, which the dynamic loader maps; "
                        "its 4 pages are warmed through the page cache instead"]  # fmt: skip
    assert rep["files"][0]["status"] == "warmed"
    np.testing.assert_array_equal(seen, want)


@needs_uffd
def test_one_json_shape_for_a_pack_and_a_pack_never_mapped(tmp_path, disk):
    d = _data(disk, "d.bin", 64)
    pack = build_pack(d, np.arange(0, 16), tmp_path / "d.pack")
    plan = tmp_path / "p.plan"
    write_plan(plan, PlanDoc([FilePlan(str(d), FileIdentity.of(d), "pack", arg=str(pack.path))]))
    r, rep = _run_json(plan, ["sh", "-c", "echo never maps it"])
    _shape(rep)
    # the launcher ran the pack (the pager's shim in the program), which never mapped the file
    assert r.returncode == 0 and rep["files"][0]["status"] == "native" and rep["live"] == {"regions": []}
    warnings = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and str(d.resolve()) in warnings[0] and "never mapped the file" in warnings[0]


def test_changed_and_missing_files_one_warning_each_and_reported(tmp_path, disk):
    a, b = _data(disk, "a.bin", 8), _data(disk, "b.bin", 8)
    plan = tmp_path / "p.plan"
    write_plan(plan, PlanDoc([FilePlan(str(a), FileIdentity.of(a), "warm", [(0, 8)]),
                              FilePlan(str(b), FileIdentity.of(b), "stream")]))  # fmt: skip
    os.utime(a, ns=(5, 5))
    b.unlink()
    r, rep = _run_json(plan, ["true"])
    _shape(rep)
    lines = r.stderr.splitlines()
    assert r.returncode == 0 and len(lines) == 2
    assert str(a) in lines[0] and "changed since it was recorded" in lines[0] and "warm skipped" in lines[0]
    assert str(b) in lines[1] and "cannot open" in lines[1] and "stream not done" in lines[1]
    assert [f["status"] for f in rep["files"]] == ["stale", "missing"]
