"""Simulator configuration and results."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from pagecast.constants import MAX_PREFETCH, PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.util.sizes import is_size, parse_size


def parse_capacity(text: str | int, page_size: int = PAGE_SIZE) -> int:
    """'64MiB' / '2g' (the size grammar of util/sizes.py) → pages; a bare number ('4096',
    '4096p', '4096 pages') is pages."""
    if isinstance(text, int):
        return text
    s = str(text).strip().lower().replace(" ", "")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(p|pages?)?", s)
    if m:
        pages = int(float(m.group(1)))
    elif is_size(s):
        pages = parse_size(s) // page_size
    else:
        raise PagecastError(f"bad capacity {text!r} (use pages, e.g. 4096, or bytes, e.g. 64MiB)")
    if pages < 1:
        raise PagecastError(f"capacity {text!r} is less than one page")
    return pages


def check_capacity_text(text: str) -> None:
    """A capacity's spelling checked without a trace: '25%' (a positive, finite share of
    the trace's pages) or what ``parse_capacity`` takes; else one line."""
    s = str(text).strip()
    if s.endswith("%"):
        try:
            frac = float(s[:-1])
        except ValueError:
            raise PagecastError(f"bad capacity {text!r}") from None
        if not (0 < frac < float("inf")):
            raise PagecastError(f"capacity {text!r} must be positive")
        return
    parse_capacity(s)


@dataclass
class UvmParams:
    """UVM driver model parameters; names follow the nvidia-uvm module parameters."""

    uvm_perf_prefetch_enable: bool = True
    uvm_perf_prefetch_threshold: int = 51  # percent of a subtree that must be resident
    uvm_perf_prefetch_min_faults: int = 1
    uvm_perf_fault_batch_count: int = 256  # faults fetched per batch
    batch_window_ns: int = 20_000  # faults this close to the batch's first one join it (pagecast)
    fault_batch_ns: int = 45_000  # fixed cost of servicing one batch (UVMSmart, GTX 1080 Ti)
    fault_ns: int = 1_000  # extra cost per distinct faulted page in a batch
    copy_latency_ns: int = 1_500  # per contiguous copy (DMA setup)
    pcie_bytes_per_s: float = 12e9  # PCIe 3 x16, large transfers
    big_page_size: int = 64 << 10
    va_block_size: int = 2 << 20
    # pre-eviction (pagecast): chunks kept free after each batch, taken in the eviction's order
    pre_evict_chunks: int = 0
    # a Schedule or its file: each row's page's chunk is evicted ahead of need at its trigger row
    pre_evict_plan: Any = None


@dataclass
class SimConfig:
    """What to simulate. ``capacity`` is in pages (int) or a size string ('64MiB')."""

    capacity: int | str = 1024
    # an eviction spec (lru, fifo, clock, min = Belady, lfu, reuse:trace=T.parquet,
    # learned:model=ev.pt: the eviction registry, policies/evict_*.py) or an Eviction
    eviction: Any = "lru"
    page_size: int | None = None  # default: the trace's page size
    fault_ns: int = 10_000  # fault handling (trap + software) before the transfer
    link_latency_ns: int = 2_000  # one-way latency of the slow tier
    link_bytes_per_s: float = 10e9  # link bandwidth
    max_prefetch: int = MAX_PREFETCH  # pages per trigger at most
    oracle_k: int = 32
    oracle_lookahead: int = 1 << 16  # events the oracle may look ahead
    chunk_rows: int = 1 << 18  # rows per chunk: small enough that a chunk's columns stay in cache between passes
    uvm: bool = False
    uvm_params: UvmParams = field(default_factory=UvmParams)
    log_prefetches: bool = False  # keep (trigger, page) of every prefetch request (ranking metrics)
    log_victims: bool = False  # keep (region, page) of every eviction, in order (result.extra["victims"])
    device_model: str | None = None  # where link_latency_ns / link_bytes_per_s came from (with_device_model)
    # When a schedule's rows fire: "miss" — at their trigger event only if it is a miss of
    # the fast tier or the first use of a prefetched page (where a per-fault predictor is
    # asked; on a full access trace, firing on every access evicts the working set);
    # "all" — at every trigger event.
    schedule_triggers: str = "miss"

    def capacity_pages(self, page_size: int) -> int:
        return parse_capacity(self.capacity, page_size)

    def with_device_model(self, spec: str) -> "SimConfig":
        """This config with the link taken from a measured device (``pagecast calibrate``):
        ``spec`` is a model file or a directory whose device was calibrated."""
        return dataclasses.replace(self, **link_from_device_model(spec), device_model=spec)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class SimResult:
    trace: str
    prefetcher: str
    eviction: str
    capacity_pages: int
    page_size: int
    accesses: int = 0
    hits: int = 0
    faults: int = 0
    late: int = 0  # demanded while its prefetch was still in flight
    prefetches: int = 0  # issued (transferred)
    useful: int = 0  # prefetched pages demanded before eviction (timely or late)
    useless: int = 0  # prefetched pages evicted unused
    unused_at_end: int = 0  # prefetched pages resident and unused when the trace ended
    redundant: int = 0  # requests for pages already resident (not transferred)
    skipped: int = 0  # requests MIN refused (would evict a page needed sooner)
    evictions: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    stall_ns: int = 0
    late_ns: int = 0
    compute_ns: int = 0
    est_time_ns: int = 0
    distinct_pages: int = 0
    fault_batches: int = 0  # UVM mode
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        return self.useful / self.prefetches if self.prefetches else float("nan")

    @property
    def coverage(self) -> float:
        d = self.useful + self.faults
        return self.useful / d if d else float("nan")

    @property
    def timeliness(self) -> float:
        return (self.useful - self.late) / self.useful if self.useful else float("nan")

    @property
    def hit_rate(self) -> float:
        return self.hits / self.accesses if self.accesses else float("nan")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(accuracy=self.accuracy, coverage=self.coverage, timeliness=self.timeliness, hit_rate=self.hit_rate)
        return d


def link_from_device_model(spec: str) -> dict[str, Any]:
    """Link latency and bandwidth of a measured device: bandwidth = its sequential read
    rate; latency = a random 4 KiB read at queue depth 1 (median) less the 4 KiB transfer
    that the simulator adds at that bandwidth."""
    from pagecast.util.device_model import find_model

    m = find_model(spec)
    bw = float(m.seq_read_bytes_per_s)
    transfer_ns = PAGE_SIZE / bw * 1e9
    return {"link_latency_ns": max(int(m.read_latency_ns - transfer_ns), 0), "link_bytes_per_s": bw}
