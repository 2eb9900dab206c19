"""First in, first out: the page resident longest leaves first, whatever its uses."""

from __future__ import annotations

from pagecast.policies.base import Eviction, register_eviction


@register_eviction("fifo")
class FIFO(Eviction):
    name = "fifo"
    structure = "fifo"
