"""A regular (non-editable) install builds and runs the native parts from outside the tree.

From a clean copy of the repository's files a wheel is built (what `pip install .` does),
installed into a new virtualenv that reuses this interpreter's dependencies, and run from
a directory outside any checkout with no PYTHONPATH: the package must carry the C sources
(native/, workloads/) and compile them into the user's cache, not into site-packages.
Its `pagecast` command is the native front (native/front/front.c): checked here to run a
planned program with no Python process in front of it, exactly as the bare program runs,
and to hand everything else, and every pointer it cannot trust, to `pagecast-python`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from copy_support import clean_copy, run_ok
from pagecast.launch.front import MAGIC, pointer_key, source_id
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, write_plan
from pagecast.trace import open_trace
from perf_support import needs_perf

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("pkg")
    copy = clean_copy(tmp / "src")
    # without build isolation: offline, with this environment's setuptools (the test extra)
    run_ok([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp / "dist", copy])
    wheel = next((tmp / "dist").glob("pagecast-*.whl"))
    venv = tmp / "venv"
    run_ok([sys.executable, "-m", "venv", venv])
    py = venv / "bin" / "python"
    site = run_ok([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # the dependencies come from this interpreter's environment, appended after the venv's own
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "pagecast-test-deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGECAST_") and k != "PYTHONPATH"}
    env["XDG_CACHE_HOME"] = str(tmp / "cache")
    work = tmp / "elsewhere"
    work.mkdir()
    # --force-reinstall: the same name and version may be visible through the .pth line
    # (an editable install of this checkout), which pip would take as already installed
    inst = run_ok([py, "-m", "pip", "install", "--force-reinstall", "--no-deps", "--no-index", wheel], env=env)
    where = subprocess.run(
        [py, "-c", "import pagecast; print(pagecast.__file__)"], capture_output=True, text=True, cwd=work, env=env
    )
    assert where.returncode == 0 and where.stdout.startswith(str(venv)), (
        f"the installed wheel does not import from the venv:\n{inst.stdout}\n{inst.stderr}\n{where.stdout}{where.stderr}"
    )
    return {"wheel": wheel, "venv": venv, "py": py, "env": env, "cwd": work, "cache": tmp / "cache", "copy": copy}


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
    out = run_ok([installed["py"], "-c", code], cwd=installed["cwd"], env=installed["env"]).stdout.split("\n")
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
    exe = run_ok([installed["py"], "-c", code], cwd=installed["cwd"], env=env).stdout.strip()
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


# ---- the native `pagecast` front (native/front/front.c, pagecast.launch.front) ----------------

# Set for every run below: any Python interpreter that starts prints "import time:" lines on stderr.
PY_TRACE = {"PYTHONPROFILEIMPORTTIME": "1"}
PROG = ["sh", "-c", 'printf "<%s>\\n" "$@"; echo err >&2; exit 3', "sh", "a b", "'q\"\\", "new\nline", "", "*"]


def _front(installed) -> dict:
    venv, cache = installed["venv"], installed["cache"] / "pagecast" / "native"
    native = run_ok([installed["py"], "-c", "import pagecast.util.native as n; print(n.native_dir())"],
                  cwd=installed["cwd"], env=installed["env"]).stdout.strip()  # fmt: skip
    fid = source_id(native)
    key = pointer_key(fid, os.path.realpath(venv / "bin"))
    return {"cmd": venv / "bin" / "pagecast", "pointer": cache / f"pagecast-front-{key}", "id": fid, "native": native}


def _plan_for(tmp_path: Path, prog: str) -> Path:
    out = tmp_path / "nothing.plan"
    exe = shutil.which(prog)
    write_plan(out, PlanDoc([FilePlan(exe, FileIdentity.of(exe), "nothing", reason="test")]))
    return out


def _go(installed, argv: list, extra_env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    env = {**installed["env"], **PY_TRACE, **(extra_env or {})}
    return subprocess.run([str(a) for a in argv], cwd=installed["cwd"], env=env, capture_output=True, **kw)


def _python_started(p: subprocess.CompletedProcess) -> bool:
    return b"import time:" in p.stderr


def test_wheel_carries_the_native_front_and_the_python_command(installed):
    """The wheel is tagged for this platform (it holds a binary); the front has the id of the
    sources it ships baked in; `pagecast-python` got this venv's interpreter from pip."""
    wheel = zipfile.ZipFile(installed["wheel"])
    assert installed["wheel"].name.startswith("pagecast-0.1.0-py3-none-linux_")
    front = wheel.read("pagecast-0.1.0.data/scripts/pagecast")
    assert front[:4] == b"\x7fELF"
    assert source_id(str(installed["copy"] / "native")).encode() + b"\0" in front
    entry = (installed["venv"] / "bin" / "pagecast-python").read_text()
    assert entry.split("\n")[0] == f"#!{installed['venv'] / 'bin' / 'python'}"
    assert (installed["venv"] / "bin" / "pagecast").read_bytes() == front


def test_without_a_compiler_pagecast_is_the_python_command(installed, tmp_path):
    out = tmp_path / "scripts"
    env = {**os.environ, "CC": "no-such-cc"}
    cmd = [sys.executable, "setup.py", "-q", "build_scripts", "--build-dir", out, "-e", "python"]
    p = run_ok(cmd, cwd=installed["copy"], env=env)
    assert "no native `pagecast` front" in p.stderr
    entry = (out / "pagecast-python").read_bytes()
    assert entry.startswith(b"#!python\n") and (out / "pagecast").read_bytes() == entry


def test_front_runs_the_launcher_with_no_python_once_pointed(installed, tmp_path):
    f = _front(installed)
    f["pointer"].unlink(missing_ok=True)
    plan = _plan_for(tmp_path, "sh")
    bare = _go(installed, PROG)
    assert bare.returncode == 3 and not _python_started(bare)
    # first run: no pointer, so the Python command runs it and writes the pointer
    first = _go(installed, [f["cmd"], "run", "--plan", plan, "--", *PROG])
    assert _python_started(first) and (first.returncode, first.stdout) == (3, bare.stdout)
    lines = f["pointer"].read_text().split("\n")
    assert lines[0] == MAGIC and lines[2] == f["native"] and Path(lines[1]).is_file()
    assert lines[1].startswith(str(installed["cache"]))
    # from then on no Python process between the command and the program: same output, status
    for argv in (["run", "--plan", plan, "--", *PROG], ["run", f"--plan={plan}", "--", *PROG]):
        again = _go(installed, [f["cmd"], *argv])
        assert (again.returncode, again.stdout, again.stderr) == (3, bare.stdout, bare.stderr)
    st = tmp_path / "status.json"
    rep = _go(installed, [f["cmd"], "run", "--json", "--plan", plan, "--plan-status", st, "--", *PROG])
    assert not _python_started(rep) and rep.returncode == 3
    assert json.loads(rep.stdout)["exit_status"] == 3 and rep.stderr.startswith(bare.stdout)
    # a corrupt plan: one warning from the launcher, and the program runs as it would bare
    bad = tmp_path / "bad.plan"
    bad.write_text("not a plan\n")
    p = _go(installed, [f["cmd"], "run", "--plan", bad, "--", *PROG])
    assert not _python_started(p) and (p.returncode, p.stdout) == (3, bare.stdout)
    warning, rest = p.stderr.split(b"\n", 1)
    assert b"warning" in warning and str(bad).encode() in warning and rest == bare.stderr
    # everything else still goes to Python
    for argv, status in ((["--help"], 0), (["no-such-command"], 2), (["run", "--plan", plan, "--"], 2)):
        p = _go(installed, [f["cmd"], *argv])
        assert _python_started(p) and p.returncode == status, (argv, p.stderr[-300:])


def test_front_passes_environment_and_signal_dispositions_untouched(installed, tmp_path):
    """What a shell in front would change (names that are not identifiers, bash's exported
    functions, IFS, PPID, a stale PWD, the order) reaches the program exactly as given."""
    f = _front(installed)
    plan = _plan_for(tmp_path, "env")
    _go(installed, [f["cmd"], "run", "--plan", plan, "--", "true"])  # (re)writes the pointer
    odd = {
        "f()": "x",
        "a.b-c": "1",
        "BASH_FUNC_g%%": "() {  echo hi\n}",
        "IFS": ":",
        "PPID": "1",
        "PWD": "/nowhere",
        "ZZ": "last",
    }
    argv = ["env", "-0"]
    bare = _go(installed, argv, odd)
    via = _go(installed, [f["cmd"], "run", "--plan", plan, "--", *argv], odd)
    assert (via.returncode, via.stdout, via.stderr) == (0, bare.stdout, b"")
    assert b"\0f()=x\0" in bare.stdout and b"BASH_FUNC_g%%=() {  echo hi\n}\0" in bare.stdout
    # a caller that ignores SIGPIPE and SIGXFSZ (this Python, restore_signals=False): kept, as for the bare program
    sig = ["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]
    plan = _plan_for(tmp_path, "grep")
    bare = _go(installed, sig, restore_signals=False)
    via = _go(installed, [f["cmd"], "run", "--plan", plan, "--", *sig], restore_signals=False)
    assert (via.returncode, via.stdout) == (0, bare.stdout) and not _python_started(via)
    kill = ["sh", "-c", "kill -TERM $$"]
    plan = _plan_for(tmp_path, "sh")
    assert (
        _go(installed, [f["cmd"], "run", "--plan", plan, "--", *kill]).returncode
        == -15
        == _go(installed, kill).returncode
    )


def test_front_falls_back_to_python_on_a_pointer_it_cannot_trust(installed, tmp_path):
    f = _front(installed)
    plan = _plan_for(tmp_path, "sh")
    argv = [f["cmd"], "run", "--plan", plan, "--", "sh", "-c", "echo ok; exit 4"]

    def run(expect_python: bool) -> None:
        p = _go(installed, argv)
        assert (p.returncode, p.stdout, _python_started(p)) == (4, b"ok\n", expect_python), p.stderr[-500:]

    run(False) if f["pointer"].exists() else (run(True), run(False))
    good = f["pointer"].read_text()
    lines = good.split("\n")
    # a pointer for another id (other sources), or for the same sources installed elsewhere,
    # is not this front's
    f["pointer"].unlink()
    others = [f["pointer"].with_name(f"pagecast-front-{'0' * 32}-{f['pointer'].name[-16:]}"),
              f["pointer"].with_name(f"pagecast-front-{pointer_key(f['id'], '/elsewhere/bin')}")]  # fmt: skip
    for other in others:
        other.write_text(good)
    run(True)
    assert f["pointer"].read_text() == good  # written again by the Python side
    run(False)
    # a launcher that is gone, a listed source whose size or mtime differs, a truncated pointer
    broken = [
        "\n".join([lines[0], str(tmp_path / "gone"), *lines[2:]]),
        "\n".join([*lines[:3], "1 " + lines[3].split(" ", 1)[1], *lines[4:]]),
        "\n".join(lines[:3]) + "\n",
        good.replace(MAGIC, "pagecast-front 0"),
    ]
    for text in broken:
        f["pointer"].write_text(text)
        run(True)
        assert f["pointer"].read_text() == good
    # an installed source edited in place: the front's id no longer describes it, so it never
    # uses a launcher again until the sources are the ones it was built with
    src = Path(f["native"]) / "launch" / "launch.c"
    original = src.read_bytes()
    try:
        src.write_bytes(original + b"/* edited */\n")
        run(True)
        run(True)  # the Python side does not point the front at a launcher of other sources
        assert f["pointer"].read_text() == good
    finally:
        src.write_bytes(original)
    run(True)  # same content again, new mtime: checked, pointer rewritten
    run(False)
    assert f["pointer"].read_text() != good
    for other in others:
        other.unlink()


def test_front_takes_exactly_the_command_lines_the_python_fast_path_takes(installed, tmp_path):
    """front.c's parser against pagecast.launch.command.planned_argv, the reference."""
    from pagecast.launch.command import planned_argv

    f = _front(installed)
    plan = str(_plan_for(tmp_path, "true"))
    _go(installed, [f["cmd"], "run", "--plan", plan, "--", "true"])  # (re)writes the pointer
    st = str(tmp_path / "st.json")
    cases = [
        ["run", "--plan", plan, "--", "true"],
        ["run", "--json", "--plan", plan, "--", "true"],
        ["run", "--plan", plan, "--plan-status", st, "--json", "--", "true"],
        ["run", f"--plan-status={st}", f"--plan={plan}", "--", "true", "x"],
        ["run", "--plan-status=", f"--plan={plan}", "--", "true"],
        ["run", "--plan", plan, "--", "--", "true"],
        ["run", "--plan=", "--", "true"],
        ["run", "--plan", "--", "true"],
        ["run", "--plan", plan, "--"],
        ["run", "--plan", plan, "true"],
        ["run", "--plan", plan, "--policy", "nextline", "--", "true"],
        ["run", "-h", "--plan", plan, "--", "true"],
        ["run", "--plan", plan, "--plan-status", "--", "true"],
        ["run", "--jsonx", "--plan", plan, "--", "true"],
        ["--plan", plan, "run", "--", "true"],
        ["plan", "--plan", plan, "--", "true"],
    ]
    for args in cases:
        p = _go(installed, [f["cmd"], *args])
        assert _python_started(p) == (planned_argv(args) is None), (args, p.returncode, p.stderr[-300:])
    # the Python side's own conditions: these go to Python whatever the command line
    for extra in (
        {"PAGECAST_NATIVE_DIR": f["native"]},
        {"PAGECAST_PLAN_HANDOVER": "-"},
        {"HOME": "", "XDG_CACHE_HOME": ""},
    ):
        p = _go(installed, [f["cmd"], *cases[0]], extra)
        assert _python_started(p), extra


@needs_perf
def test_front_hands_a_per_fault_plan_to_this_installs_python(installed, tmp_path):
    """The front names pagecast-python's interpreter to the launcher (`--python`): a plan with a
    per-fault file is handed over to the live machinery of this very install."""
    f = _front(installed)
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(16 * 4096))
    plan = tmp_path / "pf.plan"
    write_plan(plan, PlanDoc([FilePlan(str(data), FileIdentity.of(data), "per-fault", arg="nextline")]))
    _go(installed, [f["cmd"], "run", "--plan", _plan_for(tmp_path, "true"), "--", "true"])  # (re)writes the pointer
    cmd = ["sh", "-c", 'cat "$1" > /dev/null; echo done; exit 3', "sh", data]
    r = _go(installed, [f["cmd"], "run", "--plan", plan, "--json", "--", *cmd], {"PYTHONVERBOSE": "1"}, text=True)
    assert r.returncode == 3 and "cannot start" not in r.stderr, r.stderr[-800:]
    rep = json.loads(r.stdout)
    assert rep["exit_status"] == 3 and rep["files"][0]["status"] == "live" and "done" in r.stderr
    # the hand-over's interpreter loaded pagecast from this install (PYTHONVERBOSE names the files)
    # (a module of the package: the path after its last `/pagecast/` is inside the package, so
    # a dependency under a directory that happens to be named pagecast, as a clone is, is not)
    loaded = [
        ln
        for ln in r.stderr.splitlines()
        if ln.startswith("# code object from")
        and "/pagecast/" in ln
        and "site-packages" not in ln.rpartition("/pagecast/")[2]
    ]
    assert loaded and all(str(installed["venv"]) in ln for ln in loaded), [
        ln for ln in loaded if str(installed["venv"]) not in ln
    ][:3] or loaded[:3]
