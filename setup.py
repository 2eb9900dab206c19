"""Ship the C sources inside the package, so an installed pagecast can build its native parts.

``native/`` and ``workloads/`` sit beside ``src/`` in the repository (the editable install
and the tests use them there). A regular install (``pip install .``, a wheel) gets a copy
of their source files under ``pagecast/_native/``; ``pagecast.util.native`` looks there
first and compiles into the user's cache directory. Everything else is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
TREES = ("native", "workloads")
SOURCE_SUFFIXES = {".c", ".h", ".cu", ".cuh", ".py", ".md"}
SKIP_DIRS = {"build", "__pycache__"}


def native_sources() -> list[Path]:
    """The source files of native/ and workloads/, relative to the repository."""
    found = []
    for tree in TREES:
        for f in sorted((ROOT / tree).rglob("*")):
            rel = f.relative_to(ROOT)
            if f.is_file() and f.suffix in SOURCE_SUFFIXES and not SKIP_DIRS.intersection(rel.parts):
                found.append(rel)
    return found


class BuildPyWithNative(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads native/ from the repository itself
        dest = Path(self.build_lib) / "pagecast" / "_native"
        for rel in native_sources():
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, out)


setup(cmdclass={"build_py": BuildPyWithNative})
