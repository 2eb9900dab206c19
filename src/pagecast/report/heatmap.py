"""Page-granularity access heatmaps (time × page), like damo's heatmap.

Two streaming passes over the trace: the first finds the time span and each region's
row count and page range, the second bins rows into a fixed grid per region with one
``np.bincount`` per batch. Memory is the grids, whatever the trace size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from pagecast.errors import PagecastError
from pagecast.trace.reader import Trace, open_trace
from pagecast.trace.schema import Kind
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
    grid: np.ndarray  # (page_bins, time_bins) counts


def compute(t: Trace, cfg: HeatmapConfig, on_rows: Callable[[int], None] | None = None) -> tuple[list[RegionGrid], int, int]:
    nreg = len(t.regions)
    kinds = None if cfg.kinds is None else np.asarray(cfg.kinds, np.uint8)
    rows = np.zeros(nreg, np.int64)
    pmin = np.full(nreg, np.iinfo(np.int64).max)
    pmax = np.full(nreg, -1, np.int64)
    tmin, tmax = None, None
    cols = ["t_ns", "region", "page", "kind"]
    for b in t.iter_batches(cols, cfg.batch_rows):
        keep = (b["region"] >= 0) & (b["region"] < nreg)
        if kinds is not None:
            keep &= np.isin(b["kind"], kinds)
        r, p, tt = b["region"][keep], b["page"][keep], b["t_ns"][keep]
        if on_rows:
            on_rows(len(b["t_ns"]))
        if not len(r):
            continue
        rows += np.bincount(r, minlength=nreg)
        _minmax(r, p, pmin, pmax)
        lo, hi = int(tt.min()), int(tt.max())
        tmin = lo if tmin is None else min(tmin, lo)
        tmax = hi if tmax is None else max(tmax, hi)
    if tmin is None:
        raise PagecastError("no rows with a known region to plot", path=t.path)
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
        lo = int(pmin[rid]) if rows[rid] else 0
        hi = int(pmax[rid]) + 1 if rows[rid] else 1
        pbins = min(cfg.page_bins, hi - lo)  # never a bin narrower than one page
        grids[rid] = RegionGrid(rid, t.regions[rid].name, lo, hi, np.zeros((pbins, cfg.time_bins), np.int64))
    sel_ids = np.array(chosen, np.int32)
    for b in t.iter_batches(cols, cfg.batch_rows):
        keep = np.isin(b["region"], sel_ids)
        if kinds is not None:
            keep &= np.isin(b["kind"], kinds)
        r, p, tt = b["region"][keep], b["page"][keep], b["t_ns"][keep]
        tb = np.minimum((tt - tmin) * cfg.time_bins // span, cfg.time_bins - 1)
        for rid in chosen:
            m = r == rid
            if not m.any():
                continue
            g = grids[rid]
            width = max(g.page_hi - g.page_lo, 1)
            pbins = g.grid.shape[0]
            pb = np.minimum((p[m] - g.page_lo) * pbins // width, pbins - 1)
            g.grid += np.bincount(pb * cfg.time_bins + tb[m], minlength=g.grid.size).reshape(g.grid.shape)
        if on_rows:
            on_rows(len(b["t_ns"]))
    return [grids[r] for r in chosen], tmin, tmax


def _minmax(r: np.ndarray, p: np.ndarray, pmin: np.ndarray, pmax: np.ndarray) -> None:
    order = np.lexsort((p, r))
    rs, ps = r[order], p[order]
    first = np.flatnonzero(np.r_[True, rs[1:] != rs[:-1]])
    last = np.r_[first[1:] - 1, len(rs) - 1]
    ids = rs[first]
    pmin[ids] = np.minimum(pmin[ids], ps[first])
    pmax[ids] = np.maximum(pmax[ids], ps[last])


def plot(path: str | Path, out: str | Path, cfg: HeatmapConfig | None = None,
         on_rows: Callable[[int], None] | None = None) -> dict:
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
        vmax = max(int(g.grid.max()), 1)
        im = ax.imshow(data, aspect="auto", origin="lower", interpolation="nearest", cmap="viridis",
                       norm=LogNorm(vmin=1, vmax=max(vmax, 2)),
                       extent=(0, (tmax - tmin) / scale, g.page_lo, g.page_hi))
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
    return {"output": str(out), "regions": [g.region for g in grids], "time_bins": cfg.time_bins,
            "page_bins": cfg.page_bins, "events": int(sum(int(g.grid.sum()) for g in grids))}


KIND_NAMES = {k.name.lower(): int(k) for k in Kind}
