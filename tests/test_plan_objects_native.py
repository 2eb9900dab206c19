"""Objects fetched whole on their first touch, inside the program (the advice shim).

A plan's ``per-fault`` entry ``objects:pages=N,align=A`` on a mapped file: the shim maps
the file with no access, and the first touch of each object asks for exactly that object
(the cold file's resident pages, by mincore, polled from before the run, are exactly the
touched objects). The program's output and exit status are the bare program's; a SIGSEGV elsewhere still kills
the program as it would bare. The cost model's ``predict_objects`` by hand.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cold_support import ResidencyWatch, cold_file_maker
from pagecast.plan.cost_model import DeviceCosts, predict_objects
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, write_plan
from pagecast.util.pagecache import drop_file, resident
from plan_support import pagecast_env

# Copies pages argv[2] (comma-separated) of argv[1] through Python's mmap (which the shim
# sees), prints a checksum and exits 5; with argv[3] "crash", then reads address 0.
READER = r"""
import ctypes, mmap, sys, zlib
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
data = b"".join(m[p * 4096:p * 4096 + 8] for p in map(int, sys.argv[2].split(",")))
print(zlib.crc32(data), flush=True)
if len(sys.argv) > 3:
    ctypes.string_at(0)
sys.exit(5)
"""


@pytest.fixture()
def cold_file(tmp_path: Path):
    with cold_file_maker(f"objects-{tmp_path.name}") as make:
        yield make


def _plan(tmp_path: Path, f: Path, spec: str) -> Path:
    plan = tmp_path / "objects.plan"
    write_plan(plan, PlanDoc([FilePlan(str(f), FileIdentity.of(f), "per-fault", arg=spec)]))
    return plan


def _run(cmd: list[str], plan: Path | None = None) -> subprocess.CompletedProcess:
    pre = [sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--"] if plan else []
    return subprocess.run([*pre, *cmd], env=pagecast_env(), capture_output=True, text=True)


def test_first_touch_of_an_object_fetches_exactly_the_object(cold_file, tmp_path):
    f = cold_file(2048)  # 8 MiB: objects of 64 pages at page 16 + k x 64, and pages 0-15 before them
    plan = _plan(tmp_path, f, "objects:pages=64,align=16")
    touched = "3,100,101,150,700,2047"  # objects: head 0-15; 80-143 (100, 101); 144-207; 656-719; 2000-2047
    cmd = [sys.executable, "-c", READER, str(f), touched]
    bare = _run(cmd)
    assert bare.returncode == 5
    f2 = cold_file(2048)
    f2.write_bytes(f.read_bytes())  # the same bytes, cold, for the planned run
    drop_file(f2)
    plan = _plan(tmp_path, f2, "objects:pages=64,align=16")
    want = np.zeros(2048, bool)
    for a, b in ((0, 16), (80, 144), (144, 208), (656, 720), (2000, 2048)):
        want[a:b] = True
    with ResidencyWatch(f2) as watch:
        r = _run([sys.executable, "-c", READER, str(f2), touched], plan)
        seen = watch.seen(f2, want, timeout_s=10.0)
    assert (r.returncode, r.stdout, r.stderr) == (5, bare.stdout, bare.stderr)
    assert np.nonzero(seen)[0].tolist() == np.nonzero(want)[0].tolist()
    assert resident(f2).sum() <= want.sum()


def test_a_segfault_elsewhere_still_kills_the_program(cold_file, tmp_path):
    f = cold_file(256)
    plan = _plan(tmp_path, f, "objects:pages=64")
    cmd = [sys.executable, "-c", READER, str(f), "1,70", "crash"]
    bare = _run(cmd)
    planned = _run(cmd, plan)
    assert bare.returncode == -11 and planned.returncode == -11 and planned.stdout == bare.stdout


def test_predict_objects_hand_computed():
    dev = DeviceCosts(seq_bytes_per_s=100e6, iops_by_depth=((1, 1000.0), (4, 4000.0)), source="test")
    # pages 3 (head 0-15: 16 pages), 100 and 101 (80-143), 2047 (2000-2047: 48 pages, cut at the end)
    p = predict_objects(dev, np.array([3, 100, 101, 2047]), 64, 16, 2048)
    assert (p.program_requests, p.program_pages) == (3, 16 + 64 + 48)
    assert p.seconds == pytest.approx(3 * (1e-3 + 5e-6) + 128 * 4096 / 100e6)
    assert predict_objects(dev, np.array([], np.int64), 64, 0, 100).seconds == 0.0
