"""No prefetching: the baseline every other prefetcher is measured against."""

from __future__ import annotations

from pagecast.policies.base import Prefetcher, register_prefetcher


@register_prefetcher("none", native_id=0, native=("pager",))
class NoPrefetcher(Prefetcher):
    name = "none"

    def observe(self, t_ns: int, region: int, page: int, hit: bool) -> list[tuple[int, int]]:
        return []

    def native_params(self) -> tuple[int, int]:
        """The C step's parameters: it has none."""
        return 0, 0

    def native_config(self) -> dict[str, int]:
        """The pager's settings: none of its own."""
        return {}
