"""Regions for sources that give bare addresses but no allocation records.

Heuristic (documented in docs/trace-format.md): memory is allocated in contiguous
ranges, so the touched addresses are cut into 2 MiB granules (the GPU's VA-block size
and the x86 huge-page size) and runs of consecutive touched granules are merged into one
region. Regions are numbered in address order, and ``order`` repeats that number, which
identifies a region across runs as long as the program allocates in the same order.
Pages are relative to the region's first granule, so they survive ASLR shifts that
keep 2 MiB alignment (the kernel's mmap base is randomised at page granularity, so
a shifted run can move a range across a granule boundary: pages stay relative, but
the region's first granule, and hence page 0, can differ by up to 511 pages).
"""

from __future__ import annotations

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.trace.regions import Region, RegionMap

GRANULE_SHIFT = 21


class AddressClusters:
    """Collect addresses (pass 1), then translate them to (region, page) (pass 2)."""

    def __init__(self, granule_shift: int = GRANULE_SHIFT, page_size: int = PAGE_SIZE, gap_granules: int = 0):
        self.granule_shift = granule_shift
        self.page_size = page_size
        self.gap = gap_granules
        self._granules: list[np.ndarray] = []
        self._map: RegionMap | None = None
        self.regions: list[Region] = []

    def add(self, addrs: np.ndarray) -> None:
        if len(addrs):
            self._granules.append(np.unique(np.asarray(addrs, np.uint64) >> np.uint64(self.granule_shift)))
            if len(self._granules) > 64:
                self._granules = [np.unique(np.concatenate(self._granules))]

    def build(self, kind: str = "anon", name: str = "range", first_seen: dict[int, int] | None = None) -> list[Region]:
        """Turn the collected granules into regions (address order)."""
        g = np.unique(np.concatenate(self._granules)) if self._granules else np.empty(0, np.uint64)
        self._map = RegionMap(self.page_size)
        self.regions = []
        if len(g) == 0:
            return self.regions
        breaks = np.flatnonzero(np.diff(g.astype(np.int64)) > 1 + self.gap) + 1
        for i, run in enumerate(np.split(g, breaks)):
            start = int(run[0]) << self.granule_shift
            # the top granule of the address space ends at 2^64, which uint64 cannot hold
            end = min((int(run[-1]) + 1) << self.granule_shift, (1 << 64) - 1)
            r = Region(
                id=i, name=f"{name}{i}", kind=kind, base=start, length=end - start, page_size=self.page_size, order=i
            )
            self.regions.append(r)
            self._map.add(start, end, i, 0)
        return self.regions

    def translate(self, addrs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._map is None:
            raise RuntimeError("call build() first")
        return self._map.translate(addrs)
