"""Learned-predictor inference speed: per-fault latency (single stream) and batched throughput.

Targets (DESIGN.md §8): p99 ≤ 100 µs per fault through ``Prefetcher.observe`` (the live
loop's call, including token encoding and page decoding), ≥ 200 k predictions/s batched
(``predict_schedule`` on a whole trace: reading, encoding, model, decoding). Baseline in the
same run: PyTorch eager. The model is the default `pagecast train` size (embed 32, hidden
64, vocabulary saturated at 1024 classes, seq_len 32); its weights come from one short
epoch, which does not change the cost.

    PYTHONPATH=src python benchmarks/inference_latency.py [--events 200000] [--faults 20000]
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from pagecast.learn.dataset import DatasetSpec, prepare, read_demand
from pagecast.learn.models import ModelConfig
from pagecast.learn.predict import BACKENDS, load_predictor, predict_schedule, resolve_backend
from pagecast.learn.synthetic import PatternSpec, write_pattern_trace
from pagecast.learn.train import TrainConfig, save_model, train_model


def build_model(tmp: Path, kind: str, events: int, vocab: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    # a long irregular delta sequence so the vocabulary fills up to ``vocab`` classes
    spec = PatternSpec(irregular=tuple(int(x) for x in rng.integers(1, 3000, 4000)))
    trace = write_pattern_trace(tmp / "bench.parquet", events, spec)
    ds = DatasetSpec(horizon=10, vocab_size=vocab, min_count=1)
    data = prepare([read_demand(trace)], ds, val_fraction=0.05)
    cfg = ModelConfig(kind=kind, n_classes=len(data.vocab), n_slots=data.table.unknown, seq_len=32, horizon=10)
    tcfg = TrainConfig(epochs=1, windows_per_epoch=256, max_val_windows=64, threads=1)
    res = train_model(data, cfg, tcfg)
    return save_model(tmp / f"{kind}.pt", res, data, ds, tcfg), trace


def per_fault(model: Path, trace: Path, backend: str, n: int) -> tuple[float, float, float]:
    torch.set_num_threads(1)  # one fault at a time: a thread pool only adds hand-off latency
    s = read_demand(trace).slice(0, n)
    pf = load_predictor(model, top_k=10, backend=backend)
    pf.reset(s.regions)
    t, r, p = s.t_ns.tolist(), s.region.tolist(), s.page.tolist()
    for i in range(min(500, n)):  # warm-up (export, first-call allocations)
        pf.observe(t[i], r[i], p[i], False)
    pf.reset(s.regions)
    lat = np.empty(n, np.int64)
    gc.disable()
    clock = time.perf_counter_ns
    for i in range(n):
        a = clock()
        pf.observe(t[i], r[i], p[i], False)
        lat[i] = clock() - a
    gc.enable()
    return float(np.percentile(lat, 50)) / 1e3, float(np.percentile(lat, 99)) / 1e3, float(lat.mean()) / 1e3


def batched(model: Path, trace: Path, backend: str, threads: int, reps: int = 3) -> float:
    torch.set_num_threads(threads)
    s = read_demand(trace)
    predict_schedule(model, s.slice(0, 5000), backend=backend)  # export + compile outside the timing
    best = float("inf")
    for _ in range(reps):
        a = time.perf_counter()
        predict_schedule(model, trace, backend=backend)
        best = min(best, time.perf_counter() - a)
    return len(s) / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=200_000, help="trace length for the batched figure")
    ap.add_argument("--faults", type=int, default=20_000, help="faults timed one by one")
    ap.add_argument("--kinds", default="lstm,transformer")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1, help="threads for the batched run")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for kind in args.kinds.split(","):
            model, trace = build_model(tmp, kind, args.events, args.vocab)
            from pagecast.learn.train import load_model

            lm = load_model(model)
            print(f"\n== {kind}: {sum(p.numel() for p in lm.model.parameters()):,} parameters, {lm.config.n_classes} classes, "
                  f"{args.faults:,} faults single-stream, {args.events:,} events batched ({args.threads} threads)")
            print(f"{'backend':12} {'p50 µs':>8} {'p99 µs':>8} {'mean µs':>8} {'p99 vs eager':>12} {'batched pred/s':>15} {'vs eager':>9}")
            rows = {}
            step_backends = ("eager",) + tuple(b for b in BACKENDS if b != "eager") + (("numba",) if kind == "lstm" else ())
            for be in step_backends:
                p50, p99, mean = per_fault(model, trace, be, args.faults)
                thr = batched(model, trace, be, args.threads)
                rows[be] = (p50, p99, mean, thr)
            e = rows["eager"]
            for be, (p50, p99, mean, thr) in rows.items():
                bt = f"{thr:15,.0f} {thr / e[3]:8.2f}x"
                print(f"{be:12} {p50:8.1f} {p99:8.1f} {mean:8.1f} {e[1] / p99:11.2f}x {bt}")
            print(f"default backend (auto) for this model: {resolve_backend(lm, 'auto')}")
            print("targets: p99 <= 100 µs per fault; >= 200,000 predictions/s batched")


if __name__ == "__main__":
    main()
