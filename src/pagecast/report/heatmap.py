"""Page-granularity access heatmaps (time × page), like damo's heatmap.

Three streaming passes over the trace: rows per region and the time span, then the
page range of the chosen regions, then binning rows into a fixed grid per region with one
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
    kind_ok = np.ones(256, bool)
    if cfg.kinds is not None:
        kind_ok[:] = False
        kind_ok[np.asarray(cfg.kinds, np.uint8)] = True
    cols = ["t_ns", "region", "page", "kind"]
    # lookup tables instead of np.isin: one gather per batch
    all_ok = np.ones(nreg + 1, bool)
    all_ok[-1] = False  # slot for region -1 and out-of-range ids

    def rows_of(b: dict[str, np.ndarray], ok: np.ndarray) -> np.ndarray:
        r = b["region"]
        idx = np.where((r >= 0) & (r < nreg), r, nreg)
        keep = ok[idx]
        if cfg.kinds is not None:
            keep &= kind_ok[b["kind"]]
        return keep

    # pass 1: rows per region and the time span (bincount, no sorting)
    rows = np.zeros(nreg, np.int64)
    tmin, tmax = None, None
    for b in t.iter_batches(["t_ns", "region", "kind"], cfg.batch_rows):
        keep = rows_of(b, all_ok)
        if on_rows:
            on_rows(len(keep))
        if not keep.any():
            continue
        rows += np.bincount(b["region"][keep], minlength=nreg)
        tt = b["t_ns"][keep]
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
    sel_ok = np.zeros(nreg + 1, bool)
    sel_ok[chosen] = True
    # pass 2: page range of the chosen regions only
    pmin = {r: np.iinfo(np.int64).max for r in chosen}
    pmax = {r: -1 for r in chosen}
    for b in t.iter_batches(["region", "page", "kind"], cfg.batch_rows):
        keep = rows_of(b, sel_ok)
        if on_rows:
            on_rows(len(keep))
        r, p = b["region"][keep], b["page"][keep]
        for rid in chosen:
            pr = p[r == rid]
            if len(pr):
                pmin[rid] = min(pmin[rid], int(pr.min()))
                pmax[rid] = max(pmax[rid], int(pr.max()))
    span = max(tmax - tmin, 1)
    grids = {}
    for rid in chosen:
        lo, hi = (pmin[rid], pmax[rid] + 1) if pmax[rid] >= 0 else (0, 1)
        pbins = min(cfg.page_bins, hi - lo)  # never a bin narrower than one page
        grids[rid] = RegionGrid(rid, t.regions[rid].name, lo, hi, np.zeros((pbins, cfg.time_bins), np.int64))
    # pass 3: one bincount per batch over all chosen regions' grids laid end to end
    slot = np.full(nreg, -1, np.int64)
    slot[chosen] = np.arange(len(chosen))
    lo = np.array([grids[r].page_lo for r in chosen], np.int64)
    width = np.array([max(grids[r].page_hi - grids[r].page_lo, 1) for r in chosen], np.int64)
    pbins = np.array([grids[r].grid.shape[0] for r in chosen], np.int64)
    sizes = pbins * cfg.time_bins
    off = np.concatenate([[0], np.cumsum(sizes)])
    total = np.zeros(int(off[-1]), np.int64)
    for b in t.iter_batches(cols, cfg.batch_rows):
        keep = rows_of(b, sel_ok)
        sl = slot[b["region"][keep]]
        p, tt = b["page"][keep], b["t_ns"][keep]
        tb = np.minimum((tt - tmin) * cfg.time_bins // span, cfg.time_bins - 1)
        pb = np.minimum((p - lo[sl]) * pbins[sl] // width[sl], pbins[sl] - 1)
        total += np.bincount(off[sl] + pb * cfg.time_bins + tb, minlength=len(total))
        if on_rows:
            on_rows(len(keep))
    for i, rid in enumerate(chosen):
        grids[rid].grid = total[off[i]:off[i + 1]].reshape(grids[rid].grid.shape)
    return [grids[r] for r in chosen], tmin, tmax


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
