"""The oracle: knows the future and prefetches the next K distinct pages.

It marks the limit of prefetching. On each observed event (a miss, or the first use of a
prefetched page) it names the next ``k`` distinct pages the program will demand after
this event (looking at most ``lookahead`` events ahead), soonest first; the simulator
skips those already in the fast tier. The simulator runs it inside its compiled loop on
the demand stream it is replaying; the Python object needs the stream given explicitly
(``Oracle(k, stream=(region, page, t_ns))`` or ``set_stream``), since no prefetcher may
otherwise see the future.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pagecast.policies._numba import MAX_PREFETCH
from pagecast.policies.base import Prefetcher, register_prefetcher
from pagecast.trace.regions import Region


@register_prefetcher("oracle")
class Oracle(Prefetcher):
    name = "oracle"

    def __init__(
        self, k: int = 32, lookahead: int = 1 << 16, stream: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    ):
        if not 1 <= k <= MAX_PREFETCH:
            raise ValueError(f"oracle k must be 1..{MAX_PREFETCH}")
        self.k, self.lookahead = int(k), int(lookahead)
        self._region = self._page = self._t = None
        if stream is not None:
            self.set_stream(*stream)
        self._cursor = 0

    def set_stream(self, region: np.ndarray, page: np.ndarray, t_ns: np.ndarray) -> None:
        """The demand stream that ``observe`` will be shown, in order."""
        self._region = np.asarray(region, np.int64)
        self._page = np.asarray(page, np.int64)
        self._t = np.asarray(t_ns, np.int64)
        self._cursor = 0

    def reset(self, regions: Sequence[Region]) -> None:
        self._cursor = 0

    def _locate(self, t_ns: int, region: int, page: int) -> int:
        # Observed events are a subsequence of the stream in order: the next match is it.
        i = self._cursor
        n = len(self._page)
        while i < n and not (self._page[i] == page and self._region[i] == region and self._t[i] == t_ns):
            i += 1
        if i == n:
            raise ValueError(f"oracle: event (t={t_ns}, region={region}, page={page}) is not in its stream")
        self._cursor = i + 1
        return i

    def observe(self, t_ns: int, region: int, page: int, hit: bool) -> list[tuple[int, int]]:
        if self._page is None:
            raise RuntimeError("oracle needs the demand stream: Oracle(stream=...) or set_stream()")
        i = self._locate(int(t_ns), int(region), int(page))
        out: list[tuple[int, int]] = []
        seen = {(int(region), int(page))}
        end = min(len(self._page), i + 1 + self.lookahead)
        for j in range(i + 1, end):
            key = (int(self._region[j]), int(self._page[j]))
            if key not in seen:
                seen.add(key)
                out.append(key)
                if len(out) == self.k:
                    break
        return out
