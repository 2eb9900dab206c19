"""Are ``plan --measure``'s runs cold? ``grep -r WORD DIR`` over a tree of many small files
that its recordings do not name (recorded with ``--faults-only``, as on a machine without
the read tracepoint): the measured ``default`` time against cold runs made by hand (DONTNEED
of every file under the tree, grep and its libraries, then the same command), and against
warm runs. Prints the three and the ratio measured / hand-made (1.0 = as cold).

    python benchmarks/measure_cold.py [--files 14000] [--runs 5] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pagecast.plan.cold_set import program_files
from pagecast.util.pagecache import make_cold

WORDS = ["page", "cache", "fault", "read", "kernel", "file", "map", "tree", "node", "block", "inode", "buffer"]


def make_tree(root: Path, files: int) -> list[str]:
    rnd = random.Random(1)
    out = []
    for i in range(files):
        d = root / "tree" / f"d{i // 100:03}"
        d.mkdir(parents=True, exist_ok=True)
        lines = [" ".join(rnd.choice(WORDS) for _ in range(10)) for _ in range(rnd.randint(15, 120))]
        if i == files // 2:
            lines.append("zebra")
        p = d / f"f{i % 100:03}.txt"
        p.write_text("\n".join(lines) + "\n")
        out.append(str(p))
    os.sync()
    return out


def timed(argv: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=14000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", action="store_true", help="leave the tree and recordings in place")
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[1] / "native" / "build" / "measure-cold"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        files = make_tree(root, args.files)
        cmd = ["grep", "-r", "zebra", "tree"]
        pagecast = [sys.executable, "-m", "pagecast"]
        traces = []
        for i in range(3):
            t = root / f"r{i}.parquet"
            subprocess.run([*pagecast, "record", "--faults-only", "-o", str(t), "--", *cmd], cwd=root,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)  # fmt: skip
            traces.append(str(t))
        by_hand = [*files, *program_files(cmd, str(root))]
        hand, warm = [], []
        for _ in range(args.runs):
            make_cold(by_hand)
            hand.append(timed(cmd, root))
            warm.append(timed(cmd, root))
        p = subprocess.run(
            [*pagecast, "plan", *traces, "-o", str(root / "g.plan"), "--measure", "--candidates", "default",
             "--rounds", str(args.runs), "--json"],
            cwd=root, capture_output=True, text=True, check=True,
        )  # fmt: skip
        m = json.loads(p.stdout)["measured"]
        runs = [x for c in m["candidates"] if c["name"] == "default" for xs in c["runs_s"].values() for x in xs]
        med = {"measured (default)": statistics.median(runs), "cold by hand": statistics.median(hand),
               "warm": statistics.median(warm)}  # fmt: skip
        print(
            f"grep -r over {args.files} files, {args.runs} runs each ({len(runs)} measured), load {os.getloadavg()[0]:.1f}"
        )
        for k, v in med.items():
            print(f"  {k}: median {v:.3f} s")
        print(
            f"  cold set: {m['cold']['files']} files, argv paths {m['cold']['walked']}, unknown {m['cold']['unknown']}"
        )
        print(f"ratio measured / cold by hand: {med['measured (default)'] / med['cold by hand']:.2f}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
