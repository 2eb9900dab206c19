"""Fixtures shared across the test modules."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from pagecast.bench.workloads import build_workload


@pytest.fixture(scope="module")
def touchpages() -> Path:
    """The touchpages workload, built once per module."""
    return build_workload("touchpages")


@pytest.fixture()
def datafile(tmp_path: Path, request):
    """A 160-page data file on the repository's disk (not tmpfs, so it can be made cold)."""
    base = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata"
    base.mkdir(parents=True, exist_ok=True)
    p = base / f"{request.module.__name__}-{os.getpid()}-{tmp_path.name}.bin"
    p.write_bytes(np.random.default_rng(5).integers(0, 256, 160 * 4096, dtype=np.uint8).tobytes())
    yield p
    p.unlink(missing_ok=True)


def require_memcg(why: str = "memory cgroups need root") -> None:
    """Skip the calling test (or fixture) where no memory cgroup can be made: not root, or no
    usable memory controller (the one line pagecast itself would print)."""
    from pagecast.errors import PagecastError
    from pagecast.util.memcg import find_hierarchy

    if os.geteuid() != 0:
        pytest.skip(why)
    try:
        find_hierarchy()
    except PagecastError as e:
        pytest.skip(str(e))


def record_under_limit(out: Path, cold: Path, argv: list[str], limit: str, runs: int = 2) -> list[tuple[Path, dict]]:
    """``runs`` recordings of ``argv`` by ``pagecast record --memory limit``, each from a cold
    ``cold``: (trace, its --json report) each. Skips where tracepoints cannot be had."""
    import json
    import subprocess
    import sys

    from pagecast.util.pagecache import make_cold

    out_list = []
    for i in range(runs):
        make_cold([cold])
        t = out / f"r{i}.parquet"
        r = subprocess.run([sys.executable, "-m", "pagecast", "record", "--json", "--memory", limit, "-o", str(t),
                            "--", *argv], capture_output=True, text=True, timeout=180)  # fmt: skip
        if r.returncode == 2 and "tracepoint" in r.stderr:
            pytest.skip(r.stderr.strip())
        assert r.returncode == 0, r.stderr
        out_list.append((t, json.loads(r.stdout)))
    return out_list
