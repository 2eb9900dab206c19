"""The style the tree was formatted to once (ruff for Python, clang-format for C) still holds.

Both tools are in the test extra, pinned, because a formatter's output changes between
versions; a checkout without them skips (the suite must not need a formatter to run).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY_TREES = ["src", "tests", "benchmarks", "bin/pagecast"]


def _tracked(*patterns: str) -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", *patterns], capture_output=True, text=True, check=True)
    return [f for f in out.stdout.split() if "/build/" not in f]


def _ruff() -> list[str]:
    try:
        import ruff  # noqa: F401
    except ImportError:
        pytest.skip("ruff not installed (pip install -e '.[test]')")
    return [sys.executable, "-m", "ruff"]


def test_ruff_lint_is_clean():
    p = subprocess.run([*_ruff(), "check", "--no-cache", *PY_TREES], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_python_is_formatted():
    p = subprocess.run([*_ruff(), "format", "--check", "--no-cache", *PY_TREES], cwd=ROOT, capture_output=True,
                       text=True)  # fmt: skip
    assert p.returncode == 0, "run `ruff format` on:\n" + p.stdout + p.stderr


def test_c_is_formatted():
    exe = shutil.which("clang-format") or str(Path(sys.executable).parent / "clang-format")
    if not Path(exe).exists():
        pytest.skip("clang-format not installed (pip install -e '.[test]')")
    files = _tracked("*.c", "*.h", "*.cu")
    p = subprocess.run([exe, "--dry-run", "-Werror", *files], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, "run `clang-format -i` on:\n" + "\n".join(
        sorted({line.split(":")[0] for line in p.stderr.splitlines() if ": error:" in line})
    )
