"""Shared by the tests that install a copy of the repository into a new virtualenv."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def clean_copy(dest: Path) -> Path:
    """The repository's own files (tracked, or new and not ignored): no build outputs."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: cannot tell source files from build outputs")
    ls = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    )
    for rel in filter(None, ls.stdout.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():  # a file deleted in the work tree is still listed as cached
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def run_ok(cmd: list, **kw) -> subprocess.CompletedProcess:
    """Run ``cmd`` (text mode), failing the test with its output unless it exits 0."""
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{p.stdout}\n{p.stderr}"
    return p
