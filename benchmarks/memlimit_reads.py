"""Programs that read a file with ``read()`` pass after pass under a memory limit.

Real readers the project did not write (``cat``, ``md5sum``: coreutils, which advise their
input sequential) and a plain ``read()`` loop without advice read a FILE_MIB file PASSES
times in a LIMIT memory cgroup; the kernel's LRU evicts exactly the part needed next, so
every pass reads the whole file again. Plans: ``pagecast plan --memory`` from two
recordings of ``cat`` under the limit (``pagecast record --memory``), once as it builds them
and once with ``--stream-room`` set to the device's window twice (``device-room``: the room
a mapped file gets, what a reader without advice needs). Per
round, each run from a cold page cache, interleaved: the kernel alone (``pagecast run
--memory LIMIT``) and each plan (``pagecast run --memory LIMIT --plan P``).

Printed per program and strategy: the median wall time of the run and MiB read, and the
ratio to the kernel alone.

    PYTHONPATH=src python benchmarks/memlimit_reads.py [--file-mib 200] [--limit 160M]
        [--passes 8] [--rounds 5] [--json]

The file is written under native/build (the repository's disk: tmpfs pages cannot be dropped).
Needs root (memory cgroups).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

from pagecast.util.device_model import read_ahead_bytes_of  # noqa: E402
from pagecast.util.pagecache import make_cold  # noqa: E402

PAGECAST = [sys.executable, "-m", "pagecast"]
PLAIN = """
import sys
for _ in range(int(sys.argv[2])):
    with open(sys.argv[1], "rb", buffering=0) as f:
        while f.read(1 << 17):
            pass
"""


def write_file(path: Path, mib: int) -> None:
    if path.exists() and path.stat().st_size == mib << 20:
        return
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def programs(f: Path, passes: int) -> dict[str, list[str]]:
    loop = lambda tool: ["sh", "-c", f'for i in $(seq {passes}); do {tool} "$0" > /dev/null; done', str(f)]  # noqa: E731
    return {
        "cat": loop("cat"),
        "md5sum": loop("md5sum"),
        "plain read()": [sys.executable, "-c", PLAIN, str(f), str(passes)],
    }


def pagecast(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    r = subprocess.run([*PAGECAST, *args], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        sys.exit(f"memlimit_reads: pagecast {' '.join(args[:3])} failed: {r.stderr.strip()[-400:]}")
    return r


def make_plans(f: Path, limit: str, argv: list[str], work: Path) -> dict[str, Path]:
    traces = []
    for i in range(2):
        make_cold([f])
        t = work / f"rec{i}.parquet"
        pagecast(["record", "--memory", limit, "-o", str(t), "--", *argv])
        traces.append(str(t))
    plans = {"plan": work / "plan.mplan", "device-room": work / "device.mplan"}
    pagecast(["plan", "--memory", limit, *traces, "-o", str(plans["plan"])])
    room = 2 * read_ahead_bytes_of(str(f))
    pagecast(["plan", "--memory", limit, *traces, "-o", str(plans["device-room"]), "--stream-room", str(room)])
    return plans


def timed(f: Path, limit: str, plan: Path | None, argv: list[str]) -> tuple[float, int, int]:
    """(wall s, bytes read, bytes locked) of one cold run."""
    make_cold([f])
    args = ["run", "--json", "--memory", limit, *(["--plan", str(plan)] if plan else []), "--", *argv]
    out = pagecast(args).stdout
    rep = json.loads(out[out.index("{") :])
    return rep["memory"]["wall_s"], rep["memory"]["read_bytes"], (rep.get("controller") or {}).get("pinned_bytes", 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file-mib", type=int, default=200)
    ap.add_argument("--limit", default="160M")
    ap.add_argument("--passes", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("memlimit_reads: needs root (memory cgroups)")
    build = REPO / "native" / "build"
    build.mkdir(parents=True, exist_ok=True)
    f = build / f"reads_{a.file_mib}m.bin"
    write_file(f, a.file_mib)
    progs = programs(f, a.passes)
    with tempfile.TemporaryDirectory(prefix="memlimit-reads-") as td:
        plans = make_plans(f, a.limit, progs["cat"], Path(td))
        strategies: dict[str, Path | None] = {"kernel": None, **plans}
        runs: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
        for rnd in range(a.rounds):
            for prog, argv in progs.items():
                for name, plan in strategies.items():
                    runs.setdefault((prog, name), []).append(timed(f, a.limit, plan, argv))
            print(f"round {rnd + 1} of {a.rounds}", file=sys.stderr)
    rows = []
    for prog in progs:
        base = statistics.median(w for w, _, _ in runs[(prog, "kernel")])
        for name in strategies:
            r = runs[(prog, name)]
            wall = statistics.median(w for w, _, _ in r)
            rows.append(
                {
                    "program": prog,
                    "strategy": name,
                    "wall_s": round(wall, 3),
                    "read_mib": round(statistics.median(b for _, b, _ in r) / 2**20),
                    "locked_mib": round(statistics.median(p for _, _, p in r) / 2**20),
                    "vs_kernel": round(base / wall, 2),
                }
            )
    if a.json:
        print(
            json.dumps({"file_mib": a.file_mib, "limit": a.limit, "passes": a.passes, "rounds": a.rounds, "rows": rows})
        )
        return 0
    print(f"{a.file_mib} MiB read {a.passes} times under {a.limit}, {a.rounds} rounds, medians")
    print("| program | strategy | s a run | MiB read | MiB locked | vs the kernel alone |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['program']} | {r['strategy']} | {r['wall_s']:.3f} | {r['read_mib']} | {r['locked_mib']} | "
            f"{r['vs_kernel']:.2f}× |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
