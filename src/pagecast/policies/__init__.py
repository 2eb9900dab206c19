"""Prefetch and eviction policies behind one interface.

Each prefetcher lives in its own module in this package and registers itself with
``register_prefetcher``; ``get_prefetcher(name, **options)`` builds one by name.
"""

from pagecast.policies.base import Prefetcher, available_prefetchers, get_prefetcher, register_prefetcher

__all__ = ["Prefetcher", "available_prefetchers", "get_prefetcher", "register_prefetcher"]
