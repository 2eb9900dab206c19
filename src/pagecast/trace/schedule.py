"""Schedules: prefetch decisions computed ahead of time, replayed by consumers.

A schedule row says: after the demand event number ``trigger`` of the stream (and at
time ``t_ns``), prefetch ``page`` of ``region``, with confidence ``score``. Rows are
computed causally (never looking past the trigger), so the simulator can replay a learned
model's output without importing torch, and the live loop can stream the same rows.

``trigger`` indexes the *demand stream* of the trace it was computed from: the rows whose
kind is in ``meta["stream_kinds"]`` (by default every fault and access kind), in trace
order. The regions of that trace are stored too, so the schedule can be mapped onto the
regions of another run (``pagecast.trace.match_regions``).

File: Parquet with columns trigger:int64, t_ns:int64, region:int32, page:int64,
score:float32, sorted by trigger, and ``pagecast.schedule`` JSON metadata.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pagecast.errors import PagecastError, check_readable, from_os_error
from pagecast.trace.regions import Region, regions_from_json, regions_to_json
from pagecast.trace.schema import META_CHECKSUM, metadata_checksum, metadata_checksum_ok
from pagecast.util.atomic import atomic_output

SCHEDULE_COLUMNS: dict[str, np.dtype] = {
    "trigger": np.dtype(np.int64),
    "t_ns": np.dtype(np.int64),
    "region": np.dtype(np.int32),
    "page": np.dtype(np.int64),
    "score": np.dtype(np.float32),
}
SCHEDULE_SCHEMA = pa.schema([pa.field(c, pa.from_numpy_dtype(d), nullable=False) for c, d in SCHEDULE_COLUMNS.items()])
META_SCHEDULE = b"pagecast.schedule"
META_SCHEDULE_REGIONS = b"pagecast.regions"


@dataclass
class Schedule:
    trigger: np.ndarray
    t_ns: np.ndarray
    region: np.ndarray
    page: np.ndarray
    score: np.ndarray
    regions: list[Region] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for c, dt in SCHEDULE_COLUMNS.items():
            setattr(self, c, np.asarray(getattr(self, c), dtype=dt))
        n = len(self.trigger)
        if any(len(getattr(self, c)) != n for c in SCHEDULE_COLUMNS):
            raise ValueError("schedule columns have different lengths")

    def __len__(self) -> int:
        return len(self.trigger)

    @classmethod
    def empty(cls) -> "Schedule":
        return cls(*(np.empty(0, d) for d in SCHEDULE_COLUMNS.values()))

    def sorted(self) -> "Schedule":
        """Rows by trigger, best score first within a trigger."""
        order = np.lexsort((-self.score, self.trigger))
        return Schedule(*(getattr(self, c)[order] for c in SCHEDULE_COLUMNS), regions=self.regions, meta=self.meta)

    def remap_regions(self, mapping: dict[int, int]) -> "Schedule":
        """Rename region ids (old run → new run); rows whose region has no match are dropped."""
        lut_keys = np.array(sorted(mapping), dtype=np.int64)
        lut_vals = np.array([mapping[k] for k in lut_keys], dtype=np.int32)
        pos = np.searchsorted(lut_keys, self.region)
        ok = (
            (pos < len(lut_keys)) & (lut_keys[np.minimum(pos, len(lut_keys) - 1)] == self.region)
            if len(lut_keys)
            else np.zeros(len(self), bool)
        )
        new_region = (
            lut_vals[np.minimum(pos, max(len(lut_keys) - 1, 0))][ok] if len(lut_keys) else np.empty(0, np.int32)
        )
        return Schedule(
            self.trigger[ok], self.t_ns[ok], new_region, self.page[ok], self.score[ok], meta=dict(self.meta)
        )


def write_schedule(
    path: str | Path, schedule: Schedule, regions: Sequence[Region] | None = None, meta: dict[str, Any] | None = None
) -> Path:
    path = Path(path)
    s = schedule.sorted()
    table = pa.table({c: getattr(s, c) for c in SCHEDULE_COLUMNS}, schema=SCHEDULE_SCHEMA)
    info = dict(schedule.meta)
    info.update(meta or {})
    kv = {
        META_SCHEDULE: json.dumps(info).encode(),
        META_SCHEDULE_REGIONS: regions_to_json(list(regions if regions is not None else schedule.regions)).encode(),
    }
    kv[META_CHECKSUM] = metadata_checksum(kv)
    table = table.replace_schema_metadata(kv)
    with atomic_output(path) as tmp:
        pq.write_table(table, str(tmp), compression="zstd", write_page_checksum=True)
    return path


def read_schedule(path: str | Path) -> Schedule:
    path = check_readable(path, "schedule file")
    try:
        pf = pq.ParquetFile(str(path), page_checksum_verification=True)
        schema = pf.schema_arrow
        names = set(schema.names)
        kv = dict(schema.metadata or {})
    except PermissionError as e:
        raise from_os_error(e, "cannot read schedule file", path) from None
    except (pa.ArrowException, OSError, ValueError) as e:  # ValueError: a footer with bad UTF-8
        raise PagecastError(f"not a Parquet schedule ({_short(e)})", path=path) from None
    if META_SCHEDULE not in kv:
        raise PagecastError("Parquet file without pagecast schedule metadata (not a schedule)", path=path)
    missing = [c for c in SCHEDULE_COLUMNS if c not in names]
    if missing:
        raise PagecastError(f"schedule lacks columns {missing}", path=path)
    wrong = [
        f"{c} is {schema.field(c).type}"
        for c in SCHEDULE_COLUMNS
        if schema.field(c).type != SCHEDULE_SCHEMA.field(c).type
    ]
    if wrong:
        raise PagecastError(f"schedule columns of the wrong type ({', '.join(wrong)})", path=path)
    if not metadata_checksum_ok(kv):
        raise PagecastError("corrupt schedule metadata (checksum mismatch)", path=path)
    try:
        t = pf.read(columns=list(SCHEDULE_COLUMNS))
        cols = [t.column(c).to_numpy() for c in SCHEDULE_COLUMNS]
    except PermissionError as e:
        raise from_os_error(e, "cannot read schedule file", path) from None
    except (pa.ArrowException, OSError, ValueError, IndexError) as e:
        raise PagecastError(f"corrupt schedule data ({_short(e)})", path=path) from None
    try:
        meta = json.loads(kv[META_SCHEDULE])
        regions = regions_from_json(kv.get(META_SCHEDULE_REGIONS, b"[]"))
        if not isinstance(meta, dict):
            raise ValueError("metadata is not an object")
    except (ValueError, TypeError) as e:
        raise PagecastError(f"corrupt schedule metadata ({_short(e)})", path=path) from None
    sched = Schedule(*cols, regions=regions, meta=meta)
    check_schedule(sched, path)
    return sched


def check_schedule(s: Schedule, path: str | Path | None = None) -> None:
    """Refuse scores that are not finite numbers: NaN sorts anywhere and would pick pages at random."""
    bad = ~np.isfinite(s.score)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise PagecastError(f"schedule row {i}: score {s.score[i]} is not a finite number", path=path)


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:160]
