"""Shared by the planner and launcher tests: the environment that runs this tree's pagecast
(the fixtures they share are in conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

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
