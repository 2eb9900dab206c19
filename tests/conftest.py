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
