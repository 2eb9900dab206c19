"""BowerAccess's sparse-monotonic policy, a pager-only policy implemented in C.

Every demand fault adds its page to a learned bitmap of the mapping; a fault at page p
prefetches the next N learned pages above p (the set, in its monotone order). The set can
be kept per file across runs (``pagecast pager run --learn DIR``). It lives in
``native/pager/pager.c`` because the set is the pager region's own state; it has no
Python ``observe`` and no simulator kernel.
"""

from __future__ import annotations

from pagecast.policies.base import BATCH_PAGES, Shorthand, batch_depth, register_native_policy


def native_config(depth: int = BATCH_PAGES) -> dict[str, int]:
    """The pager's settings: ``depth`` learned pages per batch."""
    return {"depth": batch_depth(depth)}


register_native_policy(
    "sparse",
    native_id=3,
    native=("pager",),
    module=__name__,
    summary="next N pages of the learned page set above the fault (BowerAccess)",
    options=native_config,
    shorthand=Shorthand("depth"),
)
