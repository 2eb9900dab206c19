"""Look up a kernel tracepoint's perf id and field offsets in tracefs (read only)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TRACEFS_ROOTS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
_FIELD = re.compile(r"field:[^;]*?(\w+)(\[\d*\])?;\s*offset:(\d+);\s*size:(\d+);")


@dataclass(frozen=True)
class Tracepoint:
    system: str
    name: str
    id: int
    offsets: dict[str, int]  # field name -> byte offset in the raw record
    sizes: dict[str, int]


def find_tracepoint(system: str, name: str) -> tuple[Tracepoint | None, str]:
    """The tracepoint, or None and why it cannot be used."""
    why = "tracefs not mounted (or not readable) at " + " or ".join(map(str, TRACEFS_ROOTS))
    for root in TRACEFS_ROOTS:
        d = root / "events" / system / name
        try:
            tp_id = int((d / "id").read_text())
            fmt = (d / "format").read_text()
        except FileNotFoundError:
            if (root / "events").is_dir():
                why = f"kernel has no tracepoint {system}:{name}"
            continue
        except (OSError, ValueError) as e:
            why = f"cannot read {d}: {getattr(e, 'strerror', None) or e}"
            continue
        offsets, sizes = {}, {}
        for m in _FIELD.finditer(fmt):
            offsets[m.group(1)] = int(m.group(3))
            sizes[m.group(1)] = int(m.group(4))
        return Tracepoint(system, name, tp_id, offsets, sizes), ""
    return None, why
