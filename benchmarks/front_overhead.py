"""A plan's run from launch through `pagecast run --plan`, against the launcher binary and
the bare program: cold, interleaved, medians.

The installed `pagecast` is a native front that execs the launcher with no Python in
between while its pointer is current; a stale pointer sends a run through `pagecast-python`
(tens of ms). This times the three on a real command and plan, every run cold
(posix_fadvise DONTNEED on the plan's files), orders rotated round by round, and prints
each median beside the bare program's with the ratio, and in how many rounds each row was
slower than the bare program's run of the same round. With ``--advice MODE`` a fourth row,
the kernel strategy of the real-program harness a plan may equal: ``random`` or
``sequential`` through the advice shim, ``willneed`` as posix_fadvise of the plan's files
from this process just before the launch.

    python benchmarks/front_overhead.py --plan P.plan --rounds 12 [--advice random] -- CMD ARGS...
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from pagecast.bench.coldstart import advice_shim, willneed_files  # noqa: E402
from pagecast.launch.binary import launcher_path  # noqa: E402
from pagecast.plan.format import read_plan  # noqa: E402
from pagecast.util.pagecache import make_cold  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument(
        "--advice",
        choices=("random", "sequential", "willneed"),
        help="add a row with that kernel strategy (random, sequential: the advice shim; willneed: posix_fadvise of "
        "the plan's files just before the launch, as the real-program harness does)",
    )
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    front = shutil.which("pagecast") or sys.exit("front_overhead.py: no `pagecast` on PATH")
    files = [f.path for f in read_plan(a.plan).files]
    rows = {
        "bare program (baseline)": cmd,
        "launcher binary": [launcher_path(), "--restore-signals", a.plan, "--", *cmd],
        "pagecast run --plan": [front, "run", "--plan", a.plan, "--", *cmd],
    }
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the front as a user runs it
    envs = {k: env for k in rows}
    pre: dict[str, list[str]] = {}
    if a.advice == "willneed":
        k = "kernel: WILLNEED plan's files"
        rows[k], envs[k], pre[k] = cmd, env, files
    elif a.advice:
        k = f"kernel: {a.advice} (advice shim)"
        rows[k] = cmd
        envs[k] = {**env, "LD_PRELOAD": advice_shim(), "PAGECAST_ADVICE": a.advice}
    times: dict[str, list[float]] = {k: [] for k in rows}
    names = list(rows)
    for r in range(a.rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            make_cold(files)
            t0 = time.monotonic()
            willneed_files(pre.get(k, []))
            subprocess.run(rows[k], stdout=subprocess.DEVNULL, env=envs[k], check=False)
            times[k].append(time.monotonic() - t0)
    base = statistics.median(times[names[0]])
    print(f"{a.rounds} cold runs each, {len(files)} files made cold; load average {os.getloadavg()[0]:.2f}")
    for k in names:
        m = statistics.median(times[k])
        slower = sum(t > b for t, b in zip(times[k], times[names[0]]))
        print(
            f"{k:30s} {m:.4f} s  ({m - base:+.4f} s, {base / m:.2f}x the bare program; "
            f"slower than it in {slower} of {a.rounds} rounds)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
