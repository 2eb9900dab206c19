"""Ship the C sources inside the package, so an installed pagecast can build its native parts.

``native/`` and ``workloads/`` sit beside ``src/`` in the repository (the editable install
and the tests use them there). A regular install (``pip install .``, a wheel) gets a copy
of their source files under ``pagecast/_native/``; ``pagecast.util.native`` looks there
first and compiles into the user's cache directory.

The ``pagecast`` command: ``bin/pagecast`` (Python) is installed as ``pagecast-python``, and
``pagecast`` is the native front (``native/front/front.c``, compiled here with the id of the
sources this package ships, or for an editable install the id of the front's own source,
see ``pagecast.launch.front``), which runs a simple ``run --plan``
with no Python in front of the program and hands everything else to ``pagecast-python``.
Without a C compiler at build time ``pagecast`` is a copy of the Python command (as before
the front existed). A wheel holding the front is tagged for this platform (``py3-none-PLAT``).
Everything else is in pyproject.toml.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

build_scripts = Distribution().get_command_class("build_scripts")  # setuptools has no subclass of its own

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


def _front_module():
    """pagecast.launch.front, loaded from the tree (it imports only os): the id rule it checks at run time."""
    spec = importlib.util.spec_from_file_location("_pagecast_front", ROOT / "src" / "pagecast" / "launch" / "front.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class BuildScriptsWithFront(build_scripts):
    editable_mode = False  # setuptools' editable_wheel (PEP 660) sets it on every build command that has it

    def run(self) -> None:
        self.force = True  # build_dir/pagecast may be last build's front, "newer" than bin/pagecast
        super().run()  # bin/pagecast -> build_dir/pagecast, its #! line made `#!python` for a wheel
        built = Path(self.build_dir)
        entry = built / "pagecast-python"
        os.replace(built / "pagecast", entry)
        front = _front_module()
        native = str(ROOT / "native")
        front_id = front.editable_id(native) if self.editable_mode else front.source_id(native)
        out = built / "pagecast"
        # static first: no dynamic loader in front of the launcher (a fraction of a millisecond
        # of every planned run); without a static C library, a dynamic front
        if not any(self._compile_front(out, front_id, front.SOURCE, static) for static in (True, False)):
            shutil.copy2(entry, out)

    def _compile_front(self, out: Path, front_id: str, source: str, static: bool) -> bool:
        cc = shlex.split(os.environ.get("CC") or "cc")
        tmp = out.with_name(out.name + ".tmp")
        cmd = [
            *cc,
            "-O2",
            "-Wall",
            "-Wextra",
            f'-DPAGECAST_FRONT_ID="{front_id}"',
            "-o",
            str(tmp),
            str(ROOT / "native" / source),
            *(["-static"] if static else []),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            proc = None
            why = str(e)
        else:
            why = (proc.stderr.strip().splitlines() or ["(no output)"])[0]
        if proc is None or proc.returncode != 0:
            if not static:
                self.warn(f"no native `pagecast` front ({why}): the command runs through Python")
            tmp.unlink(missing_ok=True)
            return False
        os.replace(tmp, out)
        return True


def bdist_wheel_for_front() -> type | None:
    """bdist_wheel whose wheel, holding the compiled front, is for this platform (``py3-none-PLAT``),
    its files where a pure wheel has them. None before setuptools 70.1 (no bdist_wheel of its own;
    pyproject.toml asks for more, but ``pip --no-build-isolation`` takes what is installed)."""
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:
        return None

    class BdistWheelForFront(bdist_wheel):
        def get_tag(self) -> tuple[str, str, str]:
            pure, self.root_is_pure = self.root_is_pure, False
            try:
                plat = super().get_tag()[2]  # setuptools' own rule for a platform wheel's tag
            finally:
                self.root_is_pure = pure
            return ("py3", "none", plat)

    return BdistWheelForFront


cmdclass: dict[str, type] = {"build_py": BuildPyWithNative, "build_scripts": BuildScriptsWithFront}
wheel_cmd = bdist_wheel_for_front()
if wheel_cmd is not None:
    cmdclass["bdist_wheel"] = wheel_cmd
setup(cmdclass=cmdclass)
