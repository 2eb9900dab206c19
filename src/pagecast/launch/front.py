"""The native ``pagecast`` command (``native/front/front.c``) and its pointer file.

setup.py compiles the front when the package is built, with ``source_id`` of the native
sources the package ships baked in (``editable_id`` for an editable install), and installs it as ``pagecast`` beside
``pagecast-python`` (``bin/pagecast``). For a simple ``run --plan`` it execs the launcher a
pointer file names, with no Python in between; without a valid pointer it runs
``pagecast-python`` with ``PAGECAST_FRONT_ID`` set, and ``exec_if_planned`` calls
``write_pointer``, which checks that the installed sources are the ones the id names and
that the launcher is built from them before it writes the pointer.

Pointer (``$XDG_CACHE_HOME/pagecast/native/pagecast-front-KEY``, else ``~/.cache/...``;
KEY is ``pointer_key``: the id and a hash of the front's directory, so two installations of
the same sources never share one): a magic line, the launcher, the native source directory,
then ``SIZE MTIME_NS PATH`` per source file; the front trusts it only while every listed
file still matches.

An editable install (``pip install -e .``) runs the checkout's own ``native/``, whose
sources change under it, so its front cannot carry their hash. It is built with
``editable_id`` instead: a hash of the front's own source (what the front must agree with:
the command lines it takes, the launcher's arguments). Its pointer is written only while
``front/front.c`` still hashes to that id and, like any pointer, names the launcher
``build_launcher`` built from the sources as they are, with every source file's size and
mtime: an edit anywhere in ``native/`` sends the next run to Python, which rebuilds the
launcher and writes the pointer again; an edit of ``front.c`` itself leaves the installed
front on the Python path until the package is installed again.

Only ``os`` at import: this module is on the start-up path of ``pagecast run --plan``.
"""

import os

HINT_ENV = "PAGECAST_FRONT_ID"
MAGIC = "pagecast-front 1"  # front.c's POINTER_MAGIC: change both with the pointer's format
SOURCE = "front/front.c"
SUFFIXES = (".c", ".h", ".cu", ".cuh")
SKIP_DIRS = {"build", "__pycache__"}


def source_files(native: str) -> list[str]:
    """The C sources under ``native`` (relative, sorted): what the id and the pointer cover."""
    found = []
    for root, dirs, files in os.walk(native):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in files:
            if name.endswith(SUFFIXES):
                found.append(os.path.relpath(os.path.join(root, name), native))
    return sorted(found)


def source_id(native: str) -> str:
    """Content hash of the native sources: what an installed front was built with."""
    import hashlib

    h = hashlib.sha256(MAGIC.encode())
    for rel in source_files(native):
        with open(os.path.join(native, rel), "rb") as f:
            data = f.read()
        h.update(f"\0{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:32]


def editable_id(native: str) -> str:
    """Id of an editable install's front: a hash of its own source only (see the module docstring)."""
    import hashlib

    with open(os.path.join(native, SOURCE), "rb") as f:
        data = f.read()
    return hashlib.sha256(f"{MAGIC} editable\0{len(data)}\0".encode() + data).hexdigest()[:32]


def pointer_key(front_id: str, front_dir: str) -> str:
    """front.c's key for the front in ``front_dir`` (its real directory): ``ID-FNV1A64(dir)``."""
    h = 0xCBF29CE484222325
    for byte in os.fsencode(front_dir):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{front_id}-{h:016x}"


def pointer_path(key: str) -> str | None:
    """The pointer file for ``key`` (the rule front.c follows), or None without a usable home."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not base:
        home = os.environ.get("HOME") or ""
        base = os.path.join(home, ".cache") if home else ""
    if not base.startswith("/"):
        return None
    return os.path.join(base, "pagecast", "native", f"pagecast-front-{key}")


def _through_pythonpath() -> bool:
    """Whether this pagecast was imported from a ``PYTHONPATH`` entry and is not the one the
    interpreter's own installation names: then it is another tree than the front's (a checkout
    run with ``PYTHONPATH=src`` beside an installed pagecast), and a pointer written for that
    front would send its every later run to this tree's launcher, however stale.
    ``PYTHONPATH`` naming the installation's own tree (an editable install's ``src``, as a
    checkout's benchmarks set it) is the front's tree: refusing there would leave every
    planned run after an edit of ``native/`` on the Python path."""
    import json
    import sys
    from importlib.metadata import distributions
    from urllib.parse import unquote, urlparse

    import pagecast

    pkg = os.path.realpath(os.path.dirname(pagecast.__file__))
    entries = {os.path.realpath(e) for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e}
    if not any(pkg.startswith(e + os.sep) for e in entries):
        return False
    own = [p for p in sys.path if p and os.path.realpath(p) not in entries]
    dist = next(iter(distributions(name="pagecast", path=own)), None)  # the installation, as pip recorded it
    if dist is None:
        return True
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct.get("dir_info", {}).get("editable") and direct.get("url", "").startswith("file://"):
        tree = os.path.realpath(unquote(urlparse(direct["url"]).path))
        return not pkg.startswith(tree + os.sep)
    return os.path.realpath(str(dist.locate_file("pagecast"))) != pkg


def write_pointer(key: str) -> str | None:
    """Point the installed front that asked (``key``, from ``PAGECAST_FRONT_ID``) at the launcher,
    if it is entitled to one; the launcher or None.

    Only for a regular install whose shipped sources still hash to the key's id, or an
    editable one whose front source still hashes to it (``editable_id``), and never under
    ``PAGECAST_NATIVE_DIR`` / ``PAGECAST_BUILD_DIR`` (the front ignores pointers then) or
    for a pagecast imported through ``PYTHONPATH`` from another tree than the front's.
    The launcher comes from ``build_launcher`` (content-addressed: built from exactly these
    sources), not from the quicker stamp check."""
    from pagecast.launch import binary

    if _through_pythonpath():
        return None
    native = binary.native_dir()
    editable = native != binary.installed_native_dir()
    front_id, _, where = key.partition("-")
    path = pointer_path(key)
    if (
        len(where) != 16
        or not all(c in "0123456789abcdef" for c in where)
        or path is None
        or os.environ.get("PAGECAST_NATIVE_DIR")
        or os.environ.get("PAGECAST_BUILD_DIR")
    ):
        return None
    files = source_files(native)
    before = [os.stat(os.path.join(native, rel)) for rel in files]
    if not files or (editable_id(native) if editable else source_id(native)) != front_id:
        return None
    launcher = binary.build_launcher()
    after = [os.stat(os.path.join(native, rel)) for rel in files]
    lines = [MAGIC, launcher, native]
    lines += [f"{st.st_size} {st.st_mtime_ns} {rel}" for st, rel in zip(after, files)]
    same = all((a.st_size, a.st_mtime_ns) == (b.st_size, b.st_mtime_ns) for a, b in zip(before, after))
    if not same or not launcher.startswith("/") or any("\n" in line for line in lines):
        return launcher  # changed while we looked, or a path a line cannot hold: no pointer
    from pagecast.util.atomic import atomic_write_text

    try:  # a temporary of a random name, created exclusively: never through a planted link
        os.makedirs(os.path.dirname(path), exist_ok=True)  # an editable install builds elsewhere
        atomic_write_text(path, "\n".join(lines) + "\n")
    except OSError:
        pass
    return launcher
