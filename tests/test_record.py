"""Recording real programs: exact file pages of a cold mmap, cross-run identity, threads,
exit status, errors. The truth is the program's own access list and perf stat."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pagecast.bench.workloads import build_workload
from pagecast.cli import main as cli_main
from pagecast.collect.faultmon import FaultMonitor, read_all
from pagecast.trace import Kind, match_regions, open_trace
from pagecast.util.pagecache import drop_file
from perf_support import needs_perf

PAGES = [0, 2, 5, 6, 8, 13, 11]


pytestmark = [pytest.mark.perf, needs_perf]


@pytest.fixture(scope="module")
def touchpages() -> Path:
    return build_workload("touchpages")


@pytest.fixture()
def datafile(tmp_path: Path) -> Path:
    # tmp_path must be on a disk file system for major faults (not tmpfs)
    base = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata"
    base.mkdir(parents=True, exist_ok=True)
    p = base / f"pages-{os.getpid()}-{tmp_path.name}.bin"
    p.write_bytes(np.random.default_rng(1).integers(0, 256, 32 * 4096, dtype=np.uint8).tobytes())
    yield p
    p.unlink(missing_ok=True)


def _run(tp: Path, f: Path, extra: tuple | list = ()):
    drop_file(f)
    cmd = [str(tp), str(f), ",".join(map(str, PAGES)), *extra]
    return read_all(cmd, stdout=subprocess.DEVNULL)


def _file_region(mon: FaultMonitor, f: Path) -> int:
    ids = [r.id for r in mon.regions if r.kind == "file" and r.path == str(f)]
    assert len(ids) == 1
    return ids[0]


def test_cold_file_pages_exact_and_in_order(touchpages, datafile):
    b, mon = _run(touchpages, datafile)
    assert mon.returncode == 0 and mon.lost == 0
    rid = _file_region(mon, datafile)
    sel = b.region == rid
    assert b.kind[sel].tolist() == [Kind.FAULT_MAJOR] * len(PAGES)
    assert b.page[sel].tolist() == PAGES
    assert np.all(np.diff(b.t_ns) >= 0)


def test_major_faults_match_perf_stat(touchpages, datafile):
    if shutil.which("perf") is None:
        pytest.skip("perf tool not installed")
    drop_file(datafile)
    cmd = [str(touchpages), str(datafile), ",".join(map(str, PAGES))]
    p = subprocess.run(["perf", "stat", "-x,", "-e", "major-faults", *cmd], capture_output=True, text=True)
    ref = int(p.stderr.strip().splitlines()[-1].split(",")[0])
    b, _ = _run(touchpages, datafile)
    assert int(np.count_nonzero(b.kind == Kind.FAULT_MAJOR)) == ref


def test_two_runs_same_region_relative_pages(touchpages, datafile):
    b1, m1 = _run(touchpages, datafile, ["--anon", "12"])
    b2, m2 = _run(touchpages, datafile, ["--anon", "12"])
    r1, r2 = _file_region(m1, datafile), _file_region(m2, datafile)
    assert b1.page[b1.region == r1].tolist() == b2.page[b2.region == r2].tolist() == PAGES
    mapping = match_regions(m1.regions, m2.regions)
    assert mapping[r1] == r2
    anon1 = [r.id for r in m1.regions if r.kind == "anon" and r.length == 12 * 4096]
    anon2 = [r.id for r in m2.regions if r.kind == "anon" and r.length == 12 * 4096]
    assert len(anon1) == len(anon2) == 1 and mapping[anon1[0]] == anon2[0]
    assert sorted(b1.page[b1.region == anon1[0]].tolist()) == list(range(12))
    assert sorted(b2.page[b2.region == anon2[0]].tolist()) == list(range(12))
    if Path("/proc/sys/kernel/randomize_va_space").read_text().strip() != "0":
        assert m1.regions[r1].base != m2.regions[r2].base  # the addresses did differ


def test_threads_recorded(touchpages, datafile):
    b, mon = _run(touchpages, datafile, ["--anon", "3", "--thread", "9"])
    thread_regions = [r.id for r in mon.regions if r.kind == "anon" and r.length == 9 * 4096]
    assert len(thread_regions) == 1
    sel = b.region == thread_regions[0]
    assert sorted(b.page[sel].tolist()) == list(range(9))
    tids = set(b.tid[sel].tolist())
    assert len(tids) == 1 and tids != {mon.pid}
    assert mon.pid in set(b.tid.tolist())


def test_record_cli_writes_trace_and_passes_exit_status(touchpages, datafile, tmp_path, capsys):
    out = tmp_path / "t.parquet"
    drop_file(datafile)
    rc = cli_main(["record", "--json", "-o", str(out), "--", str(touchpages), str(datafile), "0,2,5", "--exit", "7"])
    assert rc == 7
    t = open_trace(out)
    assert t.source == "perf" and t.meta["exit_status"] == 7
    cols = t.read()
    fr = [r.id for r in t.regions if r.path == str(datafile)][0]
    assert cols["page"][(cols["region"] == fr) & (cols["kind"] == Kind.FAULT_MAJOR)].tolist() == [0, 2, 5]
    assert not Path(str(out) + ".partial").exists()


def test_missing_command_one_line_error(tmp_path, capsys):
    rc = cli_main(["record", "-o", str(tmp_path / "x.parquet"), "--", "no-such-command-pagecast"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "command not found: no-such-command-pagecast" in err[0]
    assert not (tmp_path / "x.parquet").exists()


def test_killed_program_status(tmp_path):
    _, mon = read_all(["sh", "-c", "kill -9 $$"])
    assert mon.returncode == -9


@pytest.mark.slow
def test_record_lackey_full_access_trace(touchpages, datafile, tmp_path, capsys):
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind not installed")
    out = tmp_path / "l.parquet"
    rc = cli_main(
        [
            "record",
            "--lackey",
            "--json",
            "-o",
            str(out),
            "--",
            str(touchpages),
            str(datafile),
            ",".join(map(str, PAGES)),
            "--anon",
            "6",
            "--exit",
            "4",
        ]
    )
    assert rc == 4
    t = open_trace(out)
    assert t.source == "lackey" and t.meta["time_unit"] == "instructions"
    c = t.read()
    assert (c["kind"] == Kind.ACCESS).all() and np.all(np.diff(c["t_ns"]) >= 0)
    # the program's one-byte loads from the mapped file: within one region, PAGES in this
    # order relative to the first (the region starts at a 2 MiB granule, not at the
    # mapping; libc's own byte loads may share the region and interleave)
    one = (c["bytes"] == 1) & (c["flags"] == 0)
    want = [p - PAGES[0] for p in PAGES]
    assert any(
        _has_subsequence(c["page"][one & (c["region"] == rid)].tolist(), want) for rid in np.unique(c["region"][one])
    )


def _has_subsequence(pages: list[int], rel: list[int]) -> bool:
    for i, b in enumerate(pages):
        k = 0
        for p in pages[i:]:
            if p - b == rel[k]:
                k += 1
                if k == len(rel):
                    return True
    return False


def test_child_processes_followed(touchpages, datafile):
    drop_file(datafile)
    script = f"true; {touchpages} {datafile} {','.join(map(str, PAGES))} >/dev/null; exit 5"
    b, mon = read_all(["sh", "-c", script])
    assert mon.returncode == 5
    rid = _file_region(mon, datafile)
    sel = b.region == rid
    assert b.page[sel].tolist() == PAGES and (b.kind[sel] == Kind.FAULT_MAJOR).all()
    assert set(b.pid[sel].tolist()) != {mon.pid}  # faulted in the forked child, not in sh
