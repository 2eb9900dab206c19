"""The learned eviction against LRU, the ``reuse`` baseline and MIN, on held-out runs of real programs.

    python benchmarks/learned_eviction.py --record DIR     # record the runs (valgrind lackey; ~30-60 min on 2 cores)
    python benchmarks/learned_eviction.py DIR [--folds all] [--capacities 50%,75%] [--json]

Programs the project did not write, each run several times with different inputs and
recorded access by access (``pagecast record --lackey``): the sqlite3 shell querying a
generated database, gzip compressing generated text, ``grep -rc`` over source trees,
``git log`` over this repository's history (a fixed commit), and ``sort`` of generated
text. Traces are ``DIR/PROGRAM-RUN.parquet``.

For each program and each held-out run (``--folds last``: the last run; ``all``: every
run in turn, leave-one-run-out), the learned eviction is trained on the program's other
runs (``pagecast.learn.eviction.train_eviction``, the code of ``pagecast train --target
eviction``), ``reuse`` takes the reuse distances of the last training run, and every
eviction plays the held-out run at each capacity (percent of its distinct pages). Per
case it prints the faults of LRU, reuse, learned and MIN, and the share of the LRU–MIN
gap the learned eviction removes, ``(LRU - learned) / (LRU - MIN)``; then the median
share, on how many cases learned is closer to MIN than LRU is, and on how many it
beats reuse. Also the batched inference time per access (scores for the whole run before
it is simulated).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if (REPO / "src" / "pagecast").is_dir():
    sys.path.insert(0, str(REPO / "src"))

from pagecast.learn.eviction import EvictionTrainConfig, train_eviction  # noqa: E402
from pagecast.policies.base import get_eviction  # noqa: E402
from pagecast.sim import SimConfig, simulate  # noqa: E402
from pagecast.sim.simulate import resolve_capacity  # noqa: E402

GIT_COMMIT = "ddddacd"  # a fixed point of this repository's history


def _inputs(data: Path) -> None:
    """The generated inputs: a SQLite database and texts to sort and compress."""
    data.mkdir(parents=True, exist_ok=True)
    db = data / "db.sqlite"
    if not db.exists():
        rng = random.Random(1)
        c = sqlite3.connect(db)
        c.execute("create table t(k integer primary key, a integer, b text)")
        rows = [(i, rng.randrange(1000), "x" * rng.randrange(10, 80)) for i in range(30000)]
        c.executemany("insert into t values(?,?,?)", rows)
        c.execute("create index ia on t(a)")
        c.commit()
        c.close()
    for j in range(4):
        f = data / f"text{j}.txt"
        if not f.exists():
            rng = random.Random(j)
            words = ["alpha", "beta", "gamma", "delta"]
            f.write_text(
                "".join(f"{rng.randrange(10**6)} {rng.choice(words)}{rng.randrange(999)}\n" for _ in range(4000))
            )


def programs(data: Path) -> dict[str, list[list[str]]]:
    """Program → the command of each run (different inputs per run)."""
    db = str(data / "db.sqlite")
    src = REPO / "src" / "pagecast"
    queries = [
        "select count(*), sum(length(b)) from t where a between 100 and 200;",
        "select a, count(*) from t where k between 5000 and 9000 group by a order by 2 desc limit 5;",
        "select sum(a) from t where b like 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx%' and a < 500;",
        "select k, a from t where a = 777 order by k limit 50;",
    ]
    greps = [("simulate", "sim"), ("region", "trace"), ("page", "policies"), ("import", "cli")]
    logs = ["src/pagecast/sim", "src/pagecast/learn", "docs", "native"]
    texts = [str(data / f"text{j}.txt") for j in range(4)]
    return {
        "sqlite": [["sqlite3", db, q] for q in queries],
        "gzip": [["gzip", "-c", t] for t in texts],
        "grep": [["grep", "-rc", pat, str(src / d)] for pat, d in greps],
        "git": [["git", "-C", str(REPO), "log", "--oneline", "-n", "40", GIT_COMMIT, "--", p] for p in logs],
        "sort": [["sort", "-k2", t] for t in texts],
    }


def record(out: Path) -> None:
    data = out / "inputs"
    _inputs(data)
    for prog, runs in programs(data).items():
        for k, cmd in enumerate(runs):
            path = out / f"{prog}-{k}.parquet"
            if path.exists():
                continue
            print(f"recording {path.name}: {' '.join(cmd)}", flush=True)
            subprocess.run(
                [sys.executable, "-m", "pagecast", "record", "--lackey", "-o", str(path), "--", *cmd],
                check=True,
                stdout=subprocess.DEVNULL,
            )


def _faults(trace: Path, cap: int, eviction) -> int:
    return simulate(trace, SimConfig(capacity=cap, eviction=eviction)).faults


def run_case(train: list[Path], test: Path, caps: list[str], cfg: EvictionTrainConfig, tmp: Path) -> list[dict]:
    model = tmp / f"{test.stem}.pt"
    t0 = time.perf_counter()
    train_eviction(train, model, cfg)
    train_s = time.perf_counter() - t0
    out = []
    for spec in caps:
        cap = resolve_capacity(spec, test)
        learned = get_eviction("learned", model=str(model))
        t1 = time.perf_counter()
        r = simulate(test, SimConfig(capacity=cap, eviction=learned))
        sim_s = time.perf_counter() - t1
        row = {
            "case": test.stem,
            "capacity": spec,
            "pages": cap,
            "accesses": r.accesses,
            "lru": _faults(test, cap, "lru"),
            "reuse": _faults(test, cap, f"reuse:trace={train[-1]}"),
            "learned": r.faults,
            "min": _faults(test, cap, "min"),
            "train_s": train_s,
            "learned_sim_s": sim_s,
            "inference_ns_per_access": learned.inference_s * 1e9 / max(r.accesses, 1),
        }
        gap = row["lru"] - row["min"]
        row["gap_share"] = (row["lru"] - row["learned"]) / gap if gap > 0 else None
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path, help="directory of PROGRAM-RUN.parquet traces")
    ap.add_argument("--record", action="store_true", help="record the runs into DIR first")
    ap.add_argument("--folds", choices=["last", "all"], default="last")
    ap.add_argument("--capacities", default="50%,75%")
    ap.add_argument("--programs", default="", help="comma-separated subset")
    ap.add_argument("--max-train", type=int, default=2, help="training runs per case: the ones before the held-out run")
    ap.add_argument(
        "--train-capacities",
        default="0.5,0.75",
        help="fractions of distinct pages whose MIN decisions label the training runs (default %(default)s)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.record:
        record(args.dir)
    runs: dict[str, list[Path]] = {}
    for p in sorted(args.dir.glob("*-*.parquet")):
        runs.setdefault(p.stem.rsplit("-", 1)[0], []).append(p)
    wanted = set(filter(None, args.programs.split(",")))
    caps = [c.strip() for c in args.capacities.split(",") if c.strip()]
    cfg = EvictionTrainConfig(capacities=tuple(float(c) for c in args.train_capacities.split(",")))
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="pagecast-evbench-") as tmp:
        for prog, paths in runs.items():
            if (wanted and prog not in wanted) or len(paths) < 2:
                continue
            held = paths if args.folds == "all" else paths[-1:]
            for test in held:
                train = [p for p in paths if p != test][-args.max_train :]
                for row in run_case(train, test, caps, cfg, Path(tmp)):
                    rows.append(row)
                    share = "no gap" if row["gap_share"] is None else f"{row['gap_share']:.2f}"
                    print(
                        f"{row['case']:<10} {row['capacity']:>4} ({row['pages']:>5} pages, {row['accesses']:>9,} acc): "
                        f"LRU {row['lru']:>7,}  reuse {row['reuse']:>7,}  learned {row['learned']:>7,}  "
                        f"MIN {row['min']:>7,}  gap share {share}  "
                        f"(batched inference {row['inference_ns_per_access']:.0f} ns/access)",
                        flush=True,
                    )
    gapped = [r for r in rows if r["gap_share"] is not None]
    shares = [r["gap_share"] for r in gapped]
    closer = sum(1 for r in gapped if r["learned"] - r["min"] < r["lru"] - r["learned"])
    beats = sum(1 for r in rows if r["learned"] < r["reuse"])
    ties = sum(1 for r in rows if r["learned"] == r["reuse"])
    print(
        f"\n{len(rows)} cases ({len(gapped)} with an LRU–MIN gap): median gap share "
        f"{statistics.median(shares) if shares else float('nan'):.2f}; learned closer to MIN than LRU on "
        f"{closer}/{len(gapped)}; beats reuse on {beats}/{len(rows)} (ties {ties})"
    )
    print(f"machine: {platform.node()} {os.cpu_count()} cpus, python {platform.python_version()}")
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
