"""A mapping read in order beside a locked keep set, in a memory cgroup: advised sequential in
single pages or in large folios.

A memory plan's ``sequential`` advice reaches an unmodified program through the advice shim
(``PAGECAST_ADVICE_FILES``). The program here maps a FILE_MIB file, locks its first LOCK_MIB
through a second mapping (as the live controller locks a keep set), and reads one byte of
every page of the whole mapping PASSES times, in a LIMIT memory cgroup: the part not locked
streams through what the limit leaves. Per round, each from a cold page cache, interleaved,
the shim advising the file:

- ``n``: no advice (the kernel's read-around);
- ``s``: ``MADV_SEQUENTIAL``, what the kernel offers for an in-order reader (the baseline);
- ``l``: ``MADV_SEQUENTIAL`` with ``MADV_HUGEPAGE`` beside it, what a memory plan's
  ``sequential`` advice gives (``pagecast.plan.memory_format.ADVICE``).

Printed: per advice the median seconds a pass after the first, over every round, and the
ratio to ``s``.

    python benchmarks/seq_large_folios.py [--file-mib 600] [--limit-mib 400] [--lock-mib 200]
        [--passes 4] [--rounds 3] [--json]

The file is written once under ``$PAGECAST_CACHE`` (default ~/.cache/pagecast). Needs root
(memory cgroups, mlock beyond the default limit).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from oversubscribed import _write_atomic  # noqa: E402
from pagecast.bench.sparse_weights import cache_dir  # noqa: E402
from pagecast.errors import PagecastError  # noqa: E402
from pagecast.launch.binary import SHIM_SUFFIX, launcher_path  # noqa: E402
from pagecast.util.memcg import MemoryCgroup  # noqa: E402
from pagecast.util.pagecache import make_cold  # noqa: E402
from pagecast.util.preload import preload_list  # noqa: E402

ADVICES = ("n", "s", "l")
BASELINE = "s"

SCAN = r"""
import ctypes, mmap, os, sys, time
import numpy as np
path, lock, passes = sys.argv[1], int(sys.argv[2]) << 20, int(sys.argv[3])
fd = os.open(path, os.O_RDONLY)
m = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
if lock:
    held = mmap.mmap(fd, lock, prot=mmap.PROT_READ)
    addr = np.frombuffer(held, np.uint8).ctypes.data
    if ctypes.CDLL(None, use_errno=True).mlock(ctypes.c_void_p(addr), ctypes.c_size_t(lock)) != 0:
        sys.exit(f"mlock: {os.strerror(ctypes.get_errno())}")
pages = np.frombuffer(m, np.uint8)[::4096]
for _ in range(passes):
    t = time.perf_counter()
    int(pages.sum())
    print(time.perf_counter() - t)
"""


def data_file(mib: int) -> Path:
    import numpy as np

    def make(tmp: Path) -> None:
        g = np.random.default_rng(0)
        with open(tmp, "wb") as f:
            for _ in range(mib // 32):
                f.write(g.integers(0, 255, 32 << 20, np.uint8).tobytes())
            f.flush()
            os.fsync(f.fileno())

    return _write_atomic(cache_dir() / f"seq_scan_{mib}m.bin", make)


def one_run(path: Path, advice: str, limit_mib: int, lock_mib: int, passes: int) -> list[float]:
    st = path.stat()
    env = dict(os.environ)
    env["LD_PRELOAD"] = preload_list(env.get("LD_PRELOAD", ""), launcher_path() + SHIM_SUFFIX, first=True)
    env["PAGECAST_ADVICE_FILES"] = f"{advice}:{st.st_dev}:{st.st_ino}"
    make_cold([path])
    with MemoryCgroup(limit_mib << 20) as cg:
        argv = cg.wrap([sys.executable, "-c", SCAN, str(path), str(lock_mib), str(passes)])
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise PagecastError(f"the scan under advice {advice!r} failed: {proc.stderr.strip()[-300:]}")
    return [float(x) for x in proc.stdout.split()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file-mib", type=int, default=600)
    ap.add_argument("--limit-mib", type=int, default=400)
    ap.add_argument("--lock-mib", type=int, default=200)
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.lock_mib >= a.limit_mib or a.limit_mib >= a.file_mib:
        print("seq_large_folios.py: need --lock-mib < --limit-mib < --file-mib", file=sys.stderr)
        return 2
    try:
        path = data_file(a.file_mib)
        after: dict[str, list[float]] = {x: [] for x in ADVICES}
        for rnd in range(a.rounds):
            for adv in ADVICES[rnd % 3 :] + ADVICES[: rnd % 3]:
                times = one_run(path, adv, a.limit_mib, a.lock_mib, a.passes)
                after[adv].extend(times[1:])
                print(f"round {rnd + 1} {adv}: {' '.join(f'{t:.3f}' for t in times)}", file=sys.stderr)
    except PagecastError as e:
        print(f"seq_large_folios.py: {e}", file=sys.stderr)
        return 1
    base = statistics.median(after[BASELINE])
    rows = [
        {"advice": x, "s_per_pass": statistics.median(after[x]), "vs_sequential": base / statistics.median(after[x])}
        for x in ADVICES
    ]
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "file_mib": a.file_mib,
        "limit_mib": a.limit_mib,
        "lock_mib": a.lock_mib,
        "passes": a.passes,
        "rounds": a.rounds,
        "rows": rows,
    }
    if a.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"{a.file_mib} MiB mapped, first {a.lock_mib} MiB locked, {a.limit_mib} MiB cgroup, {a.passes} passes, "
          f"{a.rounds} rounds, {doc['date']}")  # fmt: skip
    print("| advice (shim letter) | s per pass after the first (median) | vs MADV_SEQUENTIAL |")
    print("|---|---|---|")
    names = {"n": "none (n)", "s": "MADV_SEQUENTIAL (s), the baseline", "l": "MADV_SEQUENTIAL + MADV_HUGEPAGE (l)"}
    for r in rows:
        print(f"| {names[r['advice']]} | {r['s_per_pass']:.3f} | {r['vs_sequential']:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
