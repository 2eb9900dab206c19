"""numpy ⇄ Arrow for the trace's numeric, non-null columns, without pandas.

pyarrow's ``pa.array(ndarray)`` and ``Array.to_numpy()`` import pandas on first use,
which costs over a second of start-up in every recorder, importer and reader; these
helpers wrap buffers directly instead (zero-copy where possible).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def to_arrow(arr: np.ndarray, typ: pa.DataType) -> pa.Array:
    arr = np.ascontiguousarray(arr)
    return pa.Array.from_buffers(typ, len(arr), [None, pa.py_buffer(arr)])


def to_numpy(col: pa.Array | pa.ChunkedArray, dtype: np.dtype, writable: bool = False) -> np.ndarray:
    """Numeric Arrow column → numpy; zero-copy (read-only) for one chunk unless ``writable``."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    parts = []
    for a in chunks:
        if a.null_count or pa.types.is_boolean(a.type) or a.type.bit_width != dtype.itemsize * 8:
            parts.append(np.asarray(a.to_numpy(zero_copy_only=False), dtype=dtype))
        else:
            parts.append(np.frombuffer(a.buffers()[1], dtype=dtype, count=len(a), offset=a.offset * dtype.itemsize))
    if not parts:
        return np.empty(0, dtype)
    if len(parts) == 1:
        return parts[0].copy() if writable and not parts[0].flags.writeable else parts[0]
    return np.concatenate(parts)
