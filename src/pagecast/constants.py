"""Numbers every layer shares, defined once.

Import them from here rather than writing the literal: a page size or a prefetch bound
written in two places drifts apart.
"""

PAGE_SHIFT = 12
PAGE_SIZE = 1 << PAGE_SHIFT  # pages of a region are 4 KiB, whatever the hardware's page size (docs/trace-format.md)
PAGE_BITS = 40  # bits of the page in a (region, page) key (trace/keys.py): 4 PiB of pages per region
MAX_PREFETCH = 64  # pages one event may ask for: bounds the simulator's scratch buffers and every prefetcher's degree

# the userfaultfd pager's LD_PRELOAD shim, in native/: built by pagecast.pager.runtime for
# `pagecast pager run` and beside the launcher for a plan's page packs
PAGER_SHIM_SOURCES = ("pager/shim.c", "pager/pager.c", "pager/pack.c")
