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

Every run also times the same plan with the option ``issue before`` (plan format 3: the
launcher issues the warm files' WILLNEED requests itself, synchronously, before it execs
the program, instead of a forked low-priority prefetcher beside it) in the same rounds,
and prints its speed relative to the plan issued beside.

``--cold KIB`` measures the case ``issue before`` is for: --files files of KIB KiB each
(made in a temporary directory under ``--dir``, which must be on a disk, not tmpfs), all
read by ``cat``, made cold (posix_fadvise DONTNEED on those files only) before every run;
beside bare, the plan beside and the plan before, it times the kernel strategy the
real-program benchmark calls "WILLNEED whole files" (open, WILLNEED, close per file from
this process, then the program; the clock runs across both), and prints every speed relative to it.

    PYTHONPATH=src python benchmarks/launch_many_files.py --cold 32 --files 750 --rounds 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Callable

from pagecast.bench.coldstart import willneed_files
from pagecast.launch.binary import launcher_path
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, read_plan, write_plan
from pagecast.util.pagecache import drop_file

KERNEL = "kernel: WILLNEED files, then it"


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


def issued_before(plan: str, out: Path) -> Path:
    """The same plan with ``issue before``."""
    doc = read_plan(plan)
    doc.issue = "before"
    write_plan(out, doc)
    return out


def timed(argv: list[str], pre: Callable[[], None] | None = None) -> float:
    t0 = time.perf_counter()
    if pre is not None:
        pre()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def cold_files(n: int, kib: int, where: Path) -> list[Path]:
    files = []
    for i in range(n):
        f = where / f"f{i:05d}.bin"
        f.write_bytes(os.urandom(kib * 1024))
        files.append(f)
    os.sync()  # clean pages, so DONTNEED drops them without a write-back inside a timed run
    return files


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
    ap.add_argument("--cold", type=int, metavar="KIB", help="time --files cold files of KIB KiB read by cat (above)")
    ap.add_argument("--dir", default=str(Path(__file__).resolve().parents[1] / "native" / "build"),
                    help="with --cold: where the files are made (a disk; default the repository's native/build)")  # fmt: skip
    args = ap.parse_args()
    if bool(args.plan) != bool(args.prog) or (args.cold and args.plan):
        ap.error("--plan and a program (after --) go together, and not with --cold")
    exe = launcher_path()
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir if args.cold else None) as tmp:
        cold: list[Path] = []
        if args.plan:
            plan, programs = args.plan, {" ".join(args.prog)[:40]: args.prog}
        elif args.cold:
            cold = cold_files(args.files, args.cold, Path(tmp))
            plan = str(many_file_plan(cold, Path(tmp) / "many.plan"))
            programs = {f"cat {args.files} x {args.cold} KiB": ["cat", *map(str, cold)]}
        else:
            plan = str(many_file_plan(stdlib_files(args.files), Path(tmp) / "many.plan"))
            programs = {"true": ["true"], "ls -la /usr/lib": ["ls", "-la", "/usr/lib"]}
        before = str(issued_before(plan, Path(tmp) / "before.plan"))
        heads = {
            "bare": [],
            "launcher": [exe, plan, "--"],
            **{f"launcher {Path(p).name}": [p, plan, "--"] for p in args.launcher},
            "launcher, issue before": [exe, before, "--"],
        }
        times: dict[str, dict[str, list[float]]] = {p: {} for p in programs}
        for _ in range(args.rounds):
            for pname, argv in programs.items():
                for vname, head in heads.items():
                    for f in cold:
                        drop_file(f, sync=False)
                    times[pname].setdefault(vname, []).append(timed([*head, *argv]))
                if cold:
                    for f in cold:
                        drop_file(f, sync=False)
                    times[pname].setdefault(KERNEL, []).append(timed(argv, lambda: willneed_files(cold)))
    base = KERNEL if args.cold else "launcher"
    result = {
        p: {v: {"median_ms": statistics.median(t) * 1e3, "added_ms": (statistics.median(t) - statistics.median(ts["bare"])) * 1e3,
                "speed_vs": statistics.median(ts[base]) / statistics.median(t)}
            for v, t in ts.items()}
        for p, ts in times.items()
    }  # fmt: skip
    if args.json:
        print(
            json.dumps(
                {
                    "plan": args.plan,
                    "files": None if args.plan else args.files,
                    "cold_kib": args.cold,
                    "speed_vs": base,
                    "rounds": args.rounds,
                    "results": result,
                },
                indent=2,
            )
        )
        return 0
    what = args.plan or f"a plan of {args.files} files warmed whole"
    cache = "cold files (DONTNEED before every run)" if args.cold else "warm cache"
    print(f"{what}, {cache}, {args.rounds} interleaved rounds (medians); speed: {base!r}'s time / this time")
    for p, vs in result.items():
        for v, r in vs.items():
            print(
                f"  {p:24s} {v:32s} {r['median_ms']:8.2f} ms  {r['added_ms']:+8.2f} ms over bare  "
                f"speed {r['speed_vs']:5.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
