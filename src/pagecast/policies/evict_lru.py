"""Least recently used: the page whose last use is oldest leaves first.

The simulator runs it on its recency queue (``sim/engine.py``), where a hit appends one
entry instead of unlinking the page.
"""

from __future__ import annotations

from pagecast.policies.base import Eviction, register_eviction


@register_eviction("lru")
class LRU(Eviction):
    name = "lru"
    structure = "lru"
