"""Page-granularity access heatmaps (time × page), like damo's heatmap.

Two streaming passes over the trace, each a numba loop per batch: rows, page range per
region and the time span; then counting the chosen regions' rows into fixed grids.
Memory is the grids, whatever the trace size.

Range rows (RANGE_ACCESSED / RANGE_IDLE, e.g. a DAMON region in one aggregation
interval) cover ``ip`` pages from ``page`` and weigh their access count (``tid``): each
page bin they overlap gets count × overlapping pages / pages in the bin, the mean
access frequency over the bin, which is what damo's heatmap draws per pixel.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numba
import numpy as np

from pagecast.errors import PagecastError
from pagecast.trace.reader import Trace, open_trace
from pagecast.trace.schema import RANGE_KINDS, Kind
from pagecast.util.atomic import atomic_output


@dataclass
class HeatmapConfig:
    regions: Sequence[int] | None = None  # None: the busiest `top` regions
    top: int = 4
    time_bins: int = 300
    page_bins: int = 300
    kinds: Sequence[int] | None = None  # None: every kind
    batch_rows: int = 1 << 21


@dataclass
class RegionGrid:
    region: int
    name: str
    page_lo: int
    page_hi: int  # exclusive
    grid: np.ndarray  # (page_bins, time_bins) counts (float64: range rows add fractions)


@numba.njit(cache=True, nogil=True)
def _scan(
    region, page, t, kind, npages, is_range, kind_ok, nreg, rows, pmin, pmax, trange
):  # pragma: no cover - jitted
    """Pass 1: rows, page range per region and the time span of rows that will be drawn."""
    for i in range(len(region)):
        r = region[i]
        if r < 0 or r >= nreg or not kind_ok[kind[i]]:
            continue
        rows[r] += 1
        p = page[i]
        if p < pmin[r]:
            pmin[r] = p
        last = p + max(np.int64(npages[i]), 1) - 1 if is_range[kind[i]] else p
        if last > pmax[r]:
            pmax[r] = last
        if t[i] < trange[0]:
            trange[0] = t[i]
        if t[i] > trange[1]:
            trange[1] = t[i]


@numba.njit(cache=True, nogil=True)
def _bin(
    region, page, t, kind, npages, weight, is_range, kind_ok, slot, lo, width, pbins, off, tmin, span, tbins, total
):  # pragma: no cover
    """Pass 2: count each drawn row into its region's (page bin, time bin) cell."""
    nreg = len(slot)
    for i in range(len(region)):
        r = region[i]
        if r < 0 or r >= nreg or not kind_ok[kind[i]]:
            continue
        s = slot[r]
        if s < 0:
            continue
        tb = (t[i] - tmin) * tbins // span
        if tb >= tbins:
            tb = tbins - 1
        if is_range[kind[i]]:
            _spread(
                page[i] - lo[s], max(np.int64(npages[i]), 1), weight[i], pbins[s], width[s], total, off[s] + tb, tbins
            )
            continue
        pb = (page[i] - lo[s]) * pbins[s] // width[s]
        if pb >= pbins[s]:
            pb = pbins[s] - 1
        if pb < 0:
            pb = 0
        total[off[s] + pb * tbins + tb] += 1


@numba.njit(cache=True, nogil=True)
def _spread(first, n, w, pbins, width, total, base, tbins):  # pragma: no cover - jitted
    """Add w × (pages of [first, first+n) in each bin) / (pages in the bin) to the bins it overlaps."""
    end = min(first + n, width)
    first = max(first, 0)
    if end <= first:
        return
    b = first * pbins // width
    while b < pbins:
        b_lo = -(-b * width // pbins)  # first page of bin b
        b_hi = -(-(b + 1) * width // pbins)
        if b_lo >= end:
            break
        ov = min(end, b_hi) - max(first, b_lo)
        if ov > 0:
            total[base + b * tbins] += w * ov / (b_hi - b_lo)
        b += 1


def compute(
    t: Trace, cfg: HeatmapConfig, on_rows: Callable[[int], None] | None = None
) -> tuple[list[RegionGrid], int, int]:
    nreg = len(t.regions)
    kind_ok = np.ones(256, np.bool_)
    if cfg.kinds is not None:
        kind_ok[:] = False
        kind_ok[np.asarray(cfg.kinds, np.uint8)] = True
    cols = ["t_ns", "region", "page", "kind", "ip", "tid"]
    is_range = np.zeros(256, np.bool_)
    is_range[[int(k) for k in RANGE_KINDS]] = True
    rows = np.zeros(nreg, np.int64)
    pmin = np.full(nreg, np.iinfo(np.int64).max, np.int64)
    pmax = np.full(nreg, -1, np.int64)
    trange = np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min], np.int64)
    for b in t.iter_batches(cols, cfg.batch_rows):
        _scan(b["region"], b["page"], b["t_ns"], b["kind"], b["ip"], is_range, kind_ok, nreg, rows, pmin, pmax, trange)
        if on_rows:
            on_rows(len(b["t_ns"]))
    if not rows.any():
        raise PagecastError("no rows with a known region to plot", path=t.path)
    tmin, tmax = int(trange[0]), int(trange[1])
    if cfg.regions:
        chosen = [int(r) for r in cfg.regions]
        bad = [r for r in chosen if not 0 <= r < nreg]
        if bad:
            raise PagecastError(f"no region {bad[0]} (trace has {nreg})", path=t.path)
    else:
        chosen = [int(r) for r in np.argsort(-rows, kind="stable")[: cfg.top] if rows[r] > 0]
    span = max(tmax - tmin, 1)
    grids = {}
    for rid in chosen:
        lo, hi = (int(pmin[rid]), int(pmax[rid]) + 1) if rows[rid] else (0, 1)
        pbins = min(cfg.page_bins, hi - lo)  # never a bin narrower than one page
        grids[rid] = RegionGrid(rid, t.regions[rid].name, lo, hi, np.zeros((pbins, cfg.time_bins), np.float64))
    # the chosen regions' grids laid end to end in one array
    slot = np.full(nreg, -1, np.int64)
    slot[chosen] = np.arange(len(chosen))
    lo = np.array([grids[r].page_lo for r in chosen], np.int64)
    width = np.array([max(grids[r].page_hi - grids[r].page_lo, 1) for r in chosen], np.int64)
    pbins = np.array([grids[r].grid.shape[0] for r in chosen], np.int64)
    off = np.concatenate([[0], np.cumsum(pbins * cfg.time_bins)]).astype(np.int64)
    # float: range rows add fractions (mean access count over a bin); other rows add 1
    total = np.zeros(int(off[-1]), np.float64)
    for b in t.iter_batches(cols, cfg.batch_rows):
        _bin(
            b["region"],
            b["page"],
            b["t_ns"],
            b["kind"],
            b["ip"],
            b["tid"].astype(np.float64),
            is_range,
            kind_ok,
            slot,
            lo,
            width,
            pbins,
            off,
            tmin,
            span,
            cfg.time_bins,
            total,
        )
        if on_rows:
            on_rows(len(b["t_ns"]))
    for i, rid in enumerate(chosen):
        grids[rid].grid = total[off[i] : off[i + 1]].reshape(grids[rid].grid.shape)
    return [grids[r] for r in chosen], tmin, tmax


def plot(
    path: str | Path, out: str | Path, cfg: HeatmapConfig | None = None, on_rows: Callable[[int], None] | None = None
) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    cfg = cfg or HeatmapConfig()
    t = open_trace(path)
    grids, tmin, tmax = compute(t, cfg, on_rows)
    unit = t.meta.get("time_unit", "ns")
    scale, tlabel = (1e9, "time (s)") if unit == "ns" else (1.0, f"time ({unit})")
    fig, axes = plt.subplots(len(grids), 1, figsize=(9, 2.6 * len(grids) + 0.6), squeeze=False)
    for ax, g in zip(axes[:, 0], grids):
        data = np.ma.masked_equal(g.grid, 0)
        vmax = max(float(g.grid.max()), 1.0)
        pos = g.grid[g.grid > 0]
        vmin = min(1.0, float(pos.min())) if len(pos) else 1.0  # range rows can average below one access
        im = ax.imshow(
            data,
            aspect="auto",
            origin="lower",
            interpolation="nearest",
            cmap="viridis",
            norm=LogNorm(vmin=vmin, vmax=max(vmax, 2 * vmin)),
            extent=(0, (tmax - tmin) / scale, g.page_lo, g.page_hi),
        )
        ax.set_facecolor("white")
        r = t.regions[g.region]
        ax.set_title(f"region {g.region} {g.name} ({r.kind}, {r.pages} pages)", fontsize=9)
        ax.set_ylabel("page")
        fig.colorbar(im, ax=ax, label="events")
    axes[-1, 0].set_xlabel(tlabel)
    fig.suptitle(f"{Path(path).name}: {t.num_rows:,} rows, source {t.source}", fontsize=10)
    fig.tight_layout()
    with atomic_output(out) as tmp:
        fig.savefig(tmp, dpi=110, format=Path(out).suffix.lstrip(".") or "png")
    plt.close(fig)
    return {
        "output": str(out),
        "regions": [g.region for g in grids],
        "time_bins": cfg.time_bins,
        "page_bins": cfg.page_bins,
        "events": int(sum(int(g.grid.sum()) for g in grids)),
    }


KIND_NAMES = {k.name.lower(): int(k) for k in Kind}
