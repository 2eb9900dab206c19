"""Output shared by the commands and the library's report printers: strict JSON, aligned tables, progress bars.

It lives below the CLI so that library code that prints a report (the CUDA recorder's
summary, the PPO trainer's progress bar) does not import the command layer.
"""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:
    from tqdm import tqdm


def print_json(obj: Any) -> None:
    """Strict JSON: NaN and infinities (no value) become null, never a bare NaN token."""
    json.dump(_finite(obj), sys.stdout, indent=2, default=_jsonable, allow_nan=False)
    sys.stdout.write("\n")


def _finite(o: Any) -> Any:
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def _jsonable(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o) if math.isfinite(o) else None
    if isinstance(o, np.ndarray):
        return _finite(o.tolist())
    if hasattr(o, "__fspath__"):
        return str(o)
    if hasattr(o, "__dataclass_fields__"):
        import dataclasses

        return _finite(dataclasses.asdict(o))
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def fmt(v: Any) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        if v == 0:
            return "0"
        if abs(v) >= 1e6 or abs(v) < 1e-3:
            return f"{v:.3g}"
        return f"{v:,.3f}".rstrip("0").rstrip(".")
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Plain aligned text table; numbers right-aligned."""
    if not rows:
        return "(no rows)"
    cols = list(columns or rows[0].keys())
    cells = [[fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    numeric = [all(isinstance(r.get(c), (int, float)) for r in rows) for c in cols]

    def line(vals: Iterable[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)).rstrip()

    out = [line(cols), line("-" * w for w in widths)]
    out += [line(row) for row in cells]
    return "\n".join(out)


def progress(total: int | None = None, desc: str = "", unit: str = "it", disable: bool | None = None) -> "tqdm":
    """A progress bar on stderr, hidden when stderr is not a terminal unless forced. tqdm is
    imported here: its import (importlib.metadata for its version) cost every command 80 ms."""
    from tqdm import tqdm

    if disable is None:
        disable = not sys.stderr.isatty()
    return tqdm(
        total=total, desc=desc, unit=unit, unit_scale=True, disable=disable, file=sys.stderr, dynamic_ncols=True
    )
