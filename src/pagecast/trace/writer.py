"""Streaming trace writer.

Rows are staged in row-group-sized numpy buffers and written as Parquet row groups, so
a trace larger than memory can be written. The file appears under its final name only when it is
complete (temporary name + rename).

With ``journal=True`` (recorders that run beside a program which may crash, or inside
it) rows go first to an Arrow IPC stream ``<path>.partial`` flushed at every row group,
with regions appended to ``<path>.partial.regions``; ``close()`` converts it into the
Parquet trace. If the process dies first, ``recover_partial`` turns the journal into a
trace holding every complete row group.

Parquet row groups are encoded on a background thread (pyarrow releases the GIL while
encoding), so the producer (an importer parsing its input, or the journal conversion
reading and decompressing IPC batches) runs while the previous row group is encoded.
``write()`` copies what it keeps of the caller's arrays into two reused row-group
buffers (one being encoded, one being filled: warm memory, half the cost of a fresh
copy), so callers may reuse their buffers at once; ``write(copy=False)`` and
``write_table()`` hand immutable arrays over and whole row groups are encoded straight
from them.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from pagecast import __version__
from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError, check_output, check_readable, os_error_text
from pagecast.trace._arrow import to_arrow, to_numpy
from pagecast.trace.regions import Region, regions_to_json
from pagecast.trace.schema import (
    ACCESS_SCHEMA,
    COLUMNS,
    DEFAULTS,
    FORMAT_VERSION,
    META_CHECKSUM,
    META_INFO,
    META_KERNELS,
    META_REGIONS,
    META_VERSION,
    metadata_checksum,
)
from pagecast.util.atomic import create_exclusive, temp_path_for

DEFAULT_ROW_GROUP = 1 << 20
# Encodings chosen per column with benchmarks/trace_io.py and re-encoded real traces
# (perf recordings, a lackey import): each column timed alone, then all together; see
# docs/trace-format.md. DELTA_BINARY_PACKED for t_ns and page (sorted times and local
# page walks: deltas are several times smaller than anything else). BYTE_STREAM_SPLIT for
# region, tid and ip: Arrow's delta encoder costs about twice what byte-splitting does
# (figures in docs/trace-format.md), and lz4 on the split bytes keeps these columns about as small on real traces
# (few regions/threads, runs of equal values; ip: high bytes constant). PLAIN for the
# one/four-byte kind, flags, bytes. lz4 stays on every column: on real traces it shrinks
# bit-packed deltas of regular patterns (lackey t_ns and page). Dictionaries and
# per-column statistics cost most of the write time, so there are none, except
# statistics on t_ns (time-range pruning). BYTE_STREAM_SPLIT on integer columns needs a
# reader with pyarrow >= 17.
COMPRESSION = "lz4"
DELTA_COLUMNS = ("t_ns", "page")
SPLIT_COLUMNS = ("region", "tid", "ip")
COLUMN_ENCODING = {
    c: ("DELTA_BINARY_PACKED" if c in DELTA_COLUMNS else "BYTE_STREAM_SPLIT" if c in SPLIT_COLUMNS else "PLAIN")
    for c in COLUMNS
}
STATISTICS_COLUMNS = ["t_ns"]
# Arrow IPC has no checksums: each journal batch carries the CRC-32 of its column values
# in the batch's custom metadata, so recovery stops at a damaged batch instead of
# copying altered rows into the trace.
JOURNAL_BATCH_CRC = "pagecast.crc32"


def batch_checksum(batch: pa.RecordBatch) -> str:
    crc = 0
    for i, dt in enumerate(COLUMNS.values()):
        crc = zlib.crc32(np.ascontiguousarray(to_numpy(batch.column(i), dt)), crc)
    return str(crc)


def _journal_line(obj: dict[str, Any]) -> str:
    """One regions-journal line: JSON, a tab, the CRC-32 of the JSON (json.dumps never writes a raw tab)."""
    text = json.dumps(obj)
    return f"{text}\t{zlib.crc32(text.encode()):08x}\n"


def _parse_journal_line(raw: bytes) -> Any:
    text, tab, crc = raw.rpartition(b"\t")
    if not tab:  # journals from before line checksums
        text = raw
    elif crc != b"%08x" % zlib.crc32(text):
        raise ValueError("checksum mismatch")
    return json.loads(text.decode("utf-8"))


def _create_journal(partial: Path):
    """Create ``<out>.partial.regions`` and ``<out>.partial`` exclusively (never through a symlink)."""
    regions_path = Path(str(partial) + ".regions")
    created: list[Path] = []
    files = []
    try:
        for p in (regions_path, partial):
            try:
                fd = create_exclusive(p)
            except FileExistsError:
                raise PagecastError(
                    "exists already: the journal of an interrupted recording (`pagecast recover` it) or a file "
                    "in the way; remove it to record here",
                    path=p,
                ) from None
            created.append(p)
            # unbuffered journal: each flushed batch is in the kernel at once (survives kill -9)
            files.append(os.fdopen(fd, "w") if p == regions_path else os.fdopen(fd, "wb", buffering=0))
    except BaseException:
        for f in files:
            f.close()
        for p in created:
            p.unlink(missing_ok=True)
        raise
    return files[0], files[1]


def host_facts() -> dict[str, str]:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"kernel": platform.release(), "machine": platform.machine(), "cpu": cpu, "hostname": platform.node()}


class TraceWriter:
    """Write a trace in row groups. Use as a context manager or call ``close()``.

    ``meta`` goes into the file metadata (page_size, source, command, ...). Regions can be
    given up front or added while writing (a recorder discovers mappings as it goes).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        regions: Sequence[Region] = (),
        meta: dict[str, Any] | None = None,
        page_size: int = PAGE_SIZE,
        source: str = "unknown",
        row_group_rows: int = DEFAULT_ROW_GROUP,
        journal: bool = False,
        compression: str = COMPRESSION,
    ):
        self.path = Path(path)
        self.row_group_rows = int(row_group_rows)
        self.regions: list[Region] = []
        self.kernels: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {
            "page_size": page_size,
            "source": source,
            "recorder": f"pagecast {__version__}",
            "host": host_facts(),
            "created_unix": time.time(),
        }
        self.meta.update(meta or {})
        self.rows = 0
        self.sorted = True
        self._last_t = np.iinfo(np.int64).min
        # Two reused row-group buffers: one being encoded, one being filled.
        self._slots: list[dict[str, np.ndarray] | None] = [None, None]
        self._cur = 0
        self._staged = 0  # rows in slot _cur
        self._closed = False
        self._journal = journal
        self._compression = compression
        self._encoder: ThreadPoolExecutor | None = None
        self._pending: Future | None = None
        check_output(self.path)
        try:
            if journal:
                self._partial = Path(str(self.path) + ".partial")
                regions_file, partial_file = _create_journal(self._partial)
                self._regions_journal = regions_file
                self._regions_journal.write(_journal_line({"__meta__": self.meta}))
                self._regions_journal.flush()
                self._sink = pa.PythonFile(partial_file, mode="w")
                # lz4 buffers: a 50 M-fault recording journals ~0.4 GB instead of 2 GB
                self._ipc = ipc.new_stream(self._sink, ACCESS_SCHEMA, options=ipc.IpcWriteOptions(compression="lz4"))
                # the stream's header now, not with the first rows: a recorder killed before
                # any row leaves a journal `recover` reads (no rows), not an empty file
                empty = pa.RecordBatch.from_pylist([], schema=ACCESS_SCHEMA)
                self._ipc.write_batch(empty, custom_metadata={JOURNAL_BATCH_CRC: batch_checksum(empty)})
            else:
                self._tmp = temp_path_for(self.path)
                self._pq = pq.ParquetWriter(
                    str(self._tmp),
                    ACCESS_SCHEMA,
                    compression=compression,
                    use_dictionary=False,
                    column_encoding=COLUMN_ENCODING,
                    write_statistics=STATISTICS_COLUMNS,
                    write_page_checksum=True,
                )
                # one worker and at most one row group queued: bounded memory, ordered groups
                self._encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pagecast-trace-encoder")
        except OSError as e:
            if journal and hasattr(self, "_partial") and hasattr(self, "_regions_journal"):
                # a journal that could not even take its header (disk full) is not left behind
                with contextlib.suppress(Exception):
                    self._regions_journal.close()
                _remove_journal(self._partial)
            if not journal and hasattr(self, "_tmp"):
                self._tmp.unlink(missing_ok=True)
            raise PagecastError(f"cannot write trace: {os_error_text(e)}", path=self.path) from None
        for r in regions:
            self.add_region(r)

    # -- regions -------------------------------------------------------------------
    def add_region(self, region: Region) -> int:
        """Append a region; its id becomes its index. Returns the id."""
        region.id = len(self.regions)
        self.regions.append(region)
        if self._journal:
            self._regions_journal.write(_journal_line(region.to_dict()))
            self._regions_journal.flush()
        return region.id

    def update_region(self, region_id: int, **changes: Any) -> None:
        r = self.regions[region_id]
        for k, v in changes.items():
            setattr(r, k, v)
        if self._journal:
            self._regions_journal.write(_journal_line(r.to_dict()))
            self._regions_journal.flush()

    def add_kernel(self, name: str, start_ns: int, end_ns: int, **extra: Any) -> int:
        self.kernels.append({"name": name, "start_ns": int(start_ns), "end_ns": int(end_ns), **extra})
        return len(self.kernels) - 1

    # -- rows ----------------------------------------------------------------------
    def write(self, *, copy: bool = True, **cols: Any) -> None:
        """Append rows. Each column is an array or a scalar broadcast to the others' length.

        Missing columns take their defaults (region -1, tid -1, zeros elsewhere).
        Row groups are encoded on a background thread after this returns, so by default
        the writer keeps no reference to the caller's arrays: rows are copied into the
        writer's own reused row-group buffers (arrays the writer converts to the column's
        dtype are fresh already and are not copied again). ``copy=False`` hands the arrays
        over instead: whole row groups are then encoded straight from them, and the caller
        must not modify them afterwards (like memory handed to Arrow).
        """
        if self._closed:
            raise RuntimeError("trace writer is closed")
        unknown = set(cols) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown trace columns: {sorted(unknown)}")
        n = None
        for v in cols.values():
            if np.ndim(v) > 0:
                m = len(v)
                if n is not None and m != n:
                    raise ValueError("trace columns have different lengths")
                n = m
        if n is None:
            n = 1
        if n == 0:
            return
        columns = {name: _column(cols.get(name, DEFAULTS[name]), dt, copy) for name, dt in COLUMNS.items()}
        self._note_order(columns["t_ns"].data)
        pos = 0
        while pos < n:
            take = min(n - pos, self.row_group_rows - self._staged)
            if self._staged == 0 and take == self.row_group_rows:
                self._emit_direct(columns, pos, take)
            else:
                slot = self._slot()
                for name, c in columns.items():
                    slot[name][self._staged : self._staged + take] = c.data if c.scalar else c.data[pos : pos + take]
                self._staged += take
                if self._staged == self.row_group_rows:
                    self._flush_staged()
            pos += take

    def write_table(self, table: pa.Table) -> None:
        """Append rows from an Arrow table or record batch that has the trace columns.

        Arrow memory is immutable, so its buffers are encoded without a copy.
        """
        self.write(copy=False, **{c: to_numpy(table.column(c), COLUMNS[c]) for c in COLUMNS if c in table.column_names})

    def _note_order(self, t: np.ndarray | np.generic) -> None:
        if np.ndim(t) == 0:
            first = last = int(t)
        else:
            first, last = int(t[0]), int(t[-1])
            if self.sorted and len(t) > 1 and np.any(t[1:] < t[:-1]):
                self.sorted = False
        if first < self._last_t:
            self.sorted = False
        self._last_t = last

    def _slot(self) -> dict[str, np.ndarray]:
        """The row-group buffer being filled. Allocated once (untouched pages cost nothing), then reused."""
        slot = self._slots[self._cur]
        if slot is None:
            slot = self._slots[self._cur] = {c: np.empty(self.row_group_rows, dt) for c, dt in COLUMNS.items()}
        return slot

    def _emit_direct(self, columns: dict[str, "_Column"], pos: int, rows: int) -> None:
        """A whole row group from one write(): encode the caller's arrays where that is safe."""
        group: dict[str, np.ndarray] = {}
        used_slot = False
        for name, c in columns.items():
            if c.scalar:
                group[name] = np.full(rows, c.data, COLUMNS[name])
            elif c.owned or self._journal:  # the journal writes synchronously: nothing outlives this call
                group[name] = c.data[pos : pos + rows]
            else:
                dst = self._slot()[name][:rows]
                np.copyto(dst, c.data[pos : pos + rows])
                group[name] = dst
                used_slot = True
        self._emit(group, rows, used_slot)

    def _flush_staged(self) -> None:
        if self._staged:
            rows, self._staged = self._staged, 0
            slot = self._slot()
            self._emit({c: slot[c][:rows] for c in COLUMNS}, rows, True)

    def _emit(self, group: dict[str, np.ndarray], rows: int, used_slot: bool) -> None:
        batch = pa.record_batch(
            [to_arrow(group[c], ACCESS_SCHEMA.field(c).type) for c in COLUMNS], schema=ACCESS_SCHEMA
        )
        if self._journal:
            self._ipc.write_batch(batch, custom_metadata={JOURNAL_BATCH_CRC: batch_checksum(batch)})
            self._sink.flush()
        else:
            # The group being encoded never uses slot ``_cur``; after this wait nothing is
            # pending, so the other slot is free for the next group.
            self._wait_encoder()
            assert self._encoder is not None
            self._pending = self._encoder.submit(self._pq.write_batch, batch, row_group_size=self.row_group_rows)
        if used_slot:
            self._cur ^= 1
        self.rows += rows

    def _wait_encoder(self) -> None:
        """Wait for the row group being encoded; re-raises its error (e.g. disk full) here."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _stop_encoder(self) -> None:
        if self._encoder is not None:
            self._encoder.shutdown(wait=True)
            self._encoder = None

    # -- finishing -----------------------------------------------------------------
    def _file_metadata(self) -> dict[bytes, bytes]:
        meta = dict(self.meta)
        meta["rows"] = self.rows
        meta["sorted_by_time"] = self.sorted
        kv = {
            META_VERSION: str(FORMAT_VERSION).encode(),
            META_INFO: json.dumps(meta).encode(),
            META_REGIONS: regions_to_json(self.regions).encode(),
            META_KERNELS: json.dumps(self.kernels).encode(),
        }
        kv[META_CHECKSUM] = metadata_checksum(kv)
        return kv

    def close(self) -> Path:
        if self._closed:
            return self.path
        if self._journal:
            self._flush_staged()
            self._closed = True
            self._slots = [None, None]  # the conversion below stages its own row groups
            self._ipc.close()
            self._sink.close()
            self._regions_journal.close()
            _journal_to_parquet(
                self._partial, self.path, self.regions, self.meta, self.kernels, self._compression, self.row_group_rows
            )
            _remove_journal(self._partial)
        else:
            try:
                self._flush_staged()
                self._wait_encoder()
                meta = self._file_metadata()
            except BaseException:
                self.abort()  # an encoding error (disk full, ...) leaves no temp file behind
                raise
            self._closed = True
            self._slots = [None, None]
            try:
                self._stop_encoder()
                self._pq.add_key_value_metadata(meta)
                self._pq.close()
                os.replace(self._tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    self._tmp.unlink()
                raise
        return self.path

    def abort(self) -> None:
        """Stop without producing a trace (the journal, if any, is kept for recovery)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            if self._journal:
                self._flush_staged()
                self._ipc.close()
                self._sink.close()
                self._regions_journal.close()
            else:
                with contextlib.suppress(Exception):
                    self._wait_encoder()
                self._stop_encoder()
                self._pq.close()
                self._tmp.unlink()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _remove_journal(partial: Path) -> None:
    for p in (partial, Path(str(partial) + ".regions")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _read_regions_journal(path: Path) -> tuple[list[Region], dict[str, Any], bool]:
    """Regions and metadata from ``<out>.partial.regions``: (regions, meta, found).

    Lines are written whole and flushed one by one, so a crash can only leave the last
    line unfinished (no newline): that line is dropped. Any complete line that is not a
    region record is damage, refused with its line number.
    """
    regions: dict[int, Region] = {}
    meta: dict[str, Any] = {}
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], meta, False
    except OSError as e:
        raise PagecastError(f"cannot read regions journal: {os_error_text(e)}", path=path) from None
    lines = data.split(b"\n")[:-1]  # the part after the last newline is a torn line
    for no, raw in enumerate(lines, 1):
        try:
            d = _parse_journal_line(raw)
            if no == 1:
                if not (isinstance(d, dict) and isinstance(d.get("__meta__"), dict)):
                    raise ValueError("the first line is not the recording's metadata")
                meta = d["__meta__"]
                continue
            r = Region.from_dict(d)
        except (ValueError, TypeError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise PagecastError(
                f"not a regions journal line ({str(e).splitlines()[0][:100]})", path=path, line=no
            ) from None
        regions[r.id] = r
    if sorted(regions) != list(range(len(regions))):
        raise PagecastError("region ids are not 0, 1, 2, ... (damaged regions journal)", path=path)
    return [regions[i] for i in range(len(regions))], meta, True


@dataclass
class JournalCopy:
    """What a journal conversion kept: rows and batches copied, and why it stopped early if it did."""

    rows: int = 0
    batches: int = 0
    stopped: str | None = None  # None: the journal ended cleanly


def _open_journal(partial: Path) -> tuple[Any, ipc.RecordBatchStreamReader]:
    try:
        src = pa.OSFile(str(partial), "rb")
    except PermissionError as e:
        raise PagecastError(f"cannot read journal: {os_error_text(e)}", path=partial) from None
    try:
        reader = ipc.open_stream(src)
    except (pa.ArrowException, OSError, ValueError) as e:
        src.close()
        raise PagecastError(f"not a pagecast journal (no Arrow IPC stream: {_short_error(e)})", path=partial) from None
    if not reader.schema.equals(ACCESS_SCHEMA):
        src.close()
        raise PagecastError(f"not a pagecast journal (columns {reader.schema.names})", path=partial)
    return src, reader


def _journal_to_parquet(
    partial: Path,
    out: Path,
    regions: Sequence[Region],
    meta: dict[str, Any],
    kernels: list,
    compression: str,
    row_group_rows: int = DEFAULT_ROW_GROUP,
) -> JournalCopy:
    """Copy every complete, intact record batch of an IPC journal into a Parquet trace."""
    src, reader = _open_journal(partial)
    copy = JournalCopy()
    try:
        writer = TraceWriter(out, regions=(), meta=meta, compression=compression, row_group_rows=row_group_rows)
    except BaseException:
        src.close()
        raise
    writer.regions = list(regions)
    writer.kernels = list(kernels)
    writer.meta = dict(meta)
    try:
        with src:
            while True:
                try:
                    batch, custom = reader.read_next_batch_with_custom_metadata()
                    # IPC reading trusts the stored lengths and offsets: check them before use
                    batch.validate(full=True)
                    if any(col.null_count for col in batch.columns):
                        raise ValueError("null values in a trace column")
                except StopIteration:
                    break
                except (pa.ArrowException, OSError, ValueError) as e:
                    copy.stopped = f"batch {copy.batches + 1} is torn or damaged ({_short_error(e)})"
                    break
                want = (custom or {}).get(JOURNAL_BATCH_CRC.encode())
                if want is not None and want.decode(errors="replace") != batch_checksum(batch):
                    copy.stopped = f"batch {copy.batches + 1} fails its checksum"
                    break
                if not batch.num_rows:
                    continue  # the header batch every journal starts with
                writer.write_table(batch)
                copy.batches += 1
                copy.rows += batch.num_rows
        if copy.stopped:
            writer.meta["recovered_truncated"] = True
            writer.meta["recovery_stopped"] = copy.stopped
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return copy


@dataclass
class Recovery:
    """The result of ``recover_partial``: what was recovered from where."""

    trace: str
    journal: str
    rows: int
    batches: int
    regions: int
    regions_journal: bool  # False: <journal>.regions was missing (rows keep their region ids, no region list)
    truncated: bool
    stopped: str | None
    journal_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def recover_partial(partial: str | Path, out: str | Path | None = None) -> Recovery:
    """Turn the journal of a writer that never closed into a trace (intact row groups only).

    Refuses anything that is not a journal (a finished trace, a CSV, an empty file) and
    never writes over the journal or its regions file.
    """
    partial = check_readable(partial, "journal")
    size = partial.stat().st_size
    with open(partial, "rb") as f:
        head = f.read(4)
    if size == 0:
        raise PagecastError("empty file, not a journal (nothing to recover)", path=partial)
    if head == b"PAR1":
        raise PagecastError("a finished Parquet file, not a journal (nothing to recover)", path=partial)
    src, _ = _open_journal(partial)  # refuse a non-journal before touching anything
    src.close()
    if out is None:
        if not partial.name.endswith(".partial") or partial.name == ".partial":
            raise PagecastError("journal name does not end in .partial: say where the trace goes with -o", path=partial)
        out = partial.with_name(partial.name.removesuffix(".partial"))
    out = Path(out)
    regions_path = Path(str(partial) + ".regions")
    for p in (partial, regions_path):
        if _same_file(out, p):
            raise PagecastError(f"the output would overwrite the journal {p}", path=out)
    regions, meta, found = _read_regions_journal(regions_path)
    meta["recovered_from"] = str(partial)
    copy = _journal_to_parquet(partial, out, regions, meta, [], COMPRESSION)
    return Recovery(
        trace=str(out),
        journal=str(partial),
        rows=copy.rows,
        batches=copy.batches,
        regions=len(regions),
        regions_journal=found,
        truncated=copy.stopped is not None,
        stopped=copy.stopped,
        journal_bytes=size,
    )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _short_error(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:120]


class _Column(NamedTuple):
    data: np.ndarray | np.generic
    scalar: bool
    owned: bool  # no one else can modify ``data``: the writer may encode it after write() returns


def _column(v: Any, dt: np.dtype, copy: bool) -> _Column:
    if np.ndim(v) == 0:
        return _Column(dt.type(v), True, True)
    a = np.asarray(v, dtype=dt)
    if a.ndim != 1:
        raise ValueError(f"trace columns are 1-D (got shape {a.shape})")
    # A dtype conversion or a Python sequence produced a fresh array nobody else holds.
    owned = (
        not copy or isinstance(v, (list, tuple, range)) or (isinstance(v, np.ndarray) and not np.may_share_memory(a, v))
    )
    return _Column(a, False, owned)
