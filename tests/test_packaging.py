"""A regular (non-editable) install builds and runs the native parts from outside the tree.

From a clean copy of the repository's files a wheel is built (what `pip install .` does),
installed into a new virtualenv that reuses this interpreter's dependencies, and run from
a directory outside any checkout with no PYTHONPATH: the package must carry the C sources
(native/, workloads/) and compile them into the user's cache, not into site-packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from pagecast.trace import open_trace
from perf_support import needs_perf

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _clean_copy(dest: Path) -> Path:
    """The repository's own files (tracked, or new and not ignored): no build outputs."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: cannot tell source files from build outputs")
    files = (
        subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():  # a file deleted in the work tree is still listed as cached
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _run(cmd: list, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{p.stdout}\n{p.stderr}"
    return p


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("pkg")
    copy = _clean_copy(tmp / "src")
    # without build isolation: offline, with this environment's setuptools (the test extra)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp / "dist", copy])
    wheel = next((tmp / "dist").glob("pagecast-*.whl"))
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", venv])
    py = venv / "bin" / "python"
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # the dependencies come from this interpreter's environment, appended after the venv's own
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "pagecast-test-deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGECAST_") and k != "PYTHONPATH"}
    env["XDG_CACHE_HOME"] = str(tmp / "cache")
    work = tmp / "elsewhere"
    work.mkdir()
    # --force-reinstall: the same name and version may be visible through the .pth line
    # (an editable install of this checkout), which pip would take as already installed
    inst = _run([py, "-m", "pip", "install", "--force-reinstall", "--no-deps", "--no-index", wheel], env=env)
    where = subprocess.run(
        [py, "-c", "import pagecast; print(pagecast.__file__)"], capture_output=True, text=True, cwd=work, env=env
    )
    assert where.returncode == 0 and where.stdout.startswith(str(venv)), (
        f"the installed wheel does not import from the venv:\n{inst.stdout}\n{inst.stderr}\n{where.stdout}{where.stderr}"
    )
    return {"wheel": wheel, "venv": venv, "py": py, "env": env, "cwd": work, "cache": tmp / "cache"}


def test_wheel_carries_every_native_and_workload_source(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    sources = [p.relative_to(ROOT) for tree in ("native", "workloads") for p in (ROOT / tree).rglob("*")]
    want = {
        f"pagecast/_native/{rel}"
        for rel in sources
        if (ROOT / rel).is_file() and rel.suffix in {".c", ".h", ".cu", ".cuh"} and "build" not in rel.parts
    }
    assert want and want <= names, sorted(want - names)
    assert not [n for n in names if n.startswith("pagecast/_native/") and n.endswith((".so", ".o"))]


def test_installed_package_builds_into_the_user_cache(installed):
    code = (
        "import pagecast, pagecast.util.native as n, pagecast.bench.workloads as w; "
        "from pagecast.launch.binary import launcher_path; "
        "print(pagecast.__file__); print(n.native_dir()); print(w.build_workload('touchpages')); "
        "print(launcher_path())"
    )
    out = _run([installed["py"], "-c", code], cwd=installed["cwd"], env=installed["env"]).stdout.split("\n")
    venv, cache = str(installed["venv"]), str(installed["cache"] / "pagecast" / "native")
    assert out[0].startswith(venv) and out[1].startswith(venv) and out[1].endswith("_native/native")
    assert out[2].startswith(cache) and out[3].startswith(cache)
    assert not list(Path(out[1]).rglob("build"))  # nothing written into site-packages


@needs_perf
def test_installed_cli_records_a_real_program(installed, tmp_path):
    """`pagecast record` of the installed package: collector, page-set shim and workload all
    compiled from the package's own copy of the sources."""
    env = installed["env"]
    code = "from pagecast.bench.workloads import build_workload as b; print(b('touchpages'))"
    exe = _run([installed["py"], "-c", code], cwd=installed["cwd"], env=env).stdout.strip()
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(16 * 4096))
    out = tmp_path / "t.parquet"
    p = subprocess.run(
        [str(installed["venv"] / "bin" / "pagecast"), "record", "-o", str(out), "--", exe, str(data), "0,2,5,9"],
        cwd=installed["cwd"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    t = open_trace(out)
    rid = [r.id for r in t.regions if r.kind == "file" and r.path == str(data)]
    cols = t.read(["region", "page"])
    assert len(rid) == 1 and {0, 2, 5, 9} <= set(cols["page"][cols["region"] == rid[0]].tolist())
