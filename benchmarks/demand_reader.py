"""The shared demand-stream reader (trace/demand.py) against the hand filters it replaced.

Writes a trace of N rows twice: all demand rows (faults and accesses: the usual trace)
and a mix with 25 % PREFETCH/EVICT/KERNEL rows (a `pagecast run -o` trace). Reads each
one's demand stream (t_ns, region, page, ip) three ways, taking turns round by round:

- ``read_demand_columns`` (this module's reader),
- the filter the learner used (``np.isin`` on every batch, then index every column),
- the simulator's chunk reader (``trace.demand.demand_chunks``, on the shared reader),
  and the same function before the shared reader (``sim/stream.py`` taken from git at
  ``--against``, default the parent of the commit that added trace/demand.py) when git
  can supply it.

Prints rows/s per way (median of --repeat rounds) and the ratio of the shared reader to
the hand filter measured in the same run.

    PYTHONPATH=src python benchmarks/demand_reader.py [--rows 10000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pagecast.trace.demand import demand_chunks, read_demand_columns  # noqa: E402
from pagecast.trace.reader import open_trace  # noqa: E402
from pagecast.trace.regions import Region  # noqa: E402
from pagecast.trace.schema import DEMAND_KINDS, Kind  # noqa: E402
from pagecast.trace.writer import TraceWriter  # noqa: E402

COLS = ["t_ns", "region", "page", "ip"]


def write(path: Path, n: int, mixed: bool) -> None:
    rng = np.random.default_rng(0)
    kind = rng.integers(0, 3, n).astype(np.uint8)
    if mixed:
        other = rng.random(n) < 0.25
        kind[other] = rng.choice([int(Kind.PREFETCH), int(Kind.EVICT), int(Kind.KERNEL)], int(other.sum()))
    with TraceWriter(path, regions=[Region(i, f"r{i}", kind="anon", length=1 << 32) for i in range(4)]) as w:
        w.write(
            t_ns=np.arange(n, dtype=np.int64),
            region=rng.integers(0, 4, n).astype(np.int32),
            page=rng.integers(0, 1 << 20, n).astype(np.int64),
            kind=kind,
            ip=rng.integers(0, 1 << 40, n).astype(np.uint64),
        )


def hand_filter(t) -> int:
    """The learner's filter before the shared reader (learn/dataset.py)."""
    kinds = np.array([int(k) for k in DEMAND_KINDS], np.uint8)
    parts: dict[str, list[np.ndarray]] = {c: [] for c in COLS}
    for b in t.iter_batches([*COLS, "kind"], batch_rows=1 << 20):
        keep = np.isin(b["kind"], kinds)
        for c in parts:
            parts[c].append(b[c][keep])
    cols = {c: np.concatenate(v) for c, v in parts.items()}
    return len(cols["page"])


def shared(t) -> int:
    return len(read_demand_columns(t, COLS)["page"])


def sim_chunks(t) -> int:
    return sum(len(c["page"]) for c in demand_chunks(t))


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def previous_sim_chunks(rev: str | None, tmp: Path):
    """``demand_chunks`` of sim/stream.py at ``rev``, or None when git cannot supply it."""
    root = Path(__file__).resolve().parents[1]
    try:
        if rev is None:
            added = _git(root, "log", "--diff-filter=A", "--format=%H", "--", "src/pagecast/trace/demand.py").split()
            rev = added[-1] + "^"
        src = subprocess.run(
            ["git", "-C", str(root), "show", f"{rev}:src/pagecast/sim/stream.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, IndexError, subprocess.CalledProcessError):
        return None
    f = tmp / "previous_stream.py"
    f.write_text(src)
    spec = importlib.util.spec_from_file_location("previous_stream", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return lambda t: sum(len(c["page"]) for c in mod.demand_chunks(t))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--against",
        default=None,
        help="git revision whose sim/stream.py is the baseline "
        "(default: the parent of the commit that added trace/demand.py)",
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ways = {"shared reader": shared, "hand filter (np.isin)": hand_filter, "simulator chunks": sim_chunks}
    out = {}
    with tempfile.TemporaryDirectory() as d:
        prev = previous_sim_chunks(a.against, Path(d))
        if prev is not None:
            ways["simulator chunks, before"] = prev
        for mixed in (False, True):
            name = "mixed 25% non-demand" if mixed else "all demand"
            path = Path(d) / f"{mixed}.parquet"
            write(path, a.rows, mixed)
            t = open_trace(path)
            counts = {w: f(t) for w, f in ways.items()}  # untimed pass: page cache warm, counts agree
            assert len(set(counts.values())) == 1, counts
            times: dict[str, list[float]] = {w: [] for w in ways}
            for r in range(a.repeat):
                order = list(ways) if r % 2 == 0 else list(reversed(ways))
                for w in order:
                    t0 = time.perf_counter()
                    ways[w](t)
                    times[w].append(time.perf_counter() - t0)
            med = {w: statistics.median(v) for w, v in times.items()}
            out[name] = {
                "rows": a.rows,
                "demand_rows": next(iter(counts.values())),
                "rows_per_s": {w: a.rows / s for w, s in med.items()},
                "shared_vs_hand": med["hand filter (np.isin)"] / med["shared reader"],
            }
            if prev is not None:
                out[name]["sim_chunks_vs_previous"] = med["simulator chunks, before"] / med["simulator chunks"]
    if a.json:
        print(json.dumps(out, indent=2))
        return 0
    for name, r in out.items():
        print(f"{name}: {r['rows']:,} rows, {r['demand_rows']:,} demand")
        for w, v in r["rows_per_s"].items():
            print(f"  {w:24s} {v / 1e6:7.1f} M rows/s")
        print(f"  shared reader / hand filter: {r['shared_vs_hand']:.2f}x")
        if "sim_chunks_vs_previous" in r:
            print(f"  simulator chunks / before the shared reader: {r['sim_chunks_vs_previous']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
