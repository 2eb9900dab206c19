"""The demand stream of a trace, in bounded chunks (forwards or backwards)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable, Iterator, TypeVar

import numpy as np

from pagecast.trace.reader import Trace, open_trace
from pagecast.trace.schema import DEMAND_KINDS, FLAG_WRITE

_COLS = ["t_ns", "region", "page", "kind", "flags"]
_DEMAND = np.array([int(k) for k in DEMAND_KINDS], np.uint8)
# kinds 0..3 (ACCESS, FAULT_MINOR, FAULT_MAJOR, FAULT_GPU) are all demand kinds
_DEMAND_BELOW = 3
assert all(k in DEMAND_KINDS for k in range(_DEMAND_BELOW + 1))


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


def _demand(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    kind = cols["kind"]
    if len(kind) and kind.max() <= _DEMAND_BELOW:
        keep = slice(None)  # the usual case: only demand rows, no copy for the filter
    else:
        keep = np.isin(kind, _DEMAND)
    return {
        "t": np.ascontiguousarray(cols["t_ns"][keep], np.int64),
        # int32 as stored: the kernels take it as it is (a widening copy would cost a pass over every row)
        "region": np.ascontiguousarray(cols["region"][keep]),
        "page": np.ascontiguousarray(cols["page"][keep], np.int64),
        "write": np.ascontiguousarray((cols["flags"][keep] & FLAG_WRITE), np.uint8),
    }


def demand_chunks(trace: Trace, chunk_rows: int = 1 << 20) -> Iterator[dict[str, np.ndarray]]:
    """Demand rows (ACCESS and FAULT_* kinds) in file order, about ``chunk_rows`` at a time."""
    for cols in trace.iter_batches(_COLS, batch_rows=chunk_rows):
        d = _demand(cols)
        if len(d["t"]):
            yield d


def demand_chunks_reversed(trace: Trace) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(global index of the chunk's first demand row, chunk), last row group first."""
    counts = []
    for rg in range(trace.num_row_groups):
        kinds = trace.read_row_group(rg, ["kind"])["kind"]
        counts.append(int(np.isin(kinds, _DEMAND).sum()))
    starts = np.concatenate([[0], np.cumsum(counts)])
    for rg in range(trace.num_row_groups - 1, -1, -1):
        if counts[rg] == 0:
            continue
        yield int(starts[rg]), _demand(trace.read_row_group(rg, _COLS))


def read_demand(trace: Trace) -> dict[str, np.ndarray]:
    """The whole demand stream in memory (metrics and small traces only)."""
    parts = list(demand_chunks(trace))
    if not parts:
        return {k: np.empty(0, np.int64 if k != "write" else np.uint8) for k in ("t", "region", "page", "write")}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
