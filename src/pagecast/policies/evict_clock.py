"""CLOCK (second chance): a hand sweeps the frames, clearing reference bits, and takes the
first page whose bit is clear.

The simulator sets the bit on every hit; the userfaultfd pager cannot see hits (no
accessed bits in user space) and sets it when a prefetched page is first demanded. Both
run the same sweep (``native/policy/pc_evict.h`` in C).
"""

from __future__ import annotations

from pagecast.policies.base import Eviction, register_eviction


@register_eviction("clock", native=("pager",))
class Clock(Eviction):
    name = "clock"
    structure = "clock"
