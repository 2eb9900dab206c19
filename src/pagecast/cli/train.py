"""`pagecast train`: learn a page-access model from traces."""

from __future__ import annotations

import argparse
import sys
import time

from pagecast.cli._common import add_json_flag, format_table, print_json, progress, warn_missing_reads


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train an LSTM or Transformer page predictor on traces",
        description=(
            "Train a learned prefetcher on the demand stream (accesses and faults) of one or more "
            "traces. Inputs are region-relative page deltas (a vocabulary of the most frequent "
            "(region, delta) pairs), labels the next pair and the set of pages of the next H events. "
            "With two or more traces the last one validates (leave-one-run-out), else the last part of each trace "
            "(or --val-trace runs); a table of the pages that followed each page in training is merged with the "
            "delta head by a weight fitted on validation (--page-table). "
            "training stops early when validation recall@k stops improving. The model file holds "
            "weights, vocabulary, region table, configuration and metrics."
        ),
    )
    p.add_argument("traces", nargs="+", metavar="TRACE", help="training trace(s) (.parquet)")
    p.add_argument(
        "--target",
        choices=("prefetch", "eviction", "gate"),
        default="prefetch",
        help="prefetch: a page predictor (default); eviction: a network imitating Belady's MIN for the "
        "'learned' eviction (--eviction learned:model=FILE); with two or more traces the last one validates; "
        "gate: a per-event gate over the model and the classic prefetchers (pagecast eval --gate FILE) from "
        "pairs of runs TRAIN1 TEST1 [TRAIN2 TEST2 ...] of programs: an LSTM and the page-successor table learn "
        "each TRAIN run, the gate learns on its TEST run (use two or more programs: its thresholds are cross-fitted)",
    )
    p.add_argument(
        "--capacity",
        action="append",
        metavar="CAP",
        help="--target gate: capacities of the fast tier to fit for (percent of a run's distinct pages, pages or "
        "bytes; repeatable or comma-separated; default: 10%%,50%%)",
    )
    p.add_argument("-o", "--output", required=True, metavar="MODEL", help="model file to write (e.g. model.pt)")
    p.add_argument("--model", choices=("lstm", "transformer"), default="lstm", help="architecture (default: lstm)")
    p.add_argument(
        "--eviction-capacities",
        default=None,
        metavar="F,F,...",
        help="--target eviction: fractions of each run's distinct pages whose MIN decisions label it "
        "(default 0.3,0.5,0.6,0.75,0.9); include the capacity the model will play at",
    )
    p.add_argument(
        "--epochs", type=int, default=None, help="maximum epochs (default: 20; --target eviction: 4; --target gate: 2)"
    )
    p.add_argument(
        "--patience", type=int, default=3, help="stop after this many epochs without improvement (default: 3)"
    )
    _add_model_args(p)
    p.add_argument("--batch", type=int, default=64, help="windows per training step (default: 64)")
    p.add_argument("--lr", type=float, default=3e-3, help="learning rate (default: 3e-3)")
    p.add_argument(
        "--windows-per-epoch",
        type=int,
        default=8192,
        help="training windows drawn per epoch (a subset of a long trace, several passes over a short one); 0 = one pass (default: 8192)",
    )
    _add_validation_args(p)
    _add_inference_args(p)
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads, 0 = all cores (default: 1; small models gain little from more, and lose a lot on shared cores)",
    )
    add_json_flag(p)
    p.set_defaults(func=run)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    """The model's shape and what it reads of each event."""
    p.add_argument(
        "--seq-len", type=int, default=32, help="training window; inference context is seq_len/2..seq_len (default: 32)"
    )
    p.add_argument(
        "--horizon",
        type=int,
        default=10,
        help="H: the multi-label head predicts pages of the next H events; keep H <= the top-k used at inference, or the ranking cannot prefer the nearest pages (default: 10)",
    )
    p.add_argument(
        "--vocab",
        type=int,
        default=256,
        help="classes: the most frequent (region, delta) pairs + 'other' (default: 256)",
    )
    p.add_argument("--min-count", type=int, default=2, help="pairs seen fewer times are 'other' (default: 2)")
    p.add_argument("--embed", type=int, default=32, help="embedding width (LSTM) (default: 32)")
    p.add_argument("--hidden", type=int, default=48, help="LSTM hidden / Transformer width (default: 48)")
    p.add_argument("--layers", type=int, default=1, help="LSTM layers / Transformer blocks (default: 1)")
    p.add_argument("--heads", type=int, default=2, help="Transformer attention heads (default: 2)")
    p.add_argument(
        "--use-ip",
        type=int,
        default=0,
        metavar="BUCKETS",
        help="also feed the instruction pointer, hashed into BUCKETS (default: 0 = off)",
    )


def _add_validation_args(p: argparse.ArgumentParser) -> None:
    """What the model is validated on."""
    p.add_argument(
        "--val-fraction", type=float, default=0.1, help="last fraction of each trace used for validation (default: 0.1)"
    )
    p.add_argument(
        "--test-fraction",
        type=float,
        default=0.0,
        help="last fraction of each trace held out for the test metrics (default: 0)",
    )
    p.add_argument(
        "--val-trace",
        action="append",
        default=[],
        metavar="TRACE",
        help="validate on another run instead (repeatable; split across runs)",
    )
    p.add_argument(
        "--validation",
        choices=("auto", "time"),
        default="auto",
        help="auto: with two or more training traces, hold the last one out whole for validation and early "
        "stopping (leave-one-run-out: it predicts the next run); time: the last --val-fraction of each "
        "trace (default: auto)",
    )


def _add_inference_args(p: argparse.ArgumentParser) -> None:
    """The page table, the memory bound on events, and how pages are ranked."""
    p.add_argument(
        "--page-table",
        type=int,
        default=16,
        metavar="M",
        help="successors kept per (region, page) seen in training, merged with the delta head by a weight "
        "fitted on validation; 0 = deltas only (default: 16)",
    )
    p.add_argument(
        "--max-events",
        type=int,
        default=2_000_000,
        metavar="N",
        help="demand events encoded at most, over all traces: a longer trace is read as stretches spread over "
        "it (said on stderr), which bounds memory to about 0.6 GiB + 0.8 KB per event (default: 2,000,000)",
    )
    p.add_argument("--top-k", type=int, default=10, help="k of the validation recall@k (default: 10)")
    p.add_argument(
        "--head",
        choices=("horizon", "next"),
        default="horizon",
        help="head that ranks pages at inference (default: horizon)",
    )


def _run_eviction(args: argparse.Namespace) -> int:
    from pagecast.errors import PagecastError
    from pagecast.learn.eviction import EvictionTrainConfig, train_eviction

    cfg = EvictionTrainConfig(seed=args.seed, threads=args.threads, lr=args.lr)
    if args.eviction_capacities is not None:
        try:
            caps = tuple(float(c) for c in args.eviction_capacities.split(",") if c.strip())
        except ValueError:
            raise PagecastError(
                f"--eviction-capacities: not a list of fractions: {args.eviction_capacities!r}"
            ) from None
        if not caps or not all(0 < c <= 1 for c in caps):
            raise PagecastError("--eviction-capacities: fractions in (0, 1], e.g. 0.125,0.25")
        cfg.capacities = caps
    if args.epochs is not None:
        if args.epochs < 1:
            raise PagecastError("--epochs must be at least 1")
        cfg.epochs = args.epochs
    runs, val = (args.traces[:-1], args.traces[-1:]) if len(args.traces) > 1 else (args.traces, [])
    t0 = time.perf_counter()
    log = None if args.json else (lambda line: print(line, file=sys.stderr))
    m = train_eviction(runs, args.output, cfg, validate=val, log=log)
    info = {
        "model": args.output,
        "target": "eviction",
        "train_runs": m.info.train_runs,
        "validation_run": val[0] if val else None,
        "train_rows": m.info.train_rows,
        "train_accuracy": round(m.info.train_accuracy, 4),
        "val_accuracy": None if m.info.val_accuracy is None else round(m.info.val_accuracy, 4),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if args.json:
        print_json(info)
    else:
        print(format_table([{"field": k, "value": v} for k, v in info.items() if k != "train_runs"]))
    return 0


def _run_gate(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from pagecast.errors import PagecastError
    from pagecast.sim.gate import GateModel
    from pagecast.sim.gate_fit import GateFitConfig, fit_gate_runs, gate_run, train_model_expert
    from pagecast.sim.misses import has_accesses

    if len(args.traces) % 2:
        raise PagecastError("--target gate takes pairs of runs: TRAIN1 TEST1 [TRAIN2 TEST2 ...]")
    caps = [c.strip() for text in (args.capacity or ["10%,50%"]) for c in text.split(",") if c.strip()]
    windows = 1024 if args.windows_per_epoch == 8192 else args.windows_per_epoch
    cfg = GateFitConfig(seed=args.seed, epochs=2 if args.epochs is None else args.epochs, windows=windows)
    log = None if args.json else (lambda line: print(line, file=sys.stderr))
    t0 = time.perf_counter()
    pairs = list(zip(args.traces[::2], args.traces[1::2]))
    runs = []
    with tempfile.TemporaryDirectory() as d:
        for i, (train, test) in enumerate(pairs):
            model = None
            for cap in caps:
                # on an access trace the model learns the misses at that capacity, as it is shown them
                if model is None or has_accesses(train):
                    model = train_model_expert(train, Path(d) / f"m{i}-{len(runs)}.pt", cap, cfg)
                runs.append(gate_run(f"pair {i + 1}", train, test, cap, model, args.seed))
                if log:
                    log(f"pair {i + 1} at {cap}: {len(runs[-1].stream.page):,} events of {test} shown to the experts")
    gm = GateModel([], {})  # one MLP per capacity (GateModel.states)
    for cap in caps:
        g = fit_gate_runs(runs, cap, cfg, log)
        gm.experts, gm.config = g.experts, g.config
        gm.threshold[cap], gm.budget[cap], gm.online[cap] = g.threshold[cap], g.budget[cap], g.online[cap]
        gm.states[cap] = g.state
    gm.save(args.output)
    info = [
        {"capacity": c, "tau": gm.threshold[c], "budget": round(gm.budget[c], 4), "alpha": gm.online[c]} for c in caps
    ]
    if args.json:
        print_json(
            {
                "gate": args.output,
                "pairs": len(pairs),
                "capacities": info,
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    else:
        print(format_table(info))
        print(f"gate written to {args.output} ({len(pairs)} pairs, {time.perf_counter() - t0:.0f} s)")
    return 0


def run(args: argparse.Namespace) -> int:
    from pagecast.errors import PagecastError
    from pagecast.learn.dataset import DatasetSpec
    from pagecast.learn.train import Architecture, TrainConfig, train_on_traces

    for name in ("epochs", "seq_len", "horizon", "batch", "top_k"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise PagecastError(f"--{name.replace('_', '-')} must be at least 1")
    if args.vocab < 2:
        raise PagecastError("--vocab must be at least 2")
    warn_missing_reads("train", args.traces)
    if args.target == "eviction":
        return _run_eviction(args)
    if args.target == "gate":
        return _run_gate(args)
    args.epochs = 20 if args.epochs is None else args.epochs
    if args.max_events < 4096:
        raise PagecastError("--max-events must be at least 4096")
    t0 = time.perf_counter()
    spec = DatasetSpec(horizon=args.horizon, vocab_size=args.vocab, min_count=args.min_count, ip_buckets=args.use_ip)
    arch = Architecture(
        kind=args.model,
        embed=args.embed,
        hidden=args.hidden,
        layers=args.layers,
        heads=args.heads,
        seq_len=args.seq_len,
    )
    tcfg = TrainConfig(
        epochs=args.epochs,
        patience=args.patience,
        batch=args.batch,
        lr=args.lr,
        seed=args.seed,
        threads=args.threads,
        windows_per_epoch=args.windows_per_epoch,
        top_k=args.top_k,
        head=args.head,
        page_table=args.page_table,
    )
    key = f"val_recall@{args.top_k}"

    def on_epoch(row: dict) -> None:
        if not args.json:
            print(
                f"epoch {row['epoch']}: train loss {row['train_loss']:.3f}  val loss {row['val_loss']:.3f}  "
                f"{key} {row[key]:.3f}  next acc {row['val_next_accuracy']:.3f}  ({row['seconds']:.1f} s)",
                file=sys.stderr,
            )

    res = train_on_traces(
        args.traces,
        args.output,
        spec=spec,
        arch=arch,
        tcfg=tcfg,
        val_traces=args.val_trace,
        val_fraction=args.val_fraction,
        test_fraction=args.test_fraction,
        validation=args.validation,
        on_epoch=on_epoch,
        progress_factory=lambda n, d: progress(n, d, unit="win"),
        max_events=args.max_events,
        on_note=lambda line: print(line, file=sys.stderr),
    )
    out = {
        "model": args.output,
        "kind": args.model,
        "parameters": sum(p.numel() for p in res.model.parameters()),
        "wall_seconds": time.perf_counter() - t0,
        **res.metrics,
        "history": res.history,
    }
    if args.json:
        print_json(out)
    else:
        rows = [{"metric": k, "value": v} for k, v in out.items() if k != "history"]
        print(format_table(rows))
    return 0
