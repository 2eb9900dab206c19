"""Build the project's C sources (``native/``) on first use with the system compiler.

Where the sources are: ``$PAGECAST_NATIVE_DIR``; else the copy an installed package
carries (``pagecast/_native/native``, put there by setup.py); else ``native/`` of the
repository this module runs from (an editable install, ``PYTHONPATH=src``).

Outputs are cached keyed by a hash of the sources and flags, so an edited source is
rebuilt and an unchanged one is not: in ``$PAGECAST_BUILD_DIR``; else ``native/build/`` of
a repository checkout; else (an installed package, whose files belong to pip, or a
checkout that is not writable) the user's cache, ``$XDG_CACHE_HOME/pagecast/native``
(``~/.cache/pagecast/native``). Concurrent builders are safe: each compiles to a
temporary name and renames.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from pagecast.errors import PagecastError


def installed_native_dir() -> Path:
    """Where an installed (non-editable) package keeps its copy of ``native/``."""
    return Path(__file__).resolve().parents[1] / "_native" / "native"


def native_dir() -> Path:
    env = os.environ.get("PAGECAST_NATIVE_DIR")
    if env:
        return Path(env)
    installed = installed_native_dir()
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[3] / "native"


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pagecast" / "native"


def build_dir() -> Path:
    env = os.environ.get("PAGECAST_BUILD_DIR")
    nd = native_dir()
    if env:
        d = Path(env)
    elif nd == installed_native_dir():
        d = user_cache_dir()
    else:
        d = nd / "build"
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / f".w{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError:
        d = user_cache_dir()
        d.mkdir(parents=True, exist_ok=True)
    return d


def compiler(cuda: bool = False) -> str:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise PagecastError(f"C compiler {cc!r} not found: install gcc (apt-get install gcc) or set CC")
    return cc


def build(
    name: str,
    sources: Sequence[str | Path],
    *,
    shared: bool = True,
    cflags: Sequence[str] = ("-O2", "-g", "-Wall", "-Wextra", "-Werror"),
    ldflags: Sequence[str] = (),
    include: Sequence[str | Path] = (),
    cc: str | None = None,
) -> Path:
    """Compile ``sources`` (paths relative to native/ or absolute) into a library or program."""
    nd = native_dir()
    srcs = [Path(s) if Path(s).is_absolute() else nd / s for s in sources]
    for s in srcs:
        if not s.exists():
            raise PagecastError("native source missing", path=s)
    cc = cc or compiler()
    flags = list(cflags) + (["-fPIC", "-shared"] if shared else [])
    incs = [f"-I{p}" for p in [nd, *include]]
    h = hashlib.sha256()
    for s in srcs:
        h.update(s.read_bytes())
    for hdr in sorted(nd.rglob("*.h")):
        h.update(hdr.read_bytes())
    h.update(repr((cc, flags, incs, list(ldflags))).encode())
    out = build_dir() / f"{name}-{h.hexdigest()[:12]}{'.so' if shared else ''}"
    if out.exists():
        return out
    # the compiler writes through whatever is at its output name: give it a private directory
    private = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        tmp = private / out.name
        cmd = [cc, *flags, *incs, "-o", str(tmp), *map(str, srcs), *ldflags]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["(no output)"])[0]
            raise PagecastError(f"building {name} failed: {first}\n{proc.stderr}")
        os.replace(tmp, out)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return out
