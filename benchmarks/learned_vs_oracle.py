"""Learned prefetching on held-out runs: the fraction of the oracle's fault reduction reached.

Target: ≥ 80 % of the oracle's fault reduction on held-out runs. Baselines
in the same run: no prefetching, every classic prefetcher, the oracle.

fraction = (faults_none − faults_learned) / (faults_none − faults_oracle)

Cases:
  * synthetic — the interleaved pattern of pagecast.learn.synthetic (strided streams plus a
    repeating irregular walk); the model trains on one run and is tested on two other runs
    whose streams start at other pages, at other region bases;
  * long-context — pagecast.learn.synthetic.long_context_spec: an irregular walk of 40 deltas
    interleaved with strided streams in a 61-step order, so the next page depends on events
    dozens back; trained with `pagecast train`'s defaults, judged with `pagecast eval`'s
    ranking metrics (precision@K and recall@K of what was asked at each event, against the
    distinct pages of the next H events) beside the oracle's on the same events, at H = 10
    and 32 (target: within 0.9 of the oracle's, with the oracle's fault count kept);
  * recorded — a real program (workloads/touchpages.c walking a cold file with a repeating
    irregular stride, plus anonymous memory), recorded with perf three times; train on run
    1, test on runs 2 and 3 (skipped when perf is not usable).

The model is `pagecast train`'s default LSTM; the training time of the synthetic run is
printed too (--train-events 1000000 gives the 1 M-access figure).

    PYTHONPATH=src python benchmarks/learned_vs_oracle.py [--train-events 200000] [--no-recorded]
        [--cases synthetic,long-context,recorded]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from pagecast.learn.dataset import DatasetSpec, prepare, read_demand
from pagecast.learn.models import ModelConfig
from pagecast.learn.predict import predict_schedule
from pagecast.learn.ranking import ranking_metrics
from pagecast.learn.synthetic import PatternSpec, long_context_spec, write_pattern_trace
from pagecast.learn.train import TrainConfig, save_model, train_model
from pagecast.policies import available_prefetchers
from pagecast.sim import SimConfig, simulate

DELTAS = np.array([5, 2, 9, 5, 9, 3, 2, 5, 2, 11, 1, 4])


def train(trace: Path, out: Path, kind: str, epochs: int, threads: int) -> tuple[Path, dict]:
    spec = DatasetSpec()
    data = prepare([read_demand(trace)], spec, val_fraction=0.1)
    cfg = ModelConfig(kind=kind, n_classes=len(data.vocab), n_slots=data.table.unknown, horizon=spec.horizon)
    tcfg = TrainConfig(epochs=epochs, threads=threads, windows_per_epoch=8192)
    res = train_model(data, cfg, tcfg)
    return save_model(out, res, data, spec, tcfg), res.metrics


def evaluate(model: Path, held_out: list[Path], capacity: int) -> list[dict]:
    rows = []
    classic = [n for n in available_prefetchers() if n not in ("none", "oracle", "learned")]
    for t in held_out:
        cfg = SimConfig(capacity=capacity)
        none = simulate(t, cfg, "none").faults
        oracle = simulate(t, cfg, "oracle").faults
        sched = predict_schedule(model, t, top_k=10)
        learned = simulate(t, cfg, sched)
        best_name, best = min(((n, simulate(t, cfg, n).faults) for n in classic), key=lambda x: x[1])
        rm = ranking_metrics(sched, t, k=10, horizon=10)
        span = max(none - oracle, 1)
        rows.append(
            {
                "trace": t.name,
                "events": len(read_demand(t)),
                "none": none,
                "oracle": oracle,
                "best_classic": f"{best_name} {best}",
                "learned": learned.faults,
                "late": learned.late,
                "useless": learned.useless,
                "learned_frac": (none - learned.faults) / span,
                "classic_frac": (none - best) / span,
                "recall@10(H=10)": rm["recall_at_k"],
            }
        )
    return rows


def print_rows(title: str, rows: list[dict]) -> None:
    print(f"\n== {title}")
    cols = list(rows[0])
    print("  ".join(f"{c:>16}" for c in cols))
    for r in rows:
        print("  ".join(f"{(f'{v:.3f}' if isinstance(v, float) else str(v)):>16}" for v in r.values()))
    fr = [r["learned_frac"] for r in rows]
    print(
        f"fraction of the oracle's fault reduction: learned {np.mean(fr):.1%} (target 80%), best classic "
        f"{np.mean([r['classic_frac'] for r in rows]):.1%}; ratio learned/best classic "
        f"{np.mean(fr) / max(np.mean([r['classic_frac'] for r in rows]), 1e-9):.2f}x"
    )


def held_out_runs(tmp: Path, name: str, events: int, spec: Callable[..., PatternSpec]) -> list[Path]:
    """Two runs of the pattern ``spec`` makes, its streams starting at other pages, at other
    region bases: what a model trained on the default start must carry over to."""
    return [
        write_pattern_trace(
            tmp / f"{name}_run{i}.parquet",
            events,
            spec(start_pages=sp, base=0x5500_0000_0000 + i * (1 << 36)),
        )
        for i, sp in ((2, [40, 7, 300, 12]), (3, [1000, 0, 5, 77]))
    ]


def synthetic_case(tmp: Path, args) -> None:
    train_trace = write_pattern_trace(tmp / "syn_train.parquet", args.train_events)
    held = held_out_runs(tmp, "syn", args.test_events, PatternSpec)
    t0 = time.perf_counter()
    model, metrics = train(train_trace, tmp / "syn.pt", "lstm", args.epochs, args.threads)
    print(
        f"\ntraining: {args.train_events:,} accesses, {metrics['epochs_run']} epochs, {metrics['train_seconds']:.1f} s "
        f"({time.perf_counter() - t0:.1f} s with data preparation), {args.threads} threads; "
        f"val recall@10 {metrics['val_recall@10']:.3f}"
    )
    print_rows(f"synthetic interleaved pattern, capacity {args.capacity} pages", evaluate(model, held, args.capacity))


def _cli_json(argv: list[str]) -> dict:
    from pagecast.cli import main as cli_main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli_main(argv)
    if rc != 0:
        raise SystemExit(f"pagecast {argv[0]} failed (exit {rc})")
    return json.loads(buf.getvalue())


def long_context_case(tmp: Path, args) -> None:
    """Ranking quality beside the oracle's, on events that need a long context."""
    train_trace = write_pattern_trace(tmp / "long_train.parquet", args.train_events, long_context_spec())
    held = held_out_runs(tmp, "long", args.test_events, long_context_spec)
    model = tmp / "long.pt"
    t0 = time.perf_counter()
    _cli_json(["train", str(train_trace), "-o", str(model), "--threads", str(args.threads), "--json"])
    print(f"\n== long-context delta pattern: `pagecast train` defaults, {time.perf_counter() - t0:.1f} s")
    head = ("run", "H", "P@K model", "P@K oracle", "ratio", "R@K model", "R@K oracle", "ratio", "faults m/o/none")
    print("  ".join(f"{h:>15}" for h in head))
    ratios = []
    for t in held:
        for h in (10, 32):
            out = _cli_json(
                ["eval", str(t), "--model", str(model), "--capacity", str(args.capacity), "--horizon", str(h)]
                + ["--policy", "none", "--json"]
            )
            rows = {r["prefetcher"]: r for r in out["results"] if r["eviction"] == "lru"}
            m = next(r for name, r in rows.items() if name.startswith("model:"))
            o, n = rows["oracle"], rows["none"]
            pr = m["rank_precision_at_k"] / o["rank_precision_at_k"]
            rr = m["rank_recall_at_k"] / o["rank_recall_at_k"]
            ratios += [pr, rr]
            cells = (t.stem, h, m["rank_precision_at_k"], o["rank_precision_at_k"], pr)
            cells += (m["rank_recall_at_k"], o["rank_recall_at_k"], rr, f"{m['faults']}/{o['faults']}/{n['faults']}")
            print("  ".join(f"{(f'{c:.3f}' if isinstance(c, float) else str(c)):>15}" for c in cells))
    print(f"least ratio to the oracle's precision@K / recall@K: {min(ratios):.3f} (target 0.9)")


def recorded_case(tmp: Path, args) -> None:
    try:
        from pagecast.bench.workloads import build_workload
        from pagecast.cli import main as cli_main
        from pagecast.collect.faultmon import read_all
        from pagecast.util.pagecache import drop_file

        read_all(["true"])
    except Exception as e:  # perf not permitted, or the recorder is missing
        print(f"\n== recorded program: skipped ({e})")
        return
    tp = build_workload("touchpages")
    base = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata"  # a disk, not tmpfs
    base.mkdir(parents=True, exist_ok=True)
    data = base / f"bench-walk-{os.getpid()}.bin"
    n = args.walk
    pages = np.concatenate([[0], np.cumsum(DELTAS[np.arange(n - 1) % len(DELTAS)])])
    data.write_bytes(np.random.default_rng(0).integers(0, 256, (int(pages.max()) + 1) * 4096, dtype=np.uint8).tobytes())
    runs = []
    try:
        for i in (1, 2, 3):
            drop_file(data)
            out = tmp / f"rec_run{i}.parquet"
            with contextlib.redirect_stdout(io.StringIO()):  # the recorder's summary repeats the long command
                rc = cli_main(
                    ["record", "-o", str(out), "--", str(tp), str(data), ",".join(map(str, pages)), "--anon", "500"]
                )
            if rc != 0:
                print("\n== recorded program: recording failed")
                return
            runs.append(out)
    finally:
        data.unlink(missing_ok=True)
    model, metrics = train(runs[0], tmp / "rec.pt", "lstm", args.epochs, args.threads)
    print_rows(
        f"recorded touchpages (irregular walk over a cold file), train run 1, capacity {args.capacity} pages",
        evaluate(model, runs[1:], args.capacity),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train-events", type=int, default=200_000)
    ap.add_argument("--test-events", type=int, default=50_000)
    ap.add_argument("--walk", type=int, default=3000, help="file pages touched per recorded run")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--capacity", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-recorded", action="store_true", help="the same as leaving recorded out of --cases")
    ap.add_argument("--cases", default="synthetic,long-context,recorded", help="comma-separated cases to run")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cases = set(args.cases.split(","))
        if "synthetic" in cases:
            synthetic_case(tmp, args)
        if "long-context" in cases:
            long_context_case(tmp, args)
        if "recorded" in cases and not args.no_recorded:
            recorded_case(tmp, args)


if __name__ == "__main__":
    main()
