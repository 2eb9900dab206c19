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

    python benchmarks/learned_eviction.py --oversub DIR [--cases numeric,sqlite] [--json]

Programs recorded under a memory limit (``pagecast record --memory``) by the
oversubscription benchmark (``benchmarks/oversubscribed.py``: power iteration over a
``numpy.memmap``, a mixture-of-experts reader, SQLite, llama.cpp), laid out as it
leaves them in ``$PAGECAST_CACHE/oversub/work``: ``DIR/CASE/limit-L/{train0,train1,
heldout}.parquet``, two training runs and a held-out run with another input. Each
limit directory is a case: trained on ``train0`` and ``train1``, played on ``heldout``;
``reuse`` takes ``train1``. Beside the network, ``table`` is the MIN table of the
training runs alone (``learned:...,source=table``), and the confusion matrix of the
network's P(friendly) >= 0.5 against MIN's labels on the held-out run is printed.
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

from pagecast.learn.eviction import EvictionTrainConfig, dense_ids, read_run, train_eviction  # noqa: E402
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


def run_case(
    train: list[Path], test: Path, caps: list[str], cfg: EvictionTrainConfig, tmp: Path, name: str | None = None
) -> list[dict]:
    model = tmp / f"{(name or test.stem).replace('/', '_')}.pt"
    t0 = time.perf_counter()
    trained = train_eviction(train, model, cfg)
    train_s = time.perf_counter() - t0
    held = read_run(test)
    out = []
    for spec in caps:
        cap = resolve_capacity(spec, test)
        learned = get_eviction("learned", model=str(model))
        t1 = time.perf_counter()
        r = simulate(test, SimConfig(capacity=cap, eviction=learned))
        sim_s = time.perf_counter() - t1
        distinct = dense_ids(held["region"], held["page"])[1]
        row = {
            "case": name or test.stem,
            "capacity": spec,
            "pages": cap,
            "accesses": r.accesses,
            "lru": _faults(test, cap, "lru"),
            "reuse": _faults(test, cap, f"reuse:trace={train[-1]}"),
            "table": _faults(test, cap, get_eviction("learned", model=str(model), source="table")),
            "learned": r.faults,
            "min": _faults(test, cap, "min"),
            "confusion": trained.confusion(held, cap / max(distinct, 1)).tolist(),
            "train_s": train_s,
            "learned_sim_s": sim_s,
            "inference_ns_per_access": learned.inference_s * 1e9 / max(r.accesses, 1),
        }
        gap = row["lru"] - row["min"]
        row["gap_share"] = (row["lru"] - row["learned"]) / gap if gap > 0 else None
        row["table_gap_share"] = (row["lru"] - row["table"]) / gap if gap > 0 else None
        out.append(row)
    return out


def oversub_cases(root: Path, wanted: set[str]) -> list[tuple[str, list[Path], Path]]:
    """(name, training runs, held-out run) of every ``CASE/limit-L`` directory."""
    out = []
    for d in sorted(root.glob("*/limit-*")):
        runs = [d / f"{n}.parquet" for n in ("train0", "train1", "heldout")]
        if (wanted and d.parent.name not in wanted) or not all(p.exists() for p in runs):
            continue
        out.append((f"{d.parent.name}/{d.name[len('limit-') :]}", runs[:2], runs[2]))
    return out


def _print_row(row: dict) -> None:
    share = "no gap" if row["gap_share"] is None else f"{row['gap_share']:.2f}"
    print(
        f"{row['case']:<14} {row['capacity']:>4} ({row['pages']:>6} pages, {row['accesses']:>9,} acc): "
        f"LRU {row['lru']:>7,}  reuse {row['reuse']:>7,}  table {row['table']:>7,}  learned {row['learned']:>7,}  "
        f"MIN {row['min']:>7,}  gap share {share}  confusion {row['confusion']}  "
        f"(train {row['train_s']:.0f} s, batched inference {row['inference_ns_per_access']:.0f} ns/access)",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path, nargs="?", help="directory of PROGRAM-RUN.parquet traces")
    ap.add_argument("--record", action="store_true", help="record the runs into DIR first")
    ap.add_argument("--oversub", type=Path, help="CASE/limit-L/{train0,train1,heldout}.parquet recordings instead")
    ap.add_argument("--cases", default="", help="with --oversub: comma-separated subset of CASE")
    ap.add_argument("--folds", choices=["last", "all"], default="last")
    ap.add_argument("--capacities", default="50%,75%")
    ap.add_argument("--programs", default="", help="comma-separated subset")
    ap.add_argument("--max-train", type=int, default=2, help="training runs per case: the ones before the held-out run")
    ap.add_argument(
        "--train-capacities",
        default="0.3,0.5,0.6,0.75,0.9",
        help="fractions of distinct pages whose MIN decisions label the training runs (default %(default)s)",
    )
    ap.add_argument("--epochs", type=int, default=EvictionTrainConfig.epochs)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if (args.dir is None) == (args.oversub is None):
        ap.error("give a directory of traces or --oversub DIR")
    caps = [c.strip() for c in args.capacities.split(",") if c.strip()]
    cfg = EvictionTrainConfig(capacities=tuple(float(c) for c in args.train_capacities.split(",")), epochs=args.epochs)
    cases: list[tuple[str, list[Path], Path]] = []
    if args.oversub is not None:
        cases = oversub_cases(args.oversub, set(filter(None, args.cases.split(","))))
    else:
        if args.record:
            record(args.dir)
        runs: dict[str, list[Path]] = {}
        for p in sorted(args.dir.glob("*-*.parquet")):
            runs.setdefault(p.stem.rsplit("-", 1)[0], []).append(p)
        wanted = set(filter(None, args.programs.split(",")))
        for prog, paths in runs.items():
            if (wanted and prog not in wanted) or len(paths) < 2:
                continue
            for test in paths if args.folds == "all" else paths[-1:]:
                cases.append((test.stem, [p for p in paths if p != test][-args.max_train :], test))
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="pagecast-evbench-") as tmp:
        for name, train, test in cases:
            for row in run_case(train, test, caps, cfg, Path(tmp), name):
                rows.append(row)
                _print_row(row)
    gapped = [r for r in rows if r["gap_share"] is not None]
    shares = [r["gap_share"] for r in gapped]
    table_shares = [r["table_gap_share"] for r in gapped]
    closer = sum(1 for r in gapped if r["learned"] - r["min"] < r["lru"] - r["learned"])
    beats = sum(1 for r in rows if r["learned"] < r["reuse"])
    ties = sum(1 for r in rows if r["learned"] == r["reuse"])
    beats_table = sum(1 for r in rows if r["learned"] < r["table"])
    med = statistics.median
    print(
        f"\n{len(rows)} cases ({len(gapped)} with an LRU–MIN gap): median gap share "
        f"{med(shares) if shares else float('nan'):.2f} (table alone {med(table_shares) if shares else float('nan'):.2f}); "
        f"learned closer to MIN than LRU on {closer}/{len(gapped)}; beats reuse on {beats}/{len(rows)} (ties {ties}); "
        f"beats the table alone on {beats_table}/{len(rows)}"
    )
    print(f"machine: {platform.node()} {os.cpu_count()} cpus, python {platform.python_version()}")
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
