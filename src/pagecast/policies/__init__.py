"""Prefetch and eviction policies behind one interface.

Each prefetcher lives in its own module in this package and registers itself with
``register_prefetcher``; ``get_prefetcher(name, **options)`` builds one by name.
``check(name_or_class)`` tells a policy's author whether every backend it claims names
the same pages as the simulator (``policies/parity.py``); ``PrefetchPolicy`` and
``EvictionPolicy`` (``policies/protocol.py``) are what a policy must provide.
"""

from pagecast.policies.base import Prefetcher, available_prefetchers, get_prefetcher, register_prefetcher
from pagecast.policies.parity import CheckReport, check
from pagecast.policies.protocol import EvictionPolicy, PrefetchPolicy

__all__ = [
    "CheckReport",
    "EvictionPolicy",
    "PrefetchPolicy",
    "Prefetcher",
    "available_prefetchers",
    "check",
    "get_prefetcher",
    "register_prefetcher",
]
