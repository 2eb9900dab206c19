"""Trace reader: metadata, regions and columns as numpy arrays, whole or in chunks."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError, check_readable, from_os_error
from pagecast.trace._arrow import to_numpy
from pagecast.trace.regions import Region, regions_from_json
from pagecast.trace.schema import (
    ACCESS_SCHEMA,
    COLUMNS,
    FORMAT_VERSION,
    META_INFO,
    META_KERNELS,
    META_REGIONS,
    META_VERSION,
    metadata_checksum_ok,
)


class Trace:
    """An opened trace file. Cheap to open: only the footer is read."""

    def __init__(self, path: str | Path):
        self.path = check_readable(path, "trace file")
        try:
            # Pages carry CRC-32s (writer.py); a flipped bit fails the read instead of
            # returning different numbers.
            self._pf = pq.ParquetFile(str(self.path), page_checksum_verification=True)
            schema = self._pf.schema_arrow
            names = set(schema.names)
            kv = dict(schema.metadata or {})
            kv.update(self._pf.metadata.metadata or {})
        except PermissionError as e:
            raise from_os_error(e, "cannot read trace file", self.path) from None
        except (pa.ArrowException, OSError, ValueError) as e:  # ValueError: a footer with bad UTF-8
            partial = Path(str(self.path) + ".partial")
            hint = f" (a journal {partial.name} exists: `pagecast recover {partial}`)" if partial.exists() else ""
            raise PagecastError(f"not a Parquet trace ({_short(e)}){hint}", path=self.path) from None
        version = kv.get(META_VERSION)
        if version is None:
            raise PagecastError("Parquet file without pagecast metadata (not a pagecast trace)", path=self.path)
        try:
            self.version = int(version)
        except ValueError:
            raise PagecastError(f"bad format version {version!r}", path=self.path) from None
        if self.version > FORMAT_VERSION:
            raise PagecastError(
                f"trace format version {self.version} is newer than this pagecast reads ({FORMAT_VERSION})",
                path=self.path,
            )
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            raise PagecastError(f"trace lacks columns {missing}", path=self.path)
        wrong = [
            f"{c} is {schema.field(c).type}" for c in COLUMNS if schema.field(c).type != ACCESS_SCHEMA.field(c).type
        ]
        if wrong:
            raise PagecastError(f"trace columns of the wrong type ({', '.join(wrong)})", path=self.path)
        if not metadata_checksum_ok(kv):
            raise PagecastError("corrupt pagecast metadata (checksum mismatch)", path=self.path)
        try:
            self.meta: dict[str, Any] = json.loads(kv.get(META_INFO, b"{}"))
            self.regions: list[Region] = regions_from_json(kv.get(META_REGIONS, b"[]"))
            self.kernels: list[dict[str, Any]] = json.loads(kv.get(META_KERNELS, b"[]"))
            if not isinstance(self.meta, dict) or not isinstance(self.kernels, list):
                raise ValueError("meta is not an object or kernels not a list")
        except (ValueError, TypeError) as e:
            raise PagecastError(f"corrupt pagecast metadata ({_short(e)})", path=self.path) from None

    @property
    def num_rows(self) -> int:
        return self._pf.metadata.num_rows

    def __len__(self) -> int:
        return self.num_rows

    @property
    def num_row_groups(self) -> int:
        return self._pf.num_row_groups

    @property
    def page_size(self) -> int:
        return int(self.meta.get("page_size", PAGE_SIZE))

    @property
    def source(self) -> str:
        return str(self.meta.get("source", "unknown"))

    def region(self, rid: int) -> Region | None:
        return self.regions[rid] if 0 <= rid < len(self.regions) else None

    def _columns(self, columns: Sequence[str] | None) -> list[str]:
        cols = list(COLUMNS) if columns is None else list(columns)
        bad = [c for c in cols if c not in COLUMNS]
        if bad:
            raise ValueError(f"unknown trace columns: {bad}")
        return cols

    def iter_batches(
        self, columns: Sequence[str] | None = None, batch_rows: int = 1 << 20
    ) -> Iterator[dict[str, np.ndarray]]:
        """Yield dicts of numpy columns, ``batch_rows`` rows at a time (bounded memory)."""
        cols = self._columns(columns)
        # Row group by row group: pyarrow's ParquetFile.iter_batches (26.0) keeps ~4 MB of
        # Arrow memory per batch alive until the iterator ends, so memory grew with trace length.
        for rg in range(self._pf.num_row_groups):
            with self._reading():
                table = self._pf.read_row_group(rg, columns=cols, use_threads=True)
            for start in range(0, table.num_rows, batch_rows):
                part = table.slice(start, batch_rows)
                yield {c: to_numpy(part.column(c), COLUMNS[c]) for c in cols}

    def read_row_group(self, rg: int, columns: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """One row group's columns as numpy arrays (checksums verified like every read)."""
        cols = self._columns(columns)
        with self._reading():
            table = self._pf.read_row_group(rg, columns=cols, use_threads=True)
        return {c: to_numpy(table.column(c), COLUMNS[c]) for c in cols}

    def read(self, columns: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """All rows of the given columns as numpy arrays."""
        cols = self._columns(columns)
        with self._reading():
            table = self._pf.read(columns=cols, use_threads=True)
        return {c: to_numpy(table.column(c), COLUMNS[c], writable=True) for c in cols}

    def table(self, columns: Sequence[str] | None = None) -> pa.Table:
        cols = self._columns(columns)
        with self._reading():
            return self._pf.read(columns=cols, use_threads=True)

    @contextlib.contextmanager
    def _reading(self):
        """Damaged pages (failed checksum, bad compression, torn file) → one line naming the trace."""
        try:
            yield
        except PermissionError as e:
            raise from_os_error(e, "cannot read trace file", self.path) from None
        except (pa.ArrowException, OSError, ValueError, IndexError) as e:
            raise PagecastError(f"corrupt trace data ({_short(e)})", path=self.path) from None

    def __repr__(self) -> str:
        return f"Trace({str(self.path)!r}, rows={self.num_rows}, regions={len(self.regions)}, source={self.source!r})"


def open_trace(path: str | Path) -> Trace:
    return Trace(path)


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:160]
