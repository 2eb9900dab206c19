"""Which collectors a recording of a program holds data from (``meta.sources``).

``pagecast record`` stores the list: ``faults`` (the page-fault samples), ``mapped-pages``
(the page-set shim's first touches of mapped file pages), ``read-pages`` (the read-family
tracepoint: pages read with read()/pread()). A consumer of page sets (plan, info, train,
eval) warns when a recording lacks ``read-pages``: every file the program read with
read() is then missing from its page sets, and whatever is learned or planned from it
does not know those files. Recordings made before the list existed are judged from their
``pageset`` metadata. Traces from other sources (imports, simulators, valgrind) make no
claim about read() and get no warning.
"""

from __future__ import annotations

from typing import Any

FAULTS = "faults"
MAPPED_PAGES = "mapped-pages"
READ_PAGES = "read-pages"


def sources_of(meta: dict[str, Any]) -> list[str] | None:
    """The sources a ``pagecast record`` trace holds, or None for a trace of another kind."""
    if meta.get("source") != "perf" or "faults" not in meta:
        return None
    listed = meta.get("sources")
    if isinstance(listed, list):
        return [str(s) for s in listed]
    ps = meta.get("pageset")
    if not isinstance(ps, dict):
        return [FAULTS]
    return [FAULTS, MAPPED_PAGES] + ([READ_PAGES] if ps.get("reads") else [])


def missing_reads(meta: dict[str, Any]) -> str | None:
    """A one-line warning when a program's recording lacks read-family data, else None."""
    src = sources_of(meta)
    if src is None or READ_PAGES in src:
        return None
    why = "recorded with --faults-only" if MAPPED_PAGES not in src else "the read tracepoint was unavailable"
    return (
        f"holds no pages read with read()/pread() ({why}): files the program read are missing from its "
        "page sets; record it again without --faults-only (docs/recording.md)"
    )
