"""A file the program reads as objects, under a memory limit: the memory planner learns the
objects' size from recordings made under the limit, and the live run reads each object whole
at its first touch instead of the kernel's read-around window around it (the advice shim)."""

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
from pagecast.errors import PagecastError
from pagecast.plan.memory_format import read_memory_plan
from pagecast.plan.memory_objects import object_layouts
from pagecast.util.device_model import read_ahead_kb_of
from pagecast.util.pagecache import make_cold

OBJECT_PAGES = 64  # 256 KiB objects
FILE_PAGES = 8192  # 32 MiB: 128 objects
LIMIT = "96M"

# touches every page of 12 objects chosen by the seed, in a random order: the whole object
# is used once touched (a mixture-of-experts layer reading its chosen experts)
READER = r"""
import mmap, sys, zlib
import numpy as np
path, seed = sys.argv[1], int(sys.argv[2])
with open(path, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
objects = np.random.default_rng(seed).choice(len(m) // (64 * 4096), 12, replace=False)
crc = 0
for o in objects.tolist():
    base = o * 64 * 4096
    crc = zlib.crc32(m[base : base + 64 * 4096], crc)
print(crc)
"""


def test_layouts_need_whole_objects_smaller_than_the_window():
    def uses(objs: list[int], size: int, fi: int = 0, run: int = 0):
        pages = np.concatenate([np.arange(o * size, (o + 1) * size) for o in objs])
        return np.full(len(pages), fi), pages, np.full(len(pages), run)

    runs = [uses([1, 5, 9, 12], 32, run=0), uses([2, 5, 20], 32, run=1)]
    files, pages, runs_of = (np.concatenate(x) for x in zip(*runs))
    assert object_layouts(files, pages, runs_of, 2, lambda fi: 8 << 20) == {0: (32, 0)}
    # objects as large as the window: reading them whole saves nothing
    assert object_layouts(files, pages, runs_of, 2, lambda fi: 32 * PAGE_SIZE) == {}
    # a sequential scan is one run a recording, not objects
    scan = np.arange(4096)
    assert object_layouts(np.zeros(8192, np.int64), np.r_[scan, scan], np.r_[[0] * 4096, [1] * 4096], 2, lambda fi: 8 << 20) == {}  # fmt: skip
    # objects of a few pages (a database's) are left to the kernel
    small = [uses(list(range(0, 200, 3)), 2, run=r) for r in (0, 1)]
    files, pages, runs_of = (np.concatenate(x) for x in zip(*small))
    assert object_layouts(files, pages, runs_of, 2, lambda fi: 8 << 20) == {}


def test_malformed_objects_is_one_line(tmp_path):
    good = tmp_path / "p.plan"
    doc = {"format": "pagecast-memory-plan", "version": 1, "limit_bytes": 1 << 26, "chunk_bytes": 1 << 20,
           "reserve_bytes": 0, "prefetch_chunks": 0, "backend": "kernel-advice",
           "files": [{"path": "/x", "identity": {"size": 1, "mtime_ns": 0, "ctime_ns": 0, "ino": 1, "dev": 1},
                      "keep": [], "stream": [], "objects": [0, 3]}]}  # fmt: skip
    good.write_text(json.dumps(doc))
    with pytest.raises(PagecastError, match="objects is not"):
        read_memory_plan(good)


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    require_memcg("memory cgroups and perf need root")
    out = tmp_path_factory.mktemp("memobjects")
    prog = out / "reader.py"
    prog.write_text(READER)
    with cold_file_maker("memobjects") as make:
        f = make(FILE_PAGES)
        traces = [t for t, _ in record_under_limit(out, f, [sys.executable, str(prog), str(f), "1"], LIMIT)]
        plan = out / "objects.plan"
        r = subprocess.run([sys.executable, "-m", "pagecast", "plan", "--memory", LIMIT, *map(str, traces),
                            "-o", str(plan)], capture_output=True, text=True, timeout=300)  # fmt: skip
        assert r.returncode == 0, r.stderr
        yield prog, f, plan, r.stdout + r.stderr


def test_the_planner_learns_the_objects(learned):
    _, f, plan, said = learned
    p = read_memory_plan(plan)
    by_path = {fp.path: fp.objects for fp in p.object_files()}
    if read_ahead_kb_of(os.stat(f).st_dev) * 1024 <= OBJECT_PAGES * PAGE_SIZE:
        assert str(f) not in by_path  # the kernel reads no more than an object around a miss
        return
    assert by_path[str(f)] == (OBJECT_PAGES, 0)
    assert p.backend == "kernel-advice"
    assert f"{f.name} read as objects of {OBJECT_PAGES * 4} KiB" in said


def _run(args: list[str], prog, f, seed: int) -> tuple[str, dict]:
    make_cold([f])
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--json", "--memory", LIMIT, *args, "--",
                        sys.executable, str(prog), str(f), str(seed)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stderr.strip().splitlines()[0], json.loads(r.stdout)


def test_objects_are_read_whole_and_nothing_around_them(learned):
    prog, f, plan, _ = learned
    window = read_ahead_kb_of(os.stat(f).st_dev) * 1024
    if window < 4 * OBJECT_PAGES * PAGE_SIZE:
        pytest.skip(f"the device reads {window >> 10} KiB around a miss: objects read whole save little there")
    direct = subprocess.run([sys.executable, str(prog), str(f), "7"], capture_output=True, text=True, timeout=60)
    kernel_out, kernel = _run([], prog, f, 7)
    planned_out, planned = _run(["--plan", str(plan)], prog, f, 7)  # a held-out seed: other objects
    assert kernel_out == planned_out == direct.stdout.strip()
    assert planned.get("controller") is None  # nothing kept or followed: no controller process
    want = 12 * OBJECT_PAGES * PAGE_SIZE
    # the kernel reads its window around each of the 12 first touches; the plan the 12 objects
    # (and whatever of the interpreter's own files was not cached)
    assert planned["memory"]["read_bytes"] < kernel["memory"]["read_bytes"] / 2
    assert planned["memory"]["read_bytes"] < want + (4 << 20)
