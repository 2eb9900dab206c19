"""An editable install's `pagecast` reaches the native launcher with no Python in front, too.

A copy of the repository is installed editable (`pip install -e`, what the README's first
command does) into a new virtualenv that reuses this interpreter's dependencies. Its
`pagecast` is the native front built with ``editable_id`` (a hash of front.c alone): the
first planned run goes through Python, which writes the pointer; from then on no Python
process starts (any interpreter prints `PYTHONPROFILEIMPORTTIME` lines) and the program's
output and status are the bare program's. An edit of a native source (its mtime) sends
one run back to Python, which rebuilds and points again; an edit of front.c itself keeps
the installed front on the Python path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from copy_support import clean_copy, run_ok
from pagecast.launch.front import editable_id, pointer_key
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, write_plan

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
PY_TRACE = {"PYTHONPROFILEIMPORTTIME": "1"}
PROG = ["sh", "-c", 'printf "<%s>\\n" "$@"; echo err >&2; exit 3', "sh", "a b", "new\nline"]


@pytest.fixture(scope="module")
def editable(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("ed")
    copy = clean_copy(tmp / "src")
    venv = tmp / "venv"
    run_ok([sys.executable, "-m", "venv", "--without-pip", venv])
    py = venv / "bin" / "python"
    site = run_ok([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "pagecast-test-deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGECAST_") and k != "PYTHONPATH"}
    env["XDG_CACHE_HOME"] = str(tmp / "cache")
    run_ok([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index",
          "--no-build-isolation", "-e", copy], env=env)  # fmt: skip
    where = run_ok([py, "-c", "import pagecast; print(pagecast.__file__)"], cwd=tmp, env=env).stdout
    assert where.startswith(str(copy)), where  # the copy's own tree, not this checkout
    key = pointer_key(editable_id(str(copy / "native")), os.path.realpath(venv / "bin"))
    pointer = tmp / "cache" / "pagecast" / "native" / f"pagecast-front-{key}"
    return {"copy": copy, "venv": venv, "env": env, "cwd": tmp, "pointer": pointer}


def _go(ed: dict, argv: list) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=ed["cwd"], env={**ed["env"], **PY_TRACE}, capture_output=True)


def _python_started(p: subprocess.CompletedProcess) -> bool:
    return b"import time:" in p.stderr


def _plan(tmp_path: Path) -> Path:
    out = tmp_path / "nothing.plan"
    exe = shutil.which("sh")
    write_plan(out, PlanDoc([FilePlan(exe, FileIdentity.of(exe), "nothing", reason="test")]))
    return out


def test_editable_front_carries_the_id_of_its_own_source(editable):
    front = (editable["venv"] / "bin" / "pagecast").read_bytes()
    assert front[:4] == b"\x7fELF"
    assert editable_id(str(editable["copy"] / "native")).encode() + b"\0" in front
    entry = (editable["venv"] / "bin" / "pagecast-python").read_text()
    assert entry.startswith(f"#!{editable['venv'] / 'bin' / 'python'}")


def test_editable_front_runs_the_launcher_with_no_python_once_pointed(editable, tmp_path):
    cmd = [editable["venv"] / "bin" / "pagecast", "run", "--plan", _plan(tmp_path), "--", *PROG]
    bare = _go(editable, PROG)
    assert bare.returncode == 3 and not _python_started(bare)
    editable["pointer"].unlink(missing_ok=True)
    first = _go(editable, cmd)
    assert _python_started(first) and (first.returncode, first.stdout) == (3, bare.stdout)
    lines = editable["pointer"].read_text().split("\n")
    assert lines[2] == str(editable["copy"] / "native") and Path(lines[1]).is_file()
    again = _go(editable, cmd)
    assert (again.returncode, again.stdout, again.stderr) == (3, bare.stdout, bare.stderr)
    # an edit in the checkout's native/ (what an editable install is for): one run through
    # Python, which rebuilds the launcher from the edited sources and points the front at it
    src = editable["copy"] / "native" / "launch" / "plan.c"
    src.write_bytes(src.read_bytes() + b"\n/* edited */\n")
    edited = _go(editable, cmd)
    assert _python_started(edited) and (edited.returncode, edited.stdout) == (3, bare.stdout)
    relaunched = editable["pointer"].read_text().split("\n")[1]
    assert relaunched != lines[1] and Path(relaunched).is_file()
    after = _go(editable, cmd)
    assert not _python_started(after) and (after.returncode, after.stdout) == (3, bare.stdout)


def test_edited_front_source_keeps_the_python_path(editable, tmp_path):
    cmd = [editable["venv"] / "bin" / "pagecast", "run", "--plan", _plan(tmp_path), "--", *PROG]
    _go(editable, cmd)  # (re)writes the pointer
    assert not _python_started(_go(editable, cmd))
    src = editable["copy"] / "native" / "front" / "front.c"
    original = src.read_bytes()
    try:
        src.write_bytes(original + b"\n/* edited */\n")
        for _ in range(2):  # the installed front was built from other front.c: never pointed again
            p = _go(editable, cmd)
            assert _python_started(p) and p.returncode == 3
    finally:
        src.write_bytes(original)
    _go(editable, cmd)
    assert not _python_started(_go(editable, cmd))


def test_a_pagecast_imported_through_pythonpath_points_no_front(editable, tmp_path):
    """A checkout run with PYTHONPATH beside an installed pagecast is another tree: the
    installed front asked it for a pointer and got one naming that tree's launcher, which
    every later run then used, however stale (this checkout's own test runs, from clones,
    left the installed front on a clone's launcher from before a prefetcher fix)."""
    cmd = [editable["venv"] / "bin" / "pagecast", "run", "--plan", _plan(tmp_path), "--", *PROG]
    editable["pointer"].unlink(missing_ok=True)
    other = subprocess.run([str(a) for a in cmd], cwd=editable["cwd"], capture_output=True,
                           env={**editable["env"], **PY_TRACE, "PYTHONPATH": str(ROOT / "src")})  # fmt: skip
    assert _python_started(other) and other.returncode == 3
    assert not editable["pointer"].exists()
    own = _go(editable, cmd)  # the front's own tree points it, as before
    assert own.returncode == 3 and editable["pointer"].exists()
    assert editable["pointer"].read_text().split("\n")[2] == str(editable["copy"] / "native")


def test_pythonpath_naming_the_installations_own_tree_still_points_the_front(editable, tmp_path):
    """PYTHONPATH=src of the editable install's own tree (what a checkout's benchmarks set) is
    the front's tree: after an edit of native/ the next planned run goes through Python once,
    which points the front again; the runs after it start no Python (before, every planned
    run after the edit paid the interpreter's start-up)."""
    cmd = [editable["venv"] / "bin" / "pagecast", "run", "--plan", _plan(tmp_path), "--", *PROG]
    env = {**editable["env"], **PY_TRACE, "PYTHONPATH": str(editable["copy"] / "src")}

    def go() -> subprocess.CompletedProcess:
        return subprocess.run([str(a) for a in cmd], cwd=editable["cwd"], env=env, capture_output=True)

    go()
    src = editable["copy"] / "native" / "launch" / "plan.c"
    src.write_bytes(src.read_bytes() + b"\n/* edited again */\n")
    edited = go()
    assert _python_started(edited) and edited.returncode == 3
    assert editable["pointer"].read_text().split("\n")[2] == str(editable["copy"] / "native")
    after = go()
    assert not _python_started(after) and (after.returncode, after.stdout) == (3, b"<a b>\n<new\nline>\n")
