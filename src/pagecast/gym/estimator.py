"""Differential-tracing estimator of a placement's run time (MemAI, ISC'22; docs/gym.md).

Two traces of the same program are recorded, one with all data in the slow tier (times
T_d) and one with all data in the fast tier (T_h). Both are cut into *matching* windows,
i.e. windows that cover the same work of the program. A placement that serves N_h of a
window's N accesses from the fast tier is estimated at

    T = T_d - (T_d - T_h) * N_h / N

which we evaluate as the equivalent convex form ``T_d*(1-f) + T_h*f`` (f = N_h/N) so that
f = 0 gives T_d and f = 1 gives T_h bit for bit.

Window matching (``WindowConfig.mode``):

* ``accesses`` — every ``size`` demand rows of the slow trace form a window; the fast
  trace is cut at the same demand-row indices. A deterministic program records the same
  demand stream in both runs, so index k means the same point of the program. When the
  two streams differ in length (sampled traces), the fast boundaries are placed at the
  same *fraction* of the stream and ``Windows.matched`` says ``proportional``.
* ``phases`` — a window starts at every KERNEL row (GPU kernel launches, or any source
  that marks program phases with them) or, in a trace without KERNEL rows, at the first
  demand row at or after each ``start_ns`` of the trace's kernels list (where the MemAI
  importer keeps the application's phases); the i-th phase of one trace matches the i-th
  of the other. The traces must hold the same number of phases.

Time matching is deliberately not offered: the fast run does the same work in less time,
so equal time slices do not cover the same work.

Window time: a window spans from the timestamp of its first demand row to the first
demand row of the next window (the last one to the last row), so the windows tile the run
and the all-slow estimate is exactly ``t_last - t_first`` of the slow trace.

Access counts N and N_h come from the slow trace (the run whose placement the estimate
starts from). A window without accesses cannot tell which placement helps it; it is
interpolated by the fraction of the touched pages held in the fast tier, which keeps the
all-slow / all-fast identities exact.

Single-trace mode (``Windows.from_single``): only one trace exists, so the tier times come
from a per-access latency cost model (``CostModel``): with the trace timestamps taken as
compute time, T_d = span + n*slow_ns and T_h = span + n*fast_ns per window (n = rows ×
sample period). The formula above then reduces to span + N_slow*slow_ns + N_fast*fast_ns.
With ``timestamps="slow"`` the trace is taken as an all-slow run and T_h = max(span -
n*(slow_ns - fast_ns), 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.trace.demand import demand_mask
from pagecast.trace.keys import PAGE_MASK, page_keys
from pagecast.trace.reader import Trace, open_trace
from pagecast.trace.regions import Region
from pagecast.trace.schema import Kind


def page_key(region: np.ndarray | int, page: np.ndarray | int) -> np.ndarray | int:
    # a page beyond 2**PAGE_BITS (a raw kernel address) aliases instead of changing the region
    return page_keys(region, np.asarray(page, dtype=np.int64) & PAGE_MASK)


@dataclass
class WindowConfig:
    mode: str = "accesses"  # "accesses" | "phases"
    size: int = 10_000  # demand rows per window in "accesses" mode

    def __post_init__(self) -> None:
        if self.mode not in ("accesses", "phases"):
            raise PagecastError(f"unknown window mode {self.mode!r} (accesses, phases)")
        if self.mode == "accesses" and self.size < 1:
            raise PagecastError(f"window size must be >= 1, got {self.size}")


@dataclass
class CostModel:
    """Per-access latencies for single-trace mode (ns per demand row × sample_period)."""

    slow_ns: float = 100.0  # e.g. DDR load-to-use latency
    fast_ns: float = 30.0  # e.g. HBM / local tier; only the difference matters for ranking
    sample_period: float = 1.0  # accesses one trace row stands for (PEBS sampling)
    timestamps: str = "compute"  # "compute": timestamps exclude memory time; "slow": recorded all-slow

    def __post_init__(self) -> None:
        if self.timestamps not in ("compute", "slow"):
            raise PagecastError(f"unknown timestamp meaning {self.timestamps!r} (compute, slow)")
        if self.slow_ns < self.fast_ns:
            raise PagecastError(f"slow tier latency {self.slow_ns} ns is below the fast tier's {self.fast_ns} ns")


@dataclass
class Demand:
    """The demand stream of a trace: rows of DEMAND_KINDS in file order, plus phase markers."""

    t_ns: np.ndarray
    region: np.ndarray
    page: np.ndarray
    markers: np.ndarray  # for each KERNEL row: number of demand rows before it
    phase_starts_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # kernels list start_ns
    regions: list[Region] = field(default_factory=list)
    page_size: int = PAGE_SIZE
    path: Path | None = None

    def __len__(self) -> int:
        return len(self.t_ns)


def load_demand(trace: Trace | str | Path, batch_rows: int = 1 << 21, times_only: bool = False) -> Demand:
    """Read the demand stream of a trace in row-group batches (vectorised filter per batch).

    ``times_only`` skips the region/page columns (the fast trace of a pair only lends its
    timestamps)."""
    tr = trace if isinstance(trace, Trace) else open_trace(trace)
    cols = ["t_ns", "kind"] if times_only else ["t_ns", "region", "page", "kind"]
    parts: dict[str, list[np.ndarray]] = {c: [] for c in cols if c != "kind"}
    marks: list[np.ndarray] = []
    seen = 0
    for b in tr.iter_batches(cols, batch_rows=batch_rows):
        kind = b["kind"]
        is_demand = demand_mask(kind)
        is_mark = kind == np.uint8(Kind.KERNEL)
        if is_mark.any():
            # demand rows before each marker = demand rows so far + demand rows earlier in the batch
            before = np.cumsum(is_demand) - is_demand
            marks.append(seen + before[is_mark])
        n_dem = int(np.count_nonzero(is_demand))
        every = n_dem == len(kind)
        for c in parts:
            parts[c].append(b[c] if every else b[c][is_demand])
        seen += n_dem

    def cat(xs: list[np.ndarray], dt: Any) -> np.ndarray:
        if not xs:
            return np.zeros(0, dt)
        return (xs[0] if len(xs) == 1 else np.concatenate(xs)).astype(dt, copy=False)

    t = cat(parts["t_ns"], np.int64)
    return Demand(
        t_ns=t,
        region=cat(parts["region"], np.int32) if not times_only else np.zeros(0, np.int32),
        page=cat(parts["page"], np.int64) if not times_only else np.zeros(0, np.int64),
        markers=cat(marks, np.int64),
        phase_starts_ns=np.array(sorted(int(k.get("start_ns", 0)) for k in tr.kernels), dtype=np.int64),
        regions=list(tr.regions),
        page_size=tr.page_size,
        path=tr.path,
    )


def _boundaries(d: Demand, cfg: WindowConfig) -> np.ndarray:
    """Start indices of the windows in the demand stream, plus len(d) at the end."""
    n = len(d)
    if cfg.mode == "accesses":
        return np.append(np.arange(0, n, cfg.size, dtype=np.int64), n)
    if len(d.markers):
        marks = d.markers
    else:
        # no KERNEL rows: phases listed in the trace's kernels metadata (e.g. MemAI imports)
        marks = np.searchsorted(d.t_ns, d.phase_starts_ns, side="left")
    starts = np.unique(np.concatenate([[0], marks[marks < n]]))
    return np.append(starts, n).astype(np.int64)


def _window_spans(t: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Time from each window's first row to the next window's first row (last: to the last row)."""
    if len(t) == 0:
        return np.zeros(len(bounds) - 1)
    edge = np.minimum(bounds, len(t) - 1)
    times = t[edge].astype(np.float64)
    return np.diff(times)


_DENSE_MIN = 1 << 22  # grid cells always allowed (32 MiB); beyond, at most 4 cells per access


def _touched_pages(region: np.ndarray, page: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique (region, page) keys of the accesses and each access's index into them.

    Region-relative pages are small and dense, so a grid over each region's page span
    numbers them in O(n); raw addresses (region -1) with a huge span fall back to a sort.
    """
    from pagecast.gym._kernels import dense_units, region_page_bounds

    if len(region) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    region = np.ascontiguousarray(region, dtype=np.int64)
    page = np.ascontiguousarray(page, dtype=np.int64)
    if region.min() < -1:
        raise PagecastError(f"bad region id {int(region.min())} in the trace")
    lo, hi = region_page_bounds(region, page, int(region.max()) + 2)
    widths = np.where(hi >= 0, hi - lo + 1, 0)
    span = int(widths.sum())
    if span <= max(_DENSE_MIN, 4 * len(region)) and lo.min() >= 0:
        offset = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
        inverse, u_region, u_page = dense_units(region, page, offset, np.where(hi >= 0, lo, 0), span)
        return page_key(u_region, u_page), inverse
    keys = page_key(region, page)
    srt = np.sort(keys)
    unit_keys = srt[np.r_[True, srt[1:] != srt[:-1]]]
    return unit_keys, np.searchsorted(unit_keys, keys).astype(np.int64)


@dataclass
class Windows:
    """Preprocessed windows: per-window tier times and sparse per-unit access counts.

    A *unit* is a touched page (``unit_keys`` holds its (region, page) key); ``Windows.chunked``
    gives coarser units. The counts are COO entries (window ``win``, unit ``unit``, ``count``)
    in window order.
    """

    t_slow: np.ndarray  # float64[W] all-slow time of each window, ns
    t_fast: np.ndarray  # float64[W] all-fast time of each window, ns
    n: np.ndarray  # int64[W] demand rows in each window (slow trace)
    win: np.ndarray  # int64[nnz]
    unit: np.ndarray  # int64[nnz]
    count: np.ndarray  # int64[nnz]
    unit_keys: np.ndarray  # int64[U] page key of each unit (first page for chunks)
    unit_pages: np.ndarray  # int64[U] pages in each unit
    page_size: int = PAGE_SIZE
    regions: list[Region] = field(default_factory=list)
    matched: str = "exact"  # how the fast windows were matched: exact | proportional | cost-model
    info: dict[str, Any] = field(default_factory=dict)

    # -- construction --------------------------------------------------------------
    @classmethod
    def _build(cls, d: Demand, bounds: np.ndarray, t_slow: np.ndarray, t_fast: np.ndarray, **kw: Any) -> "Windows":
        from pagecast.gym._kernels import window_counts

        unit_keys, inverse = _touched_pages(d.region, d.page)
        win, unit, cnt = window_counts(bounds.astype(np.int64), inverse, len(unit_keys))
        return cls(
            t_slow=t_slow,
            t_fast=t_fast,
            n=np.diff(bounds).astype(np.int64),
            win=win,
            unit=unit,
            count=cnt,
            unit_keys=unit_keys,
            unit_pages=np.ones(len(unit_keys), dtype=np.int64),
            page_size=d.page_size,
            regions=d.regions,
            **kw,
        )

    @classmethod
    def from_pair(
        cls, slow: Demand | Trace | str | Path, fast: Demand | Trace | str | Path, cfg: WindowConfig | None = None
    ) -> "Windows":
        cfg = cfg or WindowConfig()
        ds = slow if isinstance(slow, Demand) else load_demand(slow)
        df = fast if isinstance(fast, Demand) else load_demand(fast, times_only=True)
        for d, what in ((ds, "slow"), (df, "fast")):
            if len(d) == 0:
                raise PagecastError(f"the {what} trace has no demand rows (ACCESS or fault kinds)", path=d.path)
        bs = _boundaries(ds, cfg)
        matched = "exact"
        if cfg.mode == "accesses":
            if len(df) == len(ds):
                bf = bs
            else:
                matched = "proportional"
                bf = np.round(bs.astype(np.float64) * (len(df) / len(ds))).astype(np.int64)
        else:
            bf = _boundaries(df, cfg)
            if len(bf) != len(bs):
                raise PagecastError(
                    f"phase windows do not match: {len(bs) - 1} phases in the slow trace, "
                    f"{len(bf) - 1} in the fast trace",
                    path=df.path,
                )
        return cls._build(
            ds,
            bs,
            _window_spans(ds.t_ns, bs),
            _window_spans(df.t_ns, bf),
            matched=matched,
            info={"mode": "pair", "window": cfg.mode, "slow": str(ds.path), "fast": str(df.path)},
        )

    @classmethod
    def from_single(
        cls, trace: Demand | Trace | str | Path, cfg: WindowConfig | None = None, cost: CostModel | None = None
    ) -> "Windows":
        cfg = cfg or WindowConfig()
        cost = cost or CostModel()
        d = trace if isinstance(trace, Demand) else load_demand(trace)
        if len(d) == 0:
            raise PagecastError("the trace has no demand rows (ACCESS or fault kinds)", path=d.path)
        b = _boundaries(d, cfg)
        span = _window_spans(d.t_ns, b)
        acc = np.diff(b).astype(np.float64) * cost.sample_period
        if cost.timestamps == "compute":
            t_slow, t_fast = span + acc * cost.slow_ns, span + acc * cost.fast_ns
        else:
            t_slow, t_fast = span, np.maximum(span - acc * (cost.slow_ns - cost.fast_ns), 0.0)
        return cls._build(
            d,
            b,
            t_slow,
            t_fast,
            matched="cost-model",
            info={
                "mode": "single",
                "window": cfg.mode,
                "trace": str(d.path),
                "cost": {
                    "slow_ns": cost.slow_ns,
                    "fast_ns": cost.fast_ns,
                    "sample_period": cost.sample_period,
                    "timestamps": cost.timestamps,
                },
            },
        )

    # -- shape ---------------------------------------------------------------------
    @property
    def n_windows(self) -> int:
        return len(self.t_slow)

    @property
    def n_units(self) -> int:
        return len(self.unit_keys)

    def chunked(self, n_chunks: int) -> "Windows":
        """Group the touched pages, in (region, page) order, into ``n_chunks`` contiguous chunks
        of (nearly) equal page counts. The chunk count is fixed whatever the trace, so an agent
        trained on one trace sees the same observation shape on another."""
        U = self.n_units
        if n_chunks < 1:
            raise PagecastError(f"need at least one chunk, got {n_chunks}")
        chunk_of = (np.arange(U, dtype=np.int64) * n_chunks) // max(U, 1)
        return self.regroup(chunk_of, n_chunks)

    def regroup(self, unit_to_group: np.ndarray, n_groups: int) -> "Windows":
        """Merge units into groups (``unit_to_group[u]``); counts add up, pages add up."""
        g = np.asarray(unit_to_group, dtype=np.int64)
        W = self.n_windows
        dense = np.bincount(self.win * n_groups + g[self.unit], weights=self.count, minlength=W * n_groups)
        cell = np.flatnonzero(dense)
        pages = np.bincount(g, weights=self.unit_pages, minlength=n_groups).astype(np.int64)
        first = np.full(n_groups, -1, dtype=np.int64)
        # units are in key order, so the last write per group must be its smallest key: write reversed
        first[g[::-1]] = self.unit_keys[::-1]
        return Windows(
            self.t_slow,
            self.t_fast,
            self.n,
            cell // n_groups,
            cell % n_groups,
            dense[cell].astype(np.int64),
            first,
            pages,
            self.page_size,
            self.regions,
            self.matched,
            dict(self.info, groups=n_groups),
        )

    def dense_counts(self, dtype: Any = np.float32) -> np.ndarray:
        """(windows × units) access counts; for chunked windows where this is small."""
        out = np.zeros((self.n_windows, self.n_units), dtype=dtype)
        np.add.at(out, (self.win, self.unit), self.count)
        return out

    def unit_totals(self) -> np.ndarray:
        return np.bincount(self.unit, weights=self.count, minlength=self.n_units)

    # -- estimation ----------------------------------------------------------------
    def fast_fraction(self, fast_units: np.ndarray) -> np.ndarray:
        """f = N_h / N per window for a boolean placement over units."""
        mask = np.asarray(fast_units, dtype=bool)
        if mask.shape != (self.n_units,):
            raise ValueError(f"placement has shape {mask.shape}, expected ({self.n_units},)")
        n_h = np.bincount(self.win, weights=self.count * mask[self.unit], minlength=self.n_windows)
        total_pages = self.unit_pages.sum()
        empty_f = float((self.unit_pages * mask).sum() / total_pages) if total_pages else 0.0
        with np.errstate(invalid="ignore", divide="ignore"):
            f = np.where(self.n > 0, n_h / np.maximum(self.n, 1), empty_f)
        return f

    def estimate_windows(self, fast_units: np.ndarray) -> np.ndarray:
        f = self.fast_fraction(fast_units)
        return self.t_slow * (1.0 - f) + self.t_fast * f

    def estimate(self, fast_units: np.ndarray) -> float:
        return float(self.estimate_windows(fast_units).sum())

    @property
    def all_slow_time(self) -> float:
        return float(self.t_slow.sum())

    @property
    def all_fast_time(self) -> float:
        return float(self.t_fast.sum())

    # -- placements ----------------------------------------------------------------
    def mask_page_ranges(self, ranges: Sequence[tuple[int, int, int]]) -> np.ndarray:
        """Units whose first page lies in any (region, start, end) half-open page range."""
        mask = np.zeros(self.n_units, dtype=bool)
        for region, start, end in ranges:
            lo = np.searchsorted(self.unit_keys, page_key(region, start), side="left")
            hi = np.searchsorted(self.unit_keys, page_key(region, end), side="left")
            mask[lo:hi] = True
        return mask

    def mask_address_ranges(self, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
        """Pages overlapping any [lo, hi) virtual address range of the recorded (slow) run."""
        shift = self.page_size.bit_length() - 1
        page_ranges: list[tuple[int, int, int]] = []
        for lo, hi in ranges:
            for r in self.regions:
                if not r.base or not r.length:
                    continue
                a, b = max(lo, r.base), min(hi, r.base + r.length)
                if a < b:
                    page_ranges.append((r.id, (a - r.base) // r.page_size, -(-(b - r.base) // r.page_size)))
            # rows outside any region keep the raw page number (addr >> page shift)
            page_ranges.append((-1, lo >> shift, -(-hi >> shift)))
        return self.mask_page_ranges(page_ranges)

    def mask_hottest(self, fraction: float) -> np.ndarray:
        """The hottest ``fraction`` of touched pages by accesses over the whole run."""
        if not 0.0 <= fraction <= 1.0:
            raise PagecastError(f"fraction must be within [0, 1], got {fraction}")
        k = int(round(fraction * self.n_units))
        mask = np.zeros(self.n_units, dtype=bool)
        if k:
            mask[np.argsort(-self.unit_totals(), kind="stable")[:k]] = True
        return mask


def parse_page_range(text: str) -> tuple[int, int, int]:
    """``REGION:START-END`` (END exclusive) or ``REGION:PAGE``."""
    try:
        region_s, rng = text.split(":", 1)
        if "-" in rng:
            a, b = rng.split("-", 1)
            start, end = int(a, 0), int(b, 0)
        else:
            start = int(rng, 0)
            end = start + 1
        region = int(region_s, 0)
    except ValueError:
        raise PagecastError(f"bad page range {text!r} (expected REGION:START-END, e.g. 0:0-256)") from None
    if end <= start:
        raise PagecastError(f"empty page range {text!r}")
    return region, start, end


def parse_address_range(text: str) -> tuple[int, int]:
    """``LO-HI`` or ``LO:HI`` virtual addresses (hex with 0x, or decimal)."""
    sep = "-" if "-" in text else ":"
    try:
        a, b = text.split(sep, 1)
        lo, hi = int(a, 0), int(b, 0)
    except ValueError:
        raise PagecastError(f"bad address range {text!r} (expected 0xLO-0xHI)") from None
    if hi <= lo:
        lo, hi = hi, lo
    if hi == lo:
        raise PagecastError(f"empty address range {text!r}")
    return lo, hi
