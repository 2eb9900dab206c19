"""The demand stream of a trace, in bounded chunks (forwards or backwards)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable, Iterator, TypeVar

import numpy as np

from pagecast.trace.demand import demand_batches, demand_counts, demand_mask
from pagecast.trace.reader import Trace, open_trace
from pagecast.trace.schema import FLAG_WRITE

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
        # int32 as stored: the kernels take it as it is (a widening copy cost ~1 ns a row)
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
