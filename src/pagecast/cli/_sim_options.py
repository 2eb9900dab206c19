"""Options shared by `pagecast simulate`, `eval` and `sweep` (the simulator's cost model)."""

from __future__ import annotations

import argparse
from typing import Any

from pagecast.sim.config import SimConfig, UvmParams, link_from_device_model


def add_model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cost model (defaults: a far-memory tier, see docs/simulator.md)")
    g.add_argument(
        "--fault-ns",
        type=int,
        default=SimConfig.fault_ns,
        help="fault handling before the transfer (default %(default)s)",
    )
    g.add_argument(
        "--link-latency-ns",
        type=int,
        default=None,
        help=f"slow-tier latency (default {SimConfig.link_latency_ns}, or from --device-model)",
    )
    g.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        metavar="GB/S",
        help=f"link bandwidth (default {SimConfig.link_bytes_per_s / 1e9:g} GB/s, or from --device-model)",
    )
    g.add_argument(
        "--device-model",
        metavar="DIR|FILE",
        help="take link latency and bandwidth from a device measured by `pagecast calibrate` (a model "
        "file, or a directory on the calibrated device); --link-latency-ns/--bandwidth still win",
    )
    g.add_argument(
        "--max-prefetch",
        type=int,
        default=SimConfig.max_prefetch,
        help="pages per trigger at most (default %(default)s)",
    )
    u = p.add_argument_group("UVM mode (--uvm; parameter names after the nvidia-uvm module's)")
    u.add_argument(
        "--uvm",
        action="store_true",
        help="model the NVIDIA UVM driver: 2 MiB VA blocks, fault batches, tree prefetcher, 2 MiB chunk FIFO eviction "
        "(--eviction uvm-lru or a keyed one: min, lfu, reuse, learned)",
    )
    u.add_argument(
        "--uvm-perf-prefetch-threshold",
        type=int,
        default=UvmParams.uvm_perf_prefetch_threshold,
        help="percent (default %(default)s)",
    )
    u.add_argument(
        "--uvm-perf-fault-batch-count",
        type=int,
        default=UvmParams.uvm_perf_fault_batch_count,
        help="faults per batch (default %(default)s)",
    )
    u.add_argument(
        "--uvm-batch-window-ns",
        type=int,
        default=UvmParams.batch_window_ns,
        help="faults this close join a batch (default %(default)s)",
    )
    u.add_argument(
        "--uvm-fault-batch-ns", type=int, default=UvmParams.fault_batch_ns, help="cost per batch (default %(default)s)"
    )
    u.add_argument(
        "--uvm-pcie-gbps",
        type=float,
        default=UvmParams.pcie_bytes_per_s / 1e9,
        help="PCIe bandwidth GB/s (default %(default)s)",
    )
    u.add_argument(
        "--uvm-pre-evict-chunks",
        type=int,
        default=0,
        metavar="N",
        help="pre-eviction: after each batch, evict in the eviction's order until N chunks are free, "
        "copies off the critical path (default 0: off)",
    )
    u.add_argument(
        "--uvm-pre-evict-plan",
        metavar="PLAN",
        help="pre-eviction plan: a schedule (.parquet) whose rows' chunks are evicted at their trigger rows",
    )


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """SimConfig keyword arguments from the parsed options."""
    link: dict[str, Any] = {
        "link_latency_ns": SimConfig.link_latency_ns,
        "link_bytes_per_s": SimConfig.link_bytes_per_s,
    }
    if getattr(args, "device_model", None):
        link = link_from_device_model(args.device_model) | {"device_model": args.device_model}
    if args.link_latency_ns is not None:
        link["link_latency_ns"] = args.link_latency_ns
    if args.bandwidth is not None:
        link["link_bytes_per_s"] = args.bandwidth * 1e9
    return dict(
        fault_ns=args.fault_ns,
        **link,
        max_prefetch=args.max_prefetch,
        uvm=args.uvm,
        uvm_params=UvmParams(
            uvm_perf_prefetch_threshold=args.uvm_perf_prefetch_threshold,
            uvm_perf_fault_batch_count=args.uvm_perf_fault_batch_count,
            batch_window_ns=args.uvm_batch_window_ns,
            fault_batch_ns=args.uvm_fault_batch_ns,
            pcie_bytes_per_s=args.uvm_pcie_gbps * 1e9,
            pre_evict_chunks=getattr(args, "uvm_pre_evict_chunks", 0),
            pre_evict_plan=getattr(args, "uvm_pre_evict_plan", None),
        ),
    )


SUMMARY_COLUMNS = [
    "prefetcher",
    "eviction",
    "capacity_pages",
    "faults",
    "hits",
    "late",
    "prefetches",
    "useful",
    "useless",
    "accuracy",
    "coverage",
    "stall_ms",
    "est_time_ms",
    "speedup",
]


def summary_row(d: dict[str, Any], baseline_est_ns: int | None = None) -> dict[str, Any]:
    row = {c: d.get(c) for c in SUMMARY_COLUMNS if c in d}
    row["stall_ms"] = d["stall_ns"] / 1e6
    row["est_time_ms"] = d["est_time_ns"] / 1e6
    row["accuracy"] = d["accuracy"]
    row["coverage"] = d["coverage"]
    if baseline_est_ns:
        row["speedup"] = baseline_est_ns / d["est_time_ns"] if d["est_time_ns"] else float("nan")
    return row
