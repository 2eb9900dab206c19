"""The demand stream of a trace: its rows of DEMAND_KINDS (accesses, faults, accessed
ranges), in file order, read chunk by chunk.

Everything that learns, simulates or replays looks at this stream and nothing else
(PREFETCH, EVICT, page-set and marker rows are not demands); a schedule's trigger is a
position in it. ``demand_batches`` streams it in bounded memory, ``read_demand_columns``
gathers it for consumers that hold it whole, ``demand_mask`` marks it in rows already read.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from pagecast.trace.reader import Trace
from pagecast.trace.schema import COLUMNS, DEMAND_KINDS

DEMAND_CODES = np.array(sorted(int(k) for k in DEMAND_KINDS), np.uint8)
_IS_DEMAND = np.zeros(256, bool)
_IS_DEMAND[DEMAND_CODES] = True
# kinds 0..3 (ACCESS, FAULT_MINOR, FAULT_MAJOR, FAULT_GPU) are all demand kinds: a batch
# whose largest kind is at most this needs no filter (and no copy)
_ALL_DEMAND_BELOW = 3
assert all(_IS_DEMAND[k] for k in range(_ALL_DEMAND_BELOW + 1))


def demand_mask(kind: np.ndarray) -> np.ndarray:
    """True where a row's kind is a demand kind (``kind`` as stored, uint8)."""
    return _IS_DEMAND[np.asarray(kind, np.uint8)]


def _keep(kind: np.ndarray) -> np.ndarray | slice:
    if len(kind) and int(kind.max()) <= _ALL_DEMAND_BELOW:
        return slice(None)  # the usual case: only demand rows
    return _IS_DEMAND[kind]


def demand_batches(trace: Trace, columns: Sequence[str], batch_rows: int = 1 << 20) -> Iterator[dict[str, np.ndarray]]:
    """``columns`` of the demand rows, about ``batch_rows`` trace rows at a time, in file
    order; batches without demand rows are skipped. Arrays keep their stored dtypes (a
    batch of demand rows only is returned without a copy)."""
    read = list(columns) if "kind" in columns else [*columns, "kind"]
    for b in trace.iter_batches(read, batch_rows=batch_rows):
        keep = _keep(b["kind"])
        out = {c: b[c][keep] for c in columns}
        if len(out[columns[0]]):
            yield out


def read_demand_columns(trace: Trace, columns: Sequence[str], batch_rows: int = 1 << 20) -> dict[str, np.ndarray]:
    """The whole demand stream's ``columns`` in memory (read chunk by chunk)."""
    parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    for b in demand_batches(trace, columns, batch_rows):
        for c in columns:
            parts[c].append(b[c])
    return {c: np.concatenate(v) if v else np.empty(0, COLUMNS[c]) for c, v in parts.items()}


def demand_counts(trace: Trace) -> list[int]:
    """Demand rows per row group (for readers that walk row groups, e.g. backwards)."""
    return [int(np.count_nonzero(_IS_DEMAND[trace.read_row_group(rg, ["kind"])["kind"]])) for rg in range(trace.num_row_groups)]
