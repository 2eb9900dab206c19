"""Build the project's real test programs (``workloads/*.c``) on first use."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pagecast.util.native import build, native_dir


def workloads_dir() -> Path:
    return native_dir().parent / "workloads"


def build_workload(name: str, ldflags: Sequence[str] = ("-pthread",)) -> Path:
    """Compile ``workloads/<name>.c`` into an executable and return its path."""
    return build(f"wl-{name}", [workloads_dir() / f"{name}.c"], shared=False, ldflags=ldflags)
