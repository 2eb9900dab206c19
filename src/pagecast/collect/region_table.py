"""The regions one recording creates, numbered in creation order, and which of them changed
(grew, were named, moved) since a reader last asked."""

from __future__ import annotations

from typing import Any

from pagecast.trace.regions import Region


class RegionTable:
    def __init__(self) -> None:
        self.regions: list[Region] = []
        self.changed: set[int] = set()

    def new(self, **kw: Any) -> Region:
        r = Region(id=len(self.regions), **kw)
        self.regions.append(r)
        self.changed.add(r.id)
        return r

    def count(self, kind: str) -> int:
        return sum(1 for r in self.regions if r.kind == kind)

    def take_changed(self) -> list[int]:
        out = sorted(self.changed)
        self.changed.clear()
        return out
