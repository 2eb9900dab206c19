"""A page → pages table built offline, a pager-only policy implemented in C.

A fault at page p prefetches the pages the table lists for p. ``pagecast pager table``
builds the table from a schedule or by running any registered ``Prefetcher`` over a
trace (``pagecast.pager.runtime.table_from_prefetcher``): this is how Python-only
policies drive the pager without Python per fault.
"""

from __future__ import annotations

from pagecast.policies.base import register_native_policy

register_native_policy(
    "table",
    native_id=4,
    native=("pager",),
    module=__name__,
    summary="fault at page p -> the pages a table built offline lists for p",
)
