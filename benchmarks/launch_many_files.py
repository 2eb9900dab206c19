"""The native launcher's fixed cost on a plan of many files (what a program pays before it starts).

A plan of N small files (default 750 modules of the Python standard library, each warmed
whole, like git's plan of loose objects) is run in front of `true` and of a short real
program, warm page cache (so the prefetch itself costs nearly nothing and only the
launcher's own work shows), interleaved with the bare program round by round. Prints the
medians and the difference to bare. ``--launcher PATH`` times another build (e.g. an older
commit's ``native/build/pagecast-launch-*``) in the same rounds, as the "before".

    PYTHONPATH=src python benchmarks/launch_many_files.py [--files 750] [--rounds 25] [--launcher OLD] [--json]

``--plan PLAN -- PROG ARGS`` times that plan in front of that program instead (e.g. a plan
from ``pagecast plan`` and the program it was made for, its files already cached).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from pagecast.launch.binary import launcher_path
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, write_plan


def stdlib_files(n: int) -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if p.is_file() and p.stat().st_size > 0)
    if len(files) < n:
        raise SystemExit(f"only {len(files)} files under {root}")
    return files[:n]


def many_file_plan(files: list[Path], out: Path) -> Path:
    doc = PlanDoc([FilePlan(str(f), FileIdentity.of(f), "warm", [(0, -(-f.stat().st_size // 4096))]) for f in files])
    write_plan(out, doc)
    return out


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=750, help="files in the plan (default 750)")
    ap.add_argument("--rounds", type=int, default=25, help="interleaved rounds (default 25)")
    ap.add_argument(
        "--launcher", action="append", default=[], metavar="PATH", help="another launcher build to time too"
    )
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--plan", help="time this plan instead of one of --files standard-library files")
    ap.add_argument("prog", nargs="*", help="with --plan: the program (after --) to run under it")
    args = ap.parse_args()
    if bool(args.plan) != bool(args.prog):
        ap.error("--plan and a program (after --) go together")
    launchers = {"launcher": launcher_path(), **{f"launcher {Path(p).name}": p for p in args.launcher}}
    with tempfile.TemporaryDirectory() as tmp:
        if args.plan:
            plan, programs = args.plan, {" ".join(args.prog)[:40]: args.prog}
        else:
            plan = str(many_file_plan(stdlib_files(args.files), Path(tmp) / "many.plan"))
            programs = {"true": ["true"], "ls -la /usr/lib": ["ls", "-la", "/usr/lib"]}
        times: dict[str, dict[str, list[float]]] = {p: {} for p in programs}
        for _ in range(args.rounds):
            for pname, argv in programs.items():
                times[pname].setdefault("bare", []).append(timed(argv))
                for lname, exe in launchers.items():
                    times[pname].setdefault(lname, []).append(timed([exe, plan, "--", *argv]))
    result = {
        p: {v: {"median_ms": statistics.median(t) * 1e3, "added_ms": (statistics.median(t) - statistics.median(ts["bare"])) * 1e3}
            for v, t in ts.items()}
        for p, ts in times.items()
    }  # fmt: skip
    if args.json:
        print(
            json.dumps(
                {
                    "plan": args.plan,
                    "files": None if args.plan else args.files,
                    "rounds": args.rounds,
                    "results": result,
                },
                indent=2,
            )
        )
        return 0
    what = args.plan or f"a plan of {args.files} files warmed whole"
    print(f"{what}, warm cache, {args.rounds} interleaved rounds (medians)")
    for p, vs in result.items():
        for v, r in vs.items():
            print(f"  {p:40s} {v:40s} {r['median_ms']:7.2f} ms  {r['added_ms']:+7.2f} ms over bare")
    return 0


if __name__ == "__main__":
    sys.exit(main())
