"""``pagecast calibrate``: measure the storage device and store its cost model."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pagecast.cli._common import add_json_flag, format_table, print_json, progress
from pagecast.errors import PagecastError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="measure the storage device (bandwidth, random reads by queue depth, page-cache fill costs)",
        description=(
            "Measure the device under a directory: sequential read bandwidth, random 4 KiB reads at several "
            "queue depths (O_DIRECT where possible), and the cost of filling the page cache with one page of a "
            "cold file by a major fault, by posix_fadvise(WILLNEED) and by the userfaultfd pager. The model is "
            "stored as JSON in the user's cache directory (one per device) and reused until --remeasure; "
            "`pagecast simulate --device-model DIR|FILE` takes the link latency and bandwidth from it. "
            "Writes (and deletes) one test file of --file-mib in the directory; only that file is made cold."
        ),
        epilog="example: pagecast calibrate --dir /data ; pagecast simulate T.parquet --device-model /data",
    )
    p.add_argument("--dir", default=".", help="a directory on the device to measure (default: the current one)")
    p.add_argument("--remeasure", action="store_true", help="measure again even if a model is stored")
    p.add_argument("--file-mib", type=int, default=256, help="test file size in MiB (default %(default)s)")
    p.add_argument(
        "--seconds", type=float, default=1.5, help="seconds per random-read queue depth (default %(default)s)"
    )
    p.add_argument("--queue-depths", default="1,4,16,32", help="comma-separated (default %(default)s)")
    p.add_argument("--fill-pages", type=int, default=200, help="pages per fill measurement (default %(default)s)")
    p.add_argument("-o", "--output", help="store the model here instead of the cache directory")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pagecast.bench.calibrate import STEPS, CalibrateConfig, calibrate
    from pagecast.util.device_model import load_model, model_path, save_model

    d = Path(args.dir)
    if not d.is_dir():
        raise PagecastError("no such directory", path=d)
    try:
        qds = tuple(int(x) for x in args.queue_depths.split(","))
    except ValueError:
        raise PagecastError(f"--queue-depths: not a list of integers: {args.queue_depths!r}") from None
    if not qds or min(qds) < 1 or 1 not in qds:
        raise PagecastError("--queue-depths must be positive and include 1")
    out = Path(args.output) if args.output else model_path(d)
    if not args.output:
        out.parent.mkdir(parents=True, exist_ok=True)  # pagecast's own cache directory (a user's -o is never created)
    if out.exists() and not args.remeasure:
        model, measured = load_model(out), False
    else:
        cfg = CalibrateConfig(
            d, file_mib=args.file_mib, queue_depths=qds, seconds=args.seconds, fill_pages=args.fill_pages
        )
        with progress(total=STEPS, desc="calibrate", unit="step") as bar:
            model = calibrate(cfg, on_step=lambda name: (bar.set_postfix_str(name), bar.update(1)))
        save_model(model, out)
        measured = True
    if args.json:
        print_json({"model_file": str(out), "measured_now": measured, **model.to_dict()})
        return 0
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(model.measured_unix))
    print(
        f"device {model.device} ({model.path}), measured {when}{'' if measured else ' (stored; --remeasure to measure again)'}"
    )
    print(f"model: {out}")
    print(
        f"sequential read: {model.seq_read_bytes_per_s / 1e6:.0f} MB/s (cold file, 1 MiB reads through the page cache)"
    )
    print()
    print(
        format_table(
            [
                {
                    "queue_depth": r.queue_depth,
                    "iops": round(r.iops),
                    "p50_us": round(r.latency_ns_p50 / 1e3, 1),
                    "p99_us": round(r.latency_ns_p99 / 1e3, 1),
                }
                for r in model.random_reads
            ]
        )
    )
    print(f"(random 4 KiB reads, {'O_DIRECT' if model.direct_io else 'buffered, cold'})")
    print()
    print(
        format_table(
            [
                {
                    "fill_by": f.how,
                    "p50_us": round(f.ns_p50 / 1e3, 1),
                    "p99_us": round(f.ns_p99 / 1e3, 1),
                    "batched_us_per_page": "-"
                    if f.ns_per_page_batched is None
                    else round(f.ns_per_page_batched / 1e3, 1),
                    "note": f.note,
                }
                for f in model.fills
            ]
        )
    )
    return 0
