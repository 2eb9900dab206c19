"""`pagecast predict`: run a trained model over a trace and write its prefetch schedule."""

from __future__ import annotations

import argparse
import time

import numpy as np

from pagecast.cli._common import add_json_flag, format_table, print_json, progress

# Resident bytes per event predicted (its demand columns, inputs and decode state) and per
# schedule row (the row's columns and the blocks they are gathered from), with headroom.
PREDICT_BYTES = 160
ROW_BYTES = 64


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="compute a model's prefetch schedule for a trace",
        description=(
            "Run a model from `pagecast train` over the demand stream of TRACE, causally (the "
            "predictions after event i use only events up to i), and write the schedule "
            "(trigger, t_ns, region, page, score) as Parquet for `pagecast simulate`/`eval`. "
            "Regions are matched to the model's by identity (file path, or kind/order/length), "
            "so a model trained on one run predicts pages of another."
        ),
    )
    p.add_argument("model", metavar="MODEL", help="model file from `pagecast train`")
    p.add_argument("trace", metavar="TRACE", help="trace to predict (.parquet)")
    p.add_argument("-o", "--output", required=True, metavar="SCHEDULE", help="schedule file to write (.parquet)")
    p.add_argument("--top-k", type=int, default=10, help="pages predicted per event (default: 10)")
    p.add_argument(
        "--capacity",
        metavar="PAGES|SIZE|PCT",
        help="on a full access trace, predict only after the events that miss in an LRU tier of this capacity "
        "(what a per-fault predictor is shown; as `pagecast eval --model` does); default: after every event",
    )
    p.add_argument("--csv", metavar="FILE", help="also export AI4Mem's predictions.csv layout")
    p.add_argument(
        "--backend",
        choices=("auto", "numba", "onnx", "onnx-int8", "torchscript", "eager"),
        default="auto",
        help="inference engine (default: auto = numba kernels for one-layer LSTMs, onnx otherwise; onnx-int8 = onnxruntime with int8 weights)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="inference threads, 0 = all cores (default: 1, safe on a shared machine; on an idle one, 2 threads with the numba or onnx backend nearly double the throughput)",
    )
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pagecast.errors import PagecastError
    from pagecast.learn.predict import predict_schedule
    from pagecast.learn.train import set_threads
    from pagecast.trace.reader import open_trace
    from pagecast.trace.schedule import write_schedule

    if args.top_k < 1:
        raise PagecastError("--top-k must be at least 1")
    write_csv = None
    if args.csv:
        try:
            from pagecast.importers.ai4mem_predictions import write_predictions_csv as write_csv
        except ImportError:
            raise PagecastError(
                "--csv needs pagecast.importers.ai4mem_predictions, which this installation lacks"
            ) from None
    from pagecast.learn.sample import count_demand, memory_check

    set_threads(args.threads)
    t0 = time.perf_counter()
    trace = open_trace(args.trace)
    events = None
    if args.capacity:
        from pagecast.sim.misses import has_accesses, miss_events
        from pagecast.sim.simulate import resolve_capacity

        if has_accesses(trace):
            events = miss_events(trace, resolve_capacity(args.capacity, trace))
    n = len(events) if events is not None else count_demand(trace)
    # the schedule is held whole before it is written: refuse in one line what cannot fit
    memory_check(n, 10, what="predicting", per_event=PREDICT_BYTES + ROW_BYTES * args.top_k)
    with progress(None, "predict", unit="ev") as bar:
        sched = predict_schedule(
            args.model, trace, top_k=args.top_k, backend=args.backend, progress=bar.update, events=events
        )
    write_schedule(args.output, sched)
    out = {
        "schedule": args.output,
        "rows": len(sched),
        "events": sched.meta.get("stream_rows", 0),
        "events_with_predictions": int(len(np.unique(sched.trigger))),
        "seconds": time.perf_counter() - t0,
    }
    if write_csv is not None:
        write_csv(sched, args.csv, trace.regions)
        out["csv"] = args.csv
    out["predictions_per_second"] = out["events"] / out["seconds"] if out["seconds"] > 0 else None
    if args.json:
        print_json(out)
    else:
        print(format_table([{"metric": k, "value": v} for k, v in out.items() if v is not None]))
    return 0
