"""Shared by the planner and launcher tests: the touchpages workload, a 160-page data file on
the repository's disk (not tmpfs, so it can be made cold), and the environment that runs
this tree's pagecast."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from pagecast.bench.workloads import build_workload

SRC = str(Path(__file__).resolve().parents[1] / "src")


def pagecast_env(**extra: str) -> dict[str, str]:
    """This environment with this tree's ``src`` first on PYTHONPATH, without a preload or a
    feedback setting of the caller's that would change what the launched program sees."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("LD_PRELOAD", None)
    env.pop("PAGECAST_PLAN_FEEDBACK", None)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def touchpages() -> Path:
    return build_workload("touchpages")


@pytest.fixture()
def datafile(tmp_path: Path, request):
    base = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata"
    base.mkdir(parents=True, exist_ok=True)
    p = base / f"{request.module.__name__}-{os.getpid()}-{tmp_path.name}.bin"
    p.write_bytes(np.random.default_rng(5).integers(0, 256, 160 * 4096, dtype=np.uint8).tobytes())
    yield p
    p.unlink(missing_ok=True)
