"""make_cold against reads still in flight: a page whose read is queued when DONTNEED runs
is locked, survives the drop and lands cached; make_cold must leave the file cold anyway."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from cold_support import cold_file_maker
from pagecast.util.pagecache import make_cold, resident


def _cold_drop():
    """benchmarks/cold_drop.py, whose ``queue_whole_file`` queues a stream as the launcher does."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cold_drop.py"
    spec = importlib.util.spec_from_file_location("cold_drop", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_make_cold_after_a_queued_whole_file_read_leaves_it_cold():
    with cold_file_maker("pagecache") as make:
        f = make(16384)  # 64 MiB: its reads are still arriving for tens of ms after being queued
        _cold_drop().queue_whole_file(f)
        make_cold([f])
        assert resident(f).sum() == 0


def test_make_cold_takes_one_path_alone_as_that_file():
    with cold_file_maker("pagecache") as make:
        f = make(256)
        for one in (str(f), Path(f)):
            with open(f, "rb") as fh:
                fh.read()
            assert resident(f).sum() > 0
            make_cold(one)
            assert resident(f).sum() == 0
