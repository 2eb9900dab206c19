"""A learnable, non-stride access pattern for testing and benchmarking learned predictors.

Several arrays are walked at once, each in its own region: some with constant strides of
different sizes, one with a repeating *irregular* delta sequence (a pointer chase whose
hops repeat), interleaved in a fixed but irregular order. No single stride describes the
stream, next-line read-around mostly misses, and a delta-Markov table of order one is
ambiguous (the irregular sequence repeats deltas with different successors); a sequence
model with a few dozen events of context can predict it exactly.

This is a generated pattern, named as such: the recorded-program cases live in tests that
use ``pagecast record``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.trace.regions import Region
from pagecast.trace.schema import Kind
from pagecast.trace.writer import TraceWriter


@dataclass
class PatternSpec:
    strides: Sequence[int] = (1, 3, 7)
    # Deltas with repeats whose successors differ (5 → -2 and 5 → 9): order-1 Markov is ambiguous.
    irregular: Sequence[int] = (5, -2, 9, 5, 9, -3, 2, 5, -2, 11, 1, 4)
    # Which stream moves next (stream len(strides) is the irregular one); repeats.
    order: Sequence[int] = (0, 3, 1, 0, 2, 3, 3, 1, 0, 3, 2, 1, 3, 0)
    gap_ns: int = 2000  # compute time between accesses
    start_pages: Sequence[int] = field(default_factory=lambda: [0, 0, 0, 0])
    base: int = 0x7F0000000000  # virtual base of the first region (informative: pages are region-relative)


def long_context_spec(seed: int = 3, **kw) -> PatternSpec:
    """A pattern whose next page needs a long context: an irregular walk of 40 deltas drawn
    from 8 values, interleaved with the strided streams in a 61-step order (``seed`` draws
    both). A delta recurs with many successors, and which one comes next is decided by
    where the walk and the interleaving are, dozens of events back. ``kw`` overrides other
    fields (start pages, base)."""
    rng = np.random.default_rng(seed)
    irregular = [int(x) for x in rng.choice([-3, -2, 1, 2, 4, 5, 9, 11], size=40)]
    order = [int(x) for x in rng.integers(0, 4, size=61)]
    return PatternSpec(irregular=irregular, order=order, **kw)


def generate(n: int, spec: PatternSpec | None = None) -> tuple[dict[str, np.ndarray], list[Region]]:
    """``n`` accesses as trace columns, plus the regions (one anonymous region per stream)."""
    spec = spec or PatternSpec()
    n_streams = len(spec.strides) + 1
    order = np.asarray(spec.order, np.int64)
    who = order[np.arange(n) % len(order)]
    page = np.zeros(n, np.int64)
    lengths = []
    for s in range(n_streams):
        sel = np.flatnonzero(who == s)
        k = len(sel)
        if s < len(spec.strides):
            steps = np.full(k, spec.strides[s], np.int64)
        else:
            irr = np.asarray(spec.irregular, np.int64)
            steps = irr[np.arange(k) % len(irr)]
        pos = spec.start_pages[s] + np.concatenate([[0], np.cumsum(steps[:-1])]) if k else np.empty(0, np.int64)
        page[sel] = pos
        lengths.append(int((pos.max() + 1 if k else 1)) * PAGE_SIZE)
    regions = []
    base = spec.base
    for s in range(n_streams):
        name = f"stride{spec.strides[s]}" if s < len(spec.strides) else "irregular"
        regions.append(Region(s, name, "anon", base=base, length=lengths[s], order=s))
        base += lengths[s] + (1 << 30)
    cols = {
        "t_ns": np.arange(n, dtype=np.int64) * spec.gap_ns,
        "region": who.astype(np.int32),
        "page": page,
        "kind": np.full(n, int(Kind.ACCESS), np.uint8),
    }
    return cols, regions


def write_pattern_trace(path: str | Path, n: int, spec: PatternSpec | None = None) -> Path:
    cols, regions = generate(n, spec)
    with TraceWriter(path, regions=regions, source="synthetic:interleaved") as w:
        w.write(**cols)
    return Path(path)
