"""No prefetching: the baseline every other prefetcher is measured against."""

from __future__ import annotations

from pagecast.policies.base import Prefetcher, register_prefetcher


@register_prefetcher("none", native_id=0, native=("pager",))
class NoPrefetcher(Prefetcher):
    name = "none"

    def observe(self, t_ns: int, region: int, page: int, hit: bool) -> list[tuple[int, int]]:
        return []
