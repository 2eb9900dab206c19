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
