"""The demand stream of a trace: its rows of DEMAND_KINDS (accesses, faults, accessed
ranges), in file order, read chunk by chunk.

Everything that learns, simulates or replays looks at this stream and nothing else
(PREFETCH, EVICT, page-set and marker rows are not demands); a schedule's trigger is a
position in it. ``demand_batches`` streams it in bounded memory, ``read_demand_columns``
gathers it for consumers that hold it whole, ``demand_mask`` marks it in rows already read.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable, Iterator, Sequence, TypeVar

import numpy as np

from pagecast.trace.reader import Trace, open_trace
from pagecast.trace.schema import COLUMNS, DEMAND_KINDS, FLAG_WRITE

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
    return [
        int(np.count_nonzero(_IS_DEMAND[trace.read_row_group(rg, ["kind"])["kind"]]))
        for rg in range(trace.num_row_groups)
    ]


# ---- the demand stream as the simulator and the metrics take it -----------------

_COLS = ["t_ns", "region", "page", "flags"]


T = TypeVar("T")


class ReadClock:
    """CPU seconds this process spent producing the items of an iterator (reading and
    decoding the trace, pyarrow's threads included): ``simulate`` reports it so the
    engine's own share can be told apart from Parquet decode."""

    def __init__(self) -> None:
        self.cpu_s = 0.0

    def wrap(self, items: Iterable[T]) -> Iterator[T]:
        it = iter(items)
        while True:
            c0 = time.process_time()
            item = next(it, None)
            self.cpu_s += time.process_time() - c0
            if item is None:
                return
            yield item


def as_trace(trace_or_path: Trace | str | Path) -> Trace:
    return trace_or_path if isinstance(trace_or_path, Trace) else open_trace(trace_or_path)


def _engine_arrays(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Demand rows as the compiled loops take them."""
    return {
        "t": np.ascontiguousarray(cols["t_ns"], np.int64),
        # int32 as stored: the kernels take it as it is (a widening copy would cost a pass over every row)
        "region": np.ascontiguousarray(cols["region"]),
        "page": np.ascontiguousarray(cols["page"], np.int64),
        "write": np.ascontiguousarray((cols["flags"] & FLAG_WRITE), np.uint8),
    }


def demand_chunks(trace: Trace, chunk_rows: int = 1 << 20) -> Iterator[dict[str, np.ndarray]]:
    """Demand rows (ACCESS and FAULT_* kinds) in file order, about ``chunk_rows`` at a time."""
    for cols in demand_batches(trace, _COLS, chunk_rows):
        yield _engine_arrays(cols)


def demand_chunks_reversed(trace: Trace) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(global index of the chunk's first demand row, chunk), last row group first."""
    counts = demand_counts(trace)
    starts = np.concatenate([[0], np.cumsum(counts)])
    for rg in range(trace.num_row_groups - 1, -1, -1):
        if counts[rg] == 0:
            continue
        cols = trace.read_row_group(rg, [*_COLS, "kind"])
        keep = demand_mask(cols["kind"])
        yield int(starts[rg]), _engine_arrays({c: cols[c][keep] for c in _COLS})


def read_demand(trace: Trace) -> dict[str, np.ndarray]:
    """The whole demand stream in memory (metrics and small traces only)."""
    parts = list(demand_chunks(trace))
    if not parts:
        return {k: np.empty(0, np.int64 if k != "write" else np.uint8) for k in ("t", "region", "page", "write")}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
