"""Start-up cost of `pagecast run --plan`: the program's wall time with and without it.

Runs, interleaved round by round (so machine load hits every variant alike):

- bare: the program itself;
- launcher only: the native launcher with a plan that has nothing to do (its own cost);
- run --plan, nothing: `pagecast run --plan` through the repository's `bin/pagecast`
  (the Python command: an editable install's `pagecast` hands every command to it), plan
  with nothing to do;
- installed front / installed pagecast-python: a regular install built here (a wheel of
  this checkout's files in a new virtualenv, as tests/test_packaging.py does; a few seconds
  before the rounds): `pagecast run --plan` through its `pagecast`, the native front
  (native/front/front.c, no Python once its pointer is written, which the warm-up run
  does), and through its `pagecast-python`, the Python command of the same install;
- installed (editable) front: the same through the `pagecast` of an editable install
  (`pip install -e`) of a copy of this checkout in another new virtualenv;
- installed pagecast on PATH: the `pagecast` the caller's PATH finds (the README's
  install), if any;
- run --plan, pip entry point: the same through the console script pip generated for
  the `[project.scripts]` entry `pagecast.cli:main` (with its `import re`), the entry point
  an install had before the native front;
- run --plan, warm: the same with a plan warming a few files (the program's shared
  libraries and a 16 MiB data file, whole), prefetched beside the program;
- launcher, pack: the launcher with a plan naming a page pack (1 MiB of the data file),
  which it runs itself: the pack's header checked, the pager's shim preloaded into the
  program (which never maps the file, so this is the cost a pack adds to any run);
- launcher, pack handed to Python: the same plan with `PAGECAST_PAGER` already set, which
  makes the launcher hand the packs over to `python -m pagecast run --plan`, as every pack
  was before the launcher ran them;
- python -S -c pass: the interpreter without the `site` module (no .pth files, no
  site-packages): what start-up costs before `site`;
- python -c pass: the interpreter's own start-up, the floor of any Python entry point;
- python -c 'import re': that plus the `import re` every pip console script does, the
  floor of any `pagecast ...` command (the rest of "run --plan" is pagecast's).

for two programs: /usr/bin/true and a short real program (`ls -la /usr/lib`: a dynamically
linked program with a few libraries that reads a directory). Prints the median wall time of each variant and its difference
to bare, in wall time and in CPU time (which machine load inflates much less than wall
time), and for each installed `pagecast` its overhead over bare against the target (≤ 2 ms)
and the ratio to the same install's `pagecast-python` (the baseline).

    PYTHONPATH=src python benchmarks/launch_overhead.py [--rounds 30] [--json] [--no-install]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from pagecast.launch.binary import launcher_path
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, write_plan

# What pip writes as the `pagecast` console script (its imports are part of the cost).
CONSOLE_SCRIPT = """import re
import sys
from {module} import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""
OLD_ENTRY = "pagecast.cli"
SCRIPT = Path(__file__).resolve().parents[1] / "bin" / "pagecast"  # pyproject.toml script-files
TARGET_MS = 2.0  # `pagecast run --plan P -- PROG` through the installed command, over the bare program


def _libraries(prog: str) -> list[str]:
    out = subprocess.run(["ldd", prog], capture_output=True, text=True).stdout
    libs = [w for line in out.splitlines() for w in line.split() if w.startswith("/") and os.path.isfile(w)]
    return sorted(set(libs))


def _pack_plan(d: Path, data: Path) -> Path:
    from pagecast.pager.pack import build_pack

    pack = build_pack(data, list(range(256)), d / "data.pack")
    plan = d / "pack.plan"
    write_plan(plan, PlanDoc([FilePlan(str(data), FileIdentity.of(data), "pack", arg=str(pack.path))]))
    return plan


def _plans(d: Path, prog: str, data: Path) -> tuple[Path, Path]:
    nothing = d / "nothing.plan"
    write_plan(nothing, PlanDoc([FilePlan(prog, FileIdentity.of(prog), "nothing", reason="benchmark")]))
    warm = d / "warm.plan"
    files = []
    for f in [*_libraries(prog), str(data)]:
        pages = -(-os.path.getsize(f) // 4096)
        files.append(FilePlan(f, FileIdentity.of(f), "warm", [(0, pages)]))
    write_plan(warm, PlanDoc(files))
    return nothing, warm


def _install(d: Path, editable: bool = False) -> Path | None:
    """A regular (or editable) install of this checkout's files in a new virtualenv under ``d``; its bin/ or None."""
    root = Path(__file__).resolve().parents[1]
    ls = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                        capture_output=True)  # fmt: skip
    if ls.returncode != 0:
        print("not a git checkout: no installed variants", file=sys.stderr)
        return None
    copy = d / "src"
    for rel in filter(None, ls.stdout.decode().split("\0")):
        if (root / rel).is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, copy / rel)
    quiet = {"check": True, "capture_output": True}
    if not editable:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(d), str(copy)], **quiet)  # fmt: skip
    venv = d / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], **quiet)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          text=True, **quiet).stdout.strip()  # fmt: skip
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # this interpreter's packages
    what = ["-e", str(copy)] if editable else [str(next(d.glob("pagecast-*.whl")))]
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps", "--no-index", "--no-build-isolation", *what], **quiet)  # fmt: skip
    return venv / "bin"


def _time(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + sys of the process and its waited-for children;
    the detached prefetcher is not among them). CPU time barely moves with machine load,
    so it shows the start-up work when wall times are dominated by waiting for a core."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{cmd} exited {p.returncode}")
    return dt, ru.ru_utime + ru.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30, help="runs of each variant (interleaved); default 30")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-install", action="store_true", help="skip the installed variants (no wheel built)")
    args = ap.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src")
    # An installed pagecast has its .pyc files; with this set every run would compile
    # pagecast's modules from source again (the warm-up run below writes them).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    launcher = launcher_path()
    ls = shutil.which("ls") or "/bin/ls"
    programs = {"true": ["/usr/bin/true"], "ls -la /usr/lib": [ls, "-la", "/usr/lib"]}
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="pagecast-launch-") as td:
        d = Path(td)
        env["XDG_CACHE_HOME"] = str(d / "cache")  # the install's launcher and pointer (a checkout builds in native/)
        bindir = None if args.no_install else _install(d / "install")
        edbindir = None if args.no_install else _install(d / "editable", editable=True)
        on_path = shutil.which("pagecast")
        script = d / "pagecast"
        script.write_text(SCRIPT.read_text())
        old_script = d / "pagecast-old"
        old_script.write_text(CONSOLE_SCRIPT.format(module=OLD_ENTRY))
        data = Path(tempfile.gettempdir()) / "pagecast_launch_overhead.bin"
        if not data.exists() or data.stat().st_size != 16 << 20:
            data.write_bytes(os.urandom(16 << 20))
        for label, prog in programs.items():
            nothing, warm = _plans(d, os.path.realpath(prog[0]), data)
            packed = _pack_plan(d, data)
            variants = {
                "bare": prog,
                "launcher only": [launcher, str(nothing), "--", *prog],
                "run --plan, nothing": [sys.executable, str(script), "run", "--plan", str(nothing), "--", *prog],
                "run --plan, pip entry point": [
                    sys.executable,
                    str(old_script),
                    "run",
                    "--plan",
                    str(nothing),
                    "--",
                    *prog,
                ],
                "run --plan, warm": [sys.executable, str(script), "run", "--plan", str(warm), "--", *prog],
                "launcher, pack": [launcher, str(packed), "--", *prog],
                "launcher, pack handed to Python": [launcher, "--python", sys.executable, str(packed), "--", *prog],
                **(
                    {
                        "installed front": [str(bindir / "pagecast"), "run", "--plan", str(nothing), "--", *prog],
                        "installed (editable) front": [
                            str(edbindir / "pagecast"),
                            "run",
                            "--plan",
                            str(nothing),
                            "--",
                            *prog,
                        ],
                        "installed pagecast-python": [
                            str(bindir / "pagecast-python"),
                            "run",
                            "--plan",
                            str(nothing),
                            "--",
                            *prog,
                        ],
                    }
                    if bindir and edbindir
                    else {}
                ),
                **(
                    {"installed pagecast on PATH": [on_path, "run", "--plan", str(nothing), "--", *prog]}
                    if on_path
                    else {}
                ),
                "python -S -c pass": [sys.executable, "-S", "-c", "pass"],
                "python -c pass": [sys.executable, "-c", "pass"],
                "python -c 'import re'": [sys.executable, "-c", "import re"],
            }
            times: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
            # an install runs its own package, not this checkout's (PYTHONPATH would take precedence)
            installed_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
            envs = {k: installed_env if k.startswith("installed") else env for k in variants}
            envs["launcher, pack handed to Python"] = {**env, "PAGECAST_PAGER": f"{data}:{16 << 20}"}
            for k, cmd in variants.items():  # warm up caches, the launcher builds and the front's pointer
                _time(cmd, envs[k])
            for _ in range(args.rounds):
                for k, cmd in variants.items():
                    times[k].append(_time(cmd, envs[k]))
            results[label] = {
                k: {
                    "wall_ms": statistics.median(w for w, _ in v) * 1e3,
                    "cpu_ms": statistics.median(c for _, c in v) * 1e3,
                }
                for k, v in times.items()
            }
    if args.json:
        print(json.dumps({"rounds": args.rounds, "median_ms": results, "load": os.getloadavg()}, indent=2))
        return
    print(f"medians of {args.rounds} interleaved runs each; load average {os.getloadavg()[0]:.2f}")
    for label, med in results.items():
        bw, bc = med["bare"]["wall_ms"], med["bare"]["cpu_ms"]
        print(f"\nprogram: {label}   (bare: wall {bw:.2f} ms, cpu {bc:.2f} ms)")
        print(f"  {'variant':28s} {'wall ms':>9s} {'vs bare':>9s} {'cpu ms':>8s} {'vs bare':>9s}")
        for k, v in med.items():
            w, c = v["wall_ms"], v["cpu_ms"]
            print(f"  {k:28s} {w:9.2f} {w - bw:+9.2f} {c:8.2f} {c - bc:+9.2f}")
        if "installed pagecast-python" in med:
            py = med["installed pagecast-python"]["wall_ms"] - bw
            for k in ("installed front", "installed (editable) front", "installed pagecast on PATH"):
                if k not in med:
                    continue
                front = med[k]["wall_ms"] - bw
                verdict = "met" if front <= TARGET_MS else "NOT met"
                print(f"  {k} over bare: {front:+.2f} ms wall (target <= {TARGET_MS:.0f} ms: {verdict}), against "
                      f"{py:+.2f} ms through pagecast-python (baseline): {py / max(front, 1e-3):.1f}x less")  # fmt: skip


if __name__ == "__main__":
    main()
