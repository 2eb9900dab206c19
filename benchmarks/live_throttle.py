"""Per-fault predictors live, with and without the accuracy throttle, against MADV_RANDOM.

On the sparse-weights workload markov and the page-delta LSTM guess few of the next pages
right; issued on time, their wrong guesses are reads on the same disk as the program's
own misses. This interleaves, round by round with a cold page cache each run:
MADV_RANDOM (the baseline), the collector alone ("monitor only"), markov and the LSTM
with the throttle (the default) and with `--no-throttle`. It prints median program wall
time, the ratio to MADV_RANDOM, prefetches issued and used, the fault -> prefetch
latency (p50, median over runs) and where the throttle ended.

    PYTHONPATH=src python benchmarks/live_throttle.py [--rounds 6] [--model M.pt] [--out DIR] [--json]

Without --model it records three training prompts (101-103) and trains one (pagecast train).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from pagecast.bench import sparse_weights as wl
from pagecast.bench.harness import BenchConfig, _live, _plain, record_run, train_learned
from pagecast.live.worker import SourceSpec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--model", help="trained model (default: train one on three recorded prompts)")
    ap.add_argument("--weights", help="weights file (default: the 1 GiB one in ~/.cache/pagecast)")
    ap.add_argument("--out", help="directory for traces and the model (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix="live_throttle."))
    out.mkdir(parents=True, exist_ok=True)
    cfg = BenchConfig(out_dir=out)
    wl.binary()
    weights = wl.ensure_weights(Path(a.weights) if a.weights else None, cfg.size_mib)
    model = Path(a.model) if a.model else None
    if model is None:
        traces = [record_run(cfg, weights, p, out / f"train{p}.parquet") for p in (101, 102, 103)]
        print("[live_throttle] training the LSTM", file=sys.stderr)
        model = train_learned(traces, out / "model.pt", epochs=3)
    specs = {
        "monitor only": SourceSpec(),
        "markov": SourceSpec("policy", "markov"),
        "markov, no throttle": SourceSpec("policy", "markov", throttle=False),
        "LSTM": SourceSpec("model", "model", str(model)),
        "LSTM, no throttle": SourceSpec("model", "model", str(model), throttle=False),
    }
    runs: dict[str, list[dict]] = {"MADV_RANDOM": [], **{k: [] for k in specs}}
    for r in range(a.rounds):
        print(f"[live_throttle] round {r + 1}/{a.rounds}", file=sys.stderr)
        runs["MADV_RANDOM"].append({"wall": _plain(cfg, weights, "random", "random", r).wall_s})
        for k, spec in specs.items():
            row = _live(cfg, weights, spec, k, r)
            live = row.live  # type: ignore[attr-defined]
            p50 = (live.latency_submit_us or {}).get("p50")
            runs[k].append(
                {
                    "wall": row.wall_s,
                    "issued": live.prefetch_pages,
                    "used": live.prefetch_used,
                    "lat_p50_ms": p50 / 1e3 if p50 is not None else None,
                    "throttle": (live.worker or {}).get("throttle", {}).get("degree"),
                }
            )
    base = statistics.median(x["wall"] for x in runs["MADV_RANDOM"])

    def med(v: list[dict], f: str) -> float | None:
        xs = [x[f] for x in v if x.get(f) is not None]
        return statistics.median(xs) if xs else None

    table = [
        {
            "row": k,
            "wall_s": round(med(v, "wall"), 3),
            "vs_madv_random": round(base / med(v, "wall"), 2),
            "issued": med(v, "issued"),
            "used": med(v, "used"),
            "latency_p50_ms": med(v, "lat_p50_ms"),
            "throttle_end": [x.get("throttle") for x in v if x.get("throttle") is not None] or None,
        }
        for k, v in runs.items()
    ]
    if a.json:
        print(json.dumps({"rounds": a.rounds, "model": str(model), "table": table}, indent=2))
        return 0
    print(f"\nbaseline MADV_RANDOM {base:.3f} s (median of {a.rounds} cold runs, interleaved with the rows below)")
    for t in table:
        print(
            f"{t['row']:>20}: {t['wall_s']:.3f} s  {t['vs_madv_random']}x  issued {t['issued']}  used {t['used']}  "
            f"fault->prefetch p50 {t['latency_p50_ms'] if t['latency_p50_ms'] is None else round(t['latency_p50_ms'], 2)} ms  throttle degree at the end {t['throttle_end']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
