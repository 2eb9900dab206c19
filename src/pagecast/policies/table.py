"""A page → pages table built offline, a pager-only policy implemented in C.

A fault at page p prefetches the pages the table lists for p. ``pagecast pager table``
builds the table from a schedule or by running any registered ``Prefetcher`` over a
trace (``pagecast.pager.runtime.table_from_prefetcher``): this is how Python-only
policies drive the pager without Python per fault.
"""

from __future__ import annotations

from pathlib import Path

from pagecast.errors import PagecastError
from pagecast.policies.base import BATCH_PAGES, Shorthand, batch_depth, register_native_policy


def native_config(file: str | None = None, depth: int = BATCH_PAGES) -> dict:
    """The pager's settings: the table file and at most ``depth`` pages per batch."""
    if not file:
        raise ValueError("needs a file: table:FILE (see `pagecast pager table`)")
    if not Path(file).exists():
        raise PagecastError("no such pager table file", path=file)
    return {"table": Path(file), "depth": batch_depth(depth)}


register_native_policy(
    "table",
    native_id=4,
    native=("pager",),
    module=__name__,
    summary="fault at page p -> the pages a table built offline lists for p",
    options=native_config,
    shorthand=Shorthand("file", metavar="FILE", required=True),
)
