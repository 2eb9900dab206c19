"""Synthetic slow/fast trace pairs of a program whose hot set moves.

There is no machine with two memory tiers (DDR + HBM) here, so the pair the differential
estimator needs is produced by a cost model: the same access sequence and the same compute
gaps, with every access charged the slow tier's latency in one trace and the fast tier's
in the other (plus independent timing jitter per run, as two real runs would have). The
traces are ordinary pagecast traces (ACCESS rows, region-relative pages) written with
``TraceWriter``, so the estimator and the environment read them like recorded ones.

The access pattern: a data region of ``pages`` pages; during each phase of
``phase_accesses`` accesses, ``hot_share`` of the accesses fall uniformly into a hot set of
``hot_fraction * pages`` contiguous pages, the rest uniformly over the region. The hot set
jumps to a random place at each phase change; with ``drift`` it also slides by ``drift``
pages per access during a phase (wrapping around the region), in a direction drawn per
phase. A placement policy must follow it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.trace.regions import Region
from pagecast.trace.schema import Kind
from pagecast.trace.writer import TraceWriter

_BATCH = 1 << 20


@dataclass
class HotsetConfig:
    pages: int = 4096
    accesses: int = 400_000
    hot_fraction: float = 0.125
    hot_share: float = 0.9
    phase_accesses: int = 40_000
    drift: float = 0.0  # pages per access the hot set slides within a phase (direction random per phase)
    compute_ns: float = 20.0  # mean compute time between two accesses
    slow_ns: float = 120.0  # per-access memory time in the slow tier (DDR-like)
    fast_ns: float = 40.0  # per-access memory time in the fast tier (HBM-like)
    jitter: float = 0.02  # relative timing noise, drawn independently for each run
    seed: int = 0


def generate_accesses(cfg: HotsetConfig) -> tuple[np.ndarray, np.ndarray]:
    """Pages and compute gaps (ns) of the access sequence; identical for both tiers."""
    rng = np.random.default_rng(cfg.seed)
    n = cfg.accesses
    hot = max(1, int(round(cfg.hot_fraction * cfg.pages)))
    phases = -(-n // cfg.phase_accesses)
    hot_start = rng.integers(0, cfg.pages - hot + 1, size=phases)
    # own stream, so adding drift left the traces of earlier versions unchanged
    direction = np.random.default_rng([cfg.seed, 3]).choice(np.array([-1.0, 1.0]), size=phases)
    idx = np.arange(n, dtype=np.int64)
    phase = idx // cfg.phase_accesses
    in_hot = rng.random(n) < cfg.hot_share
    start = hot_start[phase].astype(np.float64)
    if cfg.drift:
        start = start + direction[phase] * cfg.drift * (idx - phase * cfg.phase_accesses)
    hot_page = (np.floor(start).astype(np.int64) + rng.integers(0, hot, size=n)) % cfg.pages
    page = np.where(in_hot, hot_page, rng.integers(0, cfg.pages, size=n))
    gaps = rng.exponential(cfg.compute_ns, size=n)
    return page.astype(np.int64), gaps


def write_pair(cfg: HotsetConfig, slow_path: str | Path, fast_path: str | Path) -> tuple[Path, Path]:
    """Write the all-slow and the all-fast trace of one program run (see module doc)."""
    page, gaps = generate_accesses(cfg)
    out = []
    for tier, mem_ns, path, salt in (("slow", cfg.slow_ns, slow_path, 1), ("fast", cfg.fast_ns, fast_path, 2)):
        noise = np.random.default_rng([cfg.seed, salt]).normal(1.0, cfg.jitter, size=len(gaps)).clip(0.5, 1.5)
        t = np.cumsum((gaps + mem_ns) * noise).astype(np.int64)
        region = Region(0, "hotset#0", "anon", base=0x7F0000000000, length=cfg.pages * PAGE_SIZE, order=0)
        meta = {
            "generator": "moving-hotset",
            "tier": tier,
            "params": asdict(cfg),
            "command": "pagecast gym gen (cost-model pair, no two-tier machine)",
        }
        with TraceWriter(path, regions=[region], source="gen:moving-hotset", meta=meta) as w:
            for i in range(0, len(page), _BATCH):
                sl = slice(i, i + _BATCH)
                w.write(t_ns=t[sl], region=0, page=page[sl], kind=int(Kind.ACCESS))
        out.append(Path(path))
    return out[0], out[1]
