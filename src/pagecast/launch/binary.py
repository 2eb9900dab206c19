"""Where the native launcher (``native/launch/``) is, built on first use.

``launcher_path()`` runs before every planned launch, so it must cost well under a
millisecond: it compares the sources' sizes and mtimes with a stamp written by the last
build instead of hashing them, and imports only ``os`` and ``pagecast.constants``. A missing or outdated stamp falls
back to ``pagecast.util.native.build`` (content-hashed, compiles if needed) and rewrites
the stamp.
"""

import os

from pagecast.constants import PAGER_SHIM_SOURCES

NAME = "pagecast-launch"
SOURCES = (
    "launch/launch.c",
    "launch/plan.c",
    "launch/prefetch.c",
    "launch/packs.c",
    "launch/launch.h",
    "launch/feedback.h",
)
# The advice shim the launcher preloads into the program for a plan's per-file read-ahead
# advice; it lives next to the binary ("<launcher>-advice.so"), where the launcher looks.
SHIM_SOURCE = "advice/advice_shim.c"
SHIM_SUFFIX = "-advice.so"
# The userfaultfd pager's shim, preloaded for a plan's page packs ("<launcher>-pager.so").
PAGER_SHIM_HEADERS = ("pager/pack.h", "pager/pager.h", "pager/pager_internal.h", "highfd.h")
PAGER_SHIM_SUFFIX = "-pager.so"
# Headers of native/ outside launch/ that the launcher includes: a change must rebuild it too.
SHARED_HEADERS = ("outfile.h", "infile.h", "pager/pack.h")
LINK = "static-first"  # in the stamp: a launcher linked by an older rule is rebuilt


def installed_native_dir() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_native", "native")


def native_dir() -> str:
    # Same rule as pagecast.util.native.native_dir, without importing pathlib (start-up cost).
    env = os.environ.get("PAGECAST_NATIVE_DIR")
    if env:
        return env
    installed = installed_native_dir()
    if os.path.isdir(installed):
        return installed
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(here))), "native")


def _stamp_dirs(native: str) -> list[str]:
    # Same places as pagecast.util.native.build_dir, in its order of preference.
    env = os.environ.get("PAGECAST_BUILD_DIR")
    cache = os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "pagecast", "native"
    )
    if env:
        return [env, cache]
    if native == installed_native_dir():
        return [cache]
    return [os.path.join(native, "build"), cache]


def _signature(native: str) -> str:
    parts = [LINK]
    for s in (*SOURCES, SHIM_SOURCE, *SHARED_HEADERS, *PAGER_SHIM_SOURCES, *PAGER_SHIM_HEADERS):
        st = os.stat(os.path.join(native, s))
        parts.append(f"{s}:{st.st_size}:{st.st_mtime_ns}")
    return ";".join(parts)


def launcher_path() -> str:
    """Path of the launcher binary; builds it if the sources changed since the last build."""
    native = native_dir()
    try:
        sig = _signature(native)
    except OSError:
        sig = None
    if sig is not None:
        for d in _stamp_dirs(native):
            try:
                with open(os.path.join(d, NAME + ".stamp")) as f:
                    want, path = f.read().split("\n")[:2]
            except (OSError, ValueError):
                continue
            if want == sig and os.access(path, os.X_OK):
                return path
    return build_launcher()


def build_launcher() -> str:
    """Compile the launcher (cached by content hash) and its advice shim and record a stamp for ``launcher_path``."""
    from pagecast.errors import PagecastError
    from pagecast.util.atomic import atomic_write_bytes, atomic_write_text
    from pagecast.util.native import build

    try:
        # static: no dynamic loader and no libc relocations between the caller and the
        # program (0.1-0.5 ms of every planned run, measured: benchmarks/launch_overhead.py)
        out = build(NAME, list(SOURCES), shared=False, ldflags=["-pthread", "-static"])
    except PagecastError:  # no static C library installed
        out = build(NAME, list(SOURCES), shared=False, ldflags=["-pthread"])
    shim = build("pc_advice_shim", [SHIM_SOURCE], ldflags=["-ldl"])
    pager = build("pager_shim", list(PAGER_SHIM_SOURCES), ldflags=["-ldl", "-lpthread"])
    for lib, suffix in ((shim, SHIM_SUFFIX), (pager, PAGER_SHIM_SUFFIX)):
        with open(lib, "rb") as src:  # renamed into place: a program already running keeps the old one
            atomic_write_bytes(f"{out}{suffix}", src.read())
    native = native_dir()
    try:
        sig = _signature(native)
    except OSError:
        return str(out)
    try:
        atomic_write_text(os.path.join(str(out.parent), NAME + ".stamp"), f"{sig}\n{out}\n")
    except OSError:
        pass  # no stamp: the next launch rebuilds-by-hash, which only costs time
    return str(out)


if __name__ == "__main__":
    # `"$(python -m pagecast.launch.binary)" PLAN -- PROG ARGS`: the launcher with no Python in front
    print(launcher_path())
