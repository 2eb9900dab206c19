"""Page sets of real programs: every file page a run uses, by mapping and by read-family
calls, whatever read-ahead, fault-around and folio size do. The truth is the program's
own argument list (workloads/pageset_touch.c), a run under MADV_RANDOM, the files
Python opened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pagecast.cli import main as cli_main
from pagecast.collect.record import record_faults
from pagecast.trace import Kind, open_trace
from pagecast.trace.pageset import file_page_sets
from pagecast.util.pagecache import drop_file
from pagecast.util.workloads import build_workload
from perf_support import needs_perf

pytestmark = [pytest.mark.perf, needs_perf]

PAGE = 4096


@pytest.fixture(scope="module")
def touch() -> Path:
    return build_workload("pageset_touch")


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    # on a disk file system (read-ahead, folios), not tmpfs
    base = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata" / f"ps-{os.getpid()}-{tmp_path.name}"
    base.mkdir(parents=True, exist_ok=True)
    yield base
    for p in base.iterdir():
        p.unlink()
    base.rmdir()


def _write(path: Path, pages: int, seed: int) -> Path:
    path.write_bytes(np.random.default_rng(seed).integers(0, 256, pages * PAGE, dtype=np.uint8).tobytes())
    return path


def _first_order(pages: list[int]) -> list[int]:
    seen: set[int] = set()
    return [p for p in pages if not (p in seen or seen.add(p))]


def test_exact_page_sets_mmap_pread_read_fresh(touch, data_dir, tmp_path):
    cold_map = _write(data_dir / "cold_map.bin", 512, 1)
    warm_map = _write(data_dir / "warm_map.bin", 256, 2)
    cold_pread = _write(data_dir / "cold_pread.bin", 300, 3)
    cold_read = _write(data_dir / "cold_read.bin", 200, 4)
    mixed = _write(data_dir / "mixed.bin", 128, 5)
    for f in (cold_map, cold_pread, cold_read, mixed):
        drop_file(f)
    fresh = _write(data_dir / "fresh.bin", 16384, 6)  # 64 MiB just written: large folios in the cache
    warm_map.read_bytes()  # all cached: fault-around maps neighbours without faults
    want = {
        cold_map: [7, 3, 100, 101, 102, 200, 3, 511, 0, 64],
        warm_map: [5, 6, 9, 1, 255, 128, 6],
        fresh: [0, 1, 2, 3, 1000, 5000, 5001, 16383, 777],
        cold_pread: [10, 11, 12, 50, 40, 299, 10],
        cold_read: [0, 1, 2, 3, 150, 199, 2],
        mixed: [3, 4, 60, 5, 90],
    }
    specs = [
        f"mmap:{cold_map}:{','.join(map(str, want[cold_map]))}",
        f"mmap:{warm_map}:{','.join(map(str, want[warm_map]))}",
        f"mmapw:{fresh}:{','.join(map(str, want[fresh]))}",
        f"pread:{cold_pread}:{','.join(map(str, want[cold_pread]))}",
        f"read:{cold_read}:{','.join(map(str, want[cold_read]))}",
        f"read1:{mixed}:3,4,60",
        f"mmap:{mixed}:5,90,3",
    ]
    out = tmp_path / "t.parquet"
    res = record_faults([str(touch), *specs], out)
    assert res.exit_status == 0 and res.lost == 0 and res.warnings == []
    sets = file_page_sets(out)
    for f, pages in want.items():
        assert sets[str(f)].tolist() == _first_order(pages), f.name
    # the row kinds say how each page was first used
    t = open_trace(out)
    cols = t.read(["region", "page", "kind"])
    rid = {r.path: r.id for r in t.regions if r.kind == "file"}
    def rows(f, kind):
        sel = (cols["region"] == rid[str(f)]) & (cols["kind"] == kind)
        return cols["page"][sel].tolist()
    assert rows(cold_pread, Kind.FILE_READ) == _first_order(want[cold_pread])
    assert rows(cold_pread, Kind.FILE_MAPPED) == []
    assert rows(fresh, Kind.FILE_MAPPED) == _first_order(want[fresh])
    assert rows(mixed, Kind.FILE_READ) == [3, 4, 60]
    assert rows(mixed, Kind.FILE_MAPPED) == [5, 90, 3]
    # the fault stream is still there: every first touch of a mapped page is one fault
    f_sel = (cols["region"] == rid[str(cold_map)]) & np.isin(cols["kind"], [Kind.FAULT_MINOR, Kind.FAULT_MAJOR])
    assert cols["page"][f_sel].tolist() == _first_order(want[cold_map])
