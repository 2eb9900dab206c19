"""userfaultfd pager: a file served page by page into a budget-limited region.

The C core (``native/pager/pager.c``) owns the region and its fault-handler thread; this
module only configures it, reads its counters and converts its binary fault log into a
pagecast trace. Nothing here runs per fault: a Python handler would deadlock as soon as
the faulting access holds the GIL, and the core never calls back.

Three ways to use it:
  * ``open_paged(path, budget, policy=...)`` → ``PagedRegion`` in this process (numpy view);
  * ``run_with_pager(cmd, [(file, budget)], policy=...)`` → an unmodified program under the
    LD_PRELOAD shim (``native/pager/shim.c``);
  * ``pagecast pager run FILE:BUDGET -- CMD`` (``pagecast.cli.pager``).

Policies (the pager's entries of the policy registry, ``pagecast.policies``; ids in
``native/policy/pc_policy_ids.h``; specs parsed by ``pagecast.policies.spec``): ``none``,
``nextline[:N]`` (N pages per batch in the window of ``policies/nextline.py``),
``stride[:N]`` (the rule of ``policies/stride.py``), ``sparse[:N]`` (BowerAccess: the
learned set of pages, in increasing order), ``table:FILE`` (a page → pages table built
offline from a schedule or from any pagecast ``Prefetcher`` run over a trace, see
``build_table``). ``next[:N]``, the old name, is kept as a deprecated alias: ``nextline``
with ``before=0`` (pages p+1 … p+N, as before); using it warns in one line.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from pagecast.constants import PAGE_SIZE, PAGER_SHIM_SOURCES
from pagecast.errors import PagecastError, check_output, check_readable, from_os_error, one_line, os_error_text
from pagecast.policies.base import BATCH_PAGES, alias, policy_entry, require
from pagecast.policies.spec import parse_policy_spec
from pagecast.trace.demand import read_demand_columns
from pagecast.trace.regions import Region
from pagecast.trace.schema import Kind
from pagecast.util.native import build, native_dir
from pagecast.util.preload import preload_list
from pagecast.util.process import run_program
from pagecast.util.sizes import is_size, parse_size

# Binary layouts mirrored from native/pager/pager.h (tests/test_binary_layouts.py compares them).
LOG_HEADER = 4096
LOG_MAGIC = b"PGCLOG1\0"
LOG_VERSION = 1
LOG_HEADER_DTYPE = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("page_size", "<u4"),
        ("file_offset", "<u8"),
        ("length", "<u8"),
        ("t0_ns", "<i8"),
        ("pid", "<i4"),
        ("policy", "<i4"),
        ("budget_pages", "<u8"),
        ("path", "S%d" % (LOG_HEADER - 56)),
    ]
)
LOG_RECORD = np.dtype(
    [("t_ns", "<i8"), ("page", "<i8"), ("kind", "u1"), ("flags", "u1"), ("pad", "<u2"), ("tid", "<i4")]
)
TABLE_VERSION = 1
TABLE_MAGIC = b"PGCTAB%d\0" % TABLE_VERSION  # "PGCTAB", the version as one ASCII digit, NUL
TABLE_HEADER_DTYPE = np.dtype([("magic", "S8"), ("npages", "<u8")])


# ---- native library ------------------------------------------------------------------


class _Config(ctypes.Structure):
    _fields_ = [
        ("budget_pages", ctypes.c_uint64),
        ("policy", ctypes.c_int),
        ("depth", ctypes.c_int),
        ("writeback", ctypes.c_int),
        ("log_fd", ctypes.c_int),
        ("on_eof_sigbus", ctypes.c_int),
        ("learn_path", ctypes.c_char_p),
        ("flush_ms", ctypes.c_int),
        ("before", ctypes.c_int),
        ("min_conf", ctypes.c_int),
    ]


_STAT_FIELDS = [
    "faults", "wp_faults", "late_faults", "prefetched", "prefetch_hits", "prefetch_evicted_untouched",
    "evictions", "writebacks", "writeback_skipped_eof", "eof_faults", "resident", "max_resident",
    "copy_ioctls", "bytes_read", "service_ns_total", "nsamples",
]  # fmt: skip


_PLAN_FIELDS = ["plan_keep_resident", "plan_keep_demoted", "plan_after_use", "plan_regrets", "plan_stream_off"]
_TAIL_FIELDS = ["unmap_calls", "plan_scan_ahead"]
_PACK_FIELDS = ["pack_pages", "pack_installed", "pack_skipped", "pack_bytes_read", "pack_deferred", "pack_done_ns"]


class _Stats(ctypes.Structure):
    _fields_ = (
        [(n, ctypes.c_uint64) for n in _STAT_FIELDS]
        + [("errors", ctypes.c_int32), ("wp_enabled", ctypes.c_int32)]
        + [(n, ctypes.c_uint64) for n in _PACK_FIELDS]
        + [("pack_state", ctypes.c_int32), ("pack_pad", ctypes.c_int32)]
        + [(n, ctypes.c_uint64) for n in _PLAN_FIELDS + _TAIL_FIELDS]
    )


_LIB: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL(str(build("pager", ["pager/pager.c", "pager/pack.c"], ldflags=["-lpthread"])))
        vp, u64, i64p = ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int64)
        lib.pgr_open.restype = vp
        lib.pgr_open.argtypes = [ctypes.c_char_p, u64, u64, ctypes.POINTER(_Config), vp, ctypes.c_int, ctypes.c_int]
        lib.pgr_base.restype = vp
        lib.pgr_base.argtypes = [vp]
        lib.pgr_length.restype = u64
        lib.pgr_length.argtypes = [vp]
        lib.pgr_flush.restype = ctypes.c_long
        lib.pgr_flush.argtypes = [vp]
        lib.pgr_drop_all.restype = ctypes.c_long
        lib.pgr_drop_all.argtypes = [vp]
        lib.pgr_close.restype = ctypes.c_int
        lib.pgr_close.argtypes = [vp, ctypes.POINTER(_Stats)]
        lib.pgr_get_stats.argtypes = [vp, ctypes.POINTER(_Stats)]
        lib.pgr_get_samples.restype = u64
        lib.pgr_get_samples.argtypes = [vp, ctypes.POINTER(ctypes.c_uint32), u64]
        lib.pgr_set_table.restype = ctypes.c_int
        lib.pgr_set_table.argtypes = [vp, ctypes.POINTER(ctypes.c_uint64), i64p, u64]
        lib.pgr_learn_pages.argtypes = [vp, i64p, u64]
        lib.pgr_learned_count.restype = u64
        lib.pgr_learned_count.argtypes = [vp]
        lib.pgr_probe.restype = ctypes.c_int
        lib.pgr_last_error.restype = ctypes.c_char_p
        lib.pgr_table_check.restype = ctypes.c_int
        lib.pgr_table_check.argtypes = [
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_uint64),
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        _LIB = lib
    return _LIB


def shim_path() -> Path:
    """The LD_PRELOAD shim (built on first use)."""
    return build("pager_shim", list(PAGER_SHIM_SOURCES), ldflags=["-ldl", "-lpthread"])


def llm_path() -> Path:
    """The ``llm`` test program (workloads/llm/llm.c, after BowerAccess's), built on first use."""
    src = native_dir().parent / "workloads" / "llm" / "llm.c"
    return build("llm", [src], shared=False)


def probe() -> None:
    """Raise PagecastError (one line) if userfaultfd cannot be used here."""
    lib = _lib()
    if lib.pgr_probe() != 0:
        raise PagecastError(f"pager: {lib.pgr_last_error().decode(errors='replace')}")


# ---- policies and budgets ------------------------------------------------------------


@dataclass
class PolicySpec:
    """A pager policy: its registry name and the C pager's settings for it (``pgr_config``).

    Parsed by the one policy-spec parser (``pagecast.policies.spec``, backend ``pager``):
    the names, shorthands (``stride:8``, ``table:FILE``), the deprecated ``next`` and the
    defaults are the policies' own declarations, and the settings come from the policy
    (``native_config``), checked by its constructor, so a name means the same pages in
    every backend. The field defaults are the C pager's own (pager.h)."""

    name: str = "none"
    depth: int = BATCH_PAGES
    table: Path | None = None
    before: int = -1  # nextline: pages below the fault (-1: window // 2, as policies/nextline.py)
    min_conf: int = 1  # stride: as policies/stride.py
    warning: str = field(default="", compare=False)  # a deprecated name was used: one line

    @property
    def policy_id(self) -> int:
        """The PC_POLICY_* id the C pager runs (from the registry)."""
        return require(self.name, "pager").native_id  # type: ignore[return-value]

    @classmethod
    def parse(cls, text: str, depth: int | None = None) -> "PolicySpec":
        """Any spec the pager runs (``policy_syntax("pager")``: ``none``, ``nextline[:N]``,
        ``stride[:N]``, ``sparse[:N]``, ``table:FILE``, ``name:key=value,...``); ``depth``
        is the pages per batch of a spec that gives none (its shorthand ``:N``)."""
        spec = parse_policy_spec(text, backend="pager", defaults=_batch_options(text, depth))
        return cls(spec.name, **spec.native_config(), warning=spec.warning)


def _batch_options(text: str, depth: int | None) -> dict[str, int]:
    """``depth`` pages per batch as the policy's options: through its shorthand (``nextline``:
    window = depth + 1), else its own ``depth`` option (``table``)."""
    if depth is None:
        return {}
    name = str(text).partition(":")[0].strip()
    old = alias(name)
    entry = policy_entry(old.target if old else name)
    sh = entry.shorthand if entry is not None else None
    if sh is not None and sh.metavar == "N":
        return {sh.key: int(depth) + sh.offset}
    return {"depth": int(depth)}


_PAGES = re.compile(r"\s*(\d+)\s*[pP]\s*")
MAX_BUDGET = (1 << 64) - 1  # the shim holds budgets in 64 bits


def _is_budget(text: str) -> bool:
    return bool(_PAGES.fullmatch(text)) or is_size(text)


def parse_budget(text: str, page_size: int = PAGE_SIZE) -> int:
    """Bytes from a size (``4096``, ``64K``, ``1M``, ``1GiB``: util/sizes.py) or pages from ``16p``."""
    if not _is_budget(text):
        raise PagecastError(f"budget {text!r} is not a size (e.g. 1M, 64K, 4096, or 16p for pages)")
    m = _PAGES.fullmatch(text)
    value = int(m.group(1)) * page_size if m else parse_size(text, "budget")
    _check_budget(value, text)
    return value


def _check_budget(value: int, text: str | int) -> None:
    if value > MAX_BUDGET:
        raise PagecastError(f"budget {text} is too large: at most 2^64-1 bytes")


def parse_specs(text: str) -> list[tuple[str, int]]:
    """``FILE:BUDGET[,FILE:BUDGET]`` → [(file, budget_bytes)]. A comma splits entries only
    after a budget, so a path may contain commas (``a,b.bin:1M``)."""
    out = []
    pending = ""
    for piece in text.split(","):
        item = pending + piece
        path, sep, budget = item.rpartition(":")
        if sep and path and _is_budget(budget):
            out.append((path, parse_budget(budget)))
            pending = ""
        else:
            pending = item + ","
    if pending:
        raise PagecastError(f"{pending[:-1]!r} is not FILE:BUDGET (e.g. weights.bin:1M)")
    return out


def check_paged_files(specs: Sequence[tuple[str, int]]) -> None:
    """A file to page that exists must be a regular file (a directory or a device can never
    be paged): else one line before the program starts. A missing or empty one is allowed
    (the program may create it); whether it was paged is reported after the run."""
    for path, _ in specs:
        if os.path.exists(path):
            check_readable(path, "file to page")


def unpaged_files(specs: Sequence[tuple[str, int]], stats: list[dict]) -> list[str]:
    """One warning per file to page that the program never mapped (a wrong name, an empty
    file nobody wrote, a program that reads it with read()): such a run paged nothing."""
    mapped = {os.path.realpath(st.get("path", "")) for st in stats}
    out = []
    for path, _ in specs:
        if os.path.realpath(path) in mapped:
            continue
        why = "does not exist" if not os.path.exists(path) else "was never mapped by the program"
        if os.path.exists(path) and os.path.getsize(path) == 0:
            why = "is empty and was never mapped by the program"
        out.append(f"{one_line(path)}: {why}: nothing was paged")
    return out


def encode_list(items: Iterable[str | Path]) -> str:
    """A list of paths for the shim's environment: ',' separates, and a ',' or '\\' inside
    a path is escaped with '\\' (``next_item`` in shim.c)."""
    return ",".join(str(i).replace("\\", "\\\\").replace(",", "\\,") for i in items)


# ---- stats ---------------------------------------------------------------------------


@dataclass
class PagerStats:
    faults: int = 0
    wp_faults: int = 0
    late_faults: int = 0
    prefetched: int = 0
    prefetch_hits: int = 0
    prefetch_evicted_untouched: int = 0
    evictions: int = 0
    writebacks: int = 0
    writeback_skipped_eof: int = 0
    eof_faults: int = 0
    resident: int = 0
    max_resident: int = 0
    copy_ioctls: int = 0
    bytes_read: int = 0
    service_ns_total: int = 0
    nsamples: int = 0
    errors: int = 0
    wp_enabled: int = 0
    unmap_calls: int = 0  # MADV_DONTNEED calls that evicted pages: neighbouring victims share one
    service_ns_p50: float = float("nan")
    service_ns_p99: float = float("nan")

    def to_dict(self) -> dict:
        return asdict(self)


def _stats_from(st: _Stats, samples: np.ndarray | None) -> PagerStats:
    s = PagerStats(**{n: int(getattr(st, n)) for n in _STAT_FIELDS + ["errors", "wp_enabled", "unmap_calls"]})
    if samples is not None and len(samples):
        s.service_ns_p50, s.service_ns_p99 = (float(v) for v in np.percentile(samples, [50, 99]))
    return s


# ---- in-process region ---------------------------------------------------------------


class PagedRegion:
    """A file mapped through the pager. Use ``array()`` for a numpy view, ``close()`` (or
    ``with``) to write dirty pages back and unmap; views must not be used after close."""

    def __init__(
        self,
        path: str | Path,
        budget_bytes: int,
        policy: str | PolicySpec = "none",
        *,
        depth: int | None = None,
        writeback: bool = True,
        log: str | Path | None = None,
        learn: str | Path | None = None,
        offset: int = 0,
        length: int = 0,
        sigbus_past_eof: bool = False,
        flush_ms: int = 0,
    ):
        self.path = Path(path)
        self.writeback = bool(writeback)
        self.policy = policy if isinstance(policy, PolicySpec) else PolicySpec.parse(policy, depth)
        lib = _lib()
        ps = os.sysconf("SC_PAGESIZE")
        self.page_size = ps
        self._log_fd = -1
        if log is not None:
            try:
                self._log_fd = os.open(
                    str(log), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644
                )
            except OSError as e:
                raise PagecastError(f"cannot write fault log: {e.strerror}", path=log) from None
        cfg = _Config(
            budget_pages=max(1, -(-int(budget_bytes) // ps)),
            policy=self.policy.policy_id,
            depth=int(self.policy.depth),
            before=int(self.policy.before),
            min_conf=int(self.policy.min_conf),
            writeback=1 if writeback else 0,
            log_fd=self._log_fd,
            on_eof_sigbus=1 if sigbus_past_eof else 0,
            learn_path=str(learn).encode() if learn else None,
            flush_ms=int(flush_ms),
        )
        prot = (1 | 2) if writeback else 1  # PROT_READ | PROT_WRITE
        self._h = lib.pgr_open(str(self.path).encode(), offset, length, ctypes.byref(cfg), None, 0, prot)
        if not self._h:
            if self._log_fd >= 0:
                os.close(self._log_fd)
            raise PagecastError(f"pager: {lib.pgr_last_error().decode(errors='replace')}")
        self.length = int(lib.pgr_length(self._h))
        self.npages = self.length // ps
        self.budget_pages = int(cfg.budget_pages)
        self._final: PagerStats | None = None
        if self.policy.name == "table":
            self.set_table(read_table(self.policy.table, self.npages))

    # access
    @property
    def address(self) -> int:
        self._check()
        return int(_lib().pgr_base(self._h))

    def array(self, dtype: np.dtype | str = np.uint8) -> np.ndarray:
        """A numpy view of the whole region (length rounded up to pages); read-only when
        the region has no write-back (an evicted page is re-read, changes would be lost)."""
        buf = (ctypes.c_char * self.length).from_address(self.address)
        arr = np.frombuffer(buf, dtype=np.uint8).view(dtype)
        arr.flags.writeable = self.writeback
        return arr

    def buffer(self) -> memoryview:
        return memoryview(self.array())

    # policy state
    def set_table(self, table: "PrefetchTable") -> None:
        self._check()
        if table.npages != self.npages:
            raise PagecastError(f"prefetch table covers {table.npages} pages, region has {self.npages}")
        off = np.ascontiguousarray(table.offsets, np.uint64)
        pg = np.ascontiguousarray(table.pages, np.int64)
        if (
            _lib().pgr_set_table(
                self._h,
                off.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)),
                pg.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
                self.npages,
            )
            != 0
        ):
            raise PagecastError(f"pager: {_lib().pgr_last_error().decode()}")

    def learn(self, pages: Iterable[int]) -> None:
        """Sparse policy: add pages to the learned set (e.g. from an earlier run's trace)."""
        arr = np.ascontiguousarray(np.fromiter(pages, np.int64), np.int64)
        _lib().pgr_learn_pages(self._h, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), len(arr))

    @property
    def learned(self) -> int:
        return int(_lib().pgr_learned_count(self._h))

    # maintenance
    def flush(self) -> int:
        """Write every dirty page back now; returns the number written."""
        return self._pages_or_raise(_lib().pgr_flush, "write-back failed (see stderr); dirty pages stay resident")

    def drop_all(self) -> int:
        """Evict every resident page (writing dirty ones back): the next pass starts cold."""
        return self._pages_or_raise(_lib().pgr_drop_all, "eviction failed (see stderr)")

    def _pages_or_raise(self, call: Callable[[Any], int], failed: str) -> int:
        self._check()
        n = call(self._h)
        if n < 0:
            raise PagecastError(f"pager: {failed}", path=self.path)
        return int(n)

    def samples(self) -> np.ndarray:
        """Fault service times (ns) of the last up to 2^20 faults, in the handler."""
        self._check()
        out = np.empty(1 << 20, np.uint32)
        n = _lib().pgr_get_samples(self._h, out.ctypes.data_as(ctypes.POINTER(ctypes.c_uint32)), len(out))
        return out[:n].copy()

    def stats(self) -> PagerStats:
        if self._final is not None:
            return self._final
        st = _Stats()
        _lib().pgr_get_stats(self._h, ctypes.byref(st))
        return _stats_from(st, self.samples())

    def close(self) -> PagerStats:
        """Stop the handler, write back every dirty page, unmap. Returns the final stats."""
        if self._final is not None:
            return self._final
        samples = self.samples()
        st = _Stats()
        rc = _lib().pgr_close(self._h, ctypes.byref(st))
        self._h = None
        if self._log_fd >= 0:
            os.close(self._log_fd)
            self._log_fd = -1
        self._final = _stats_from(st, samples)
        if rc != 0:
            raise PagecastError(
                "pager: write-back at close failed (see stderr); the region stays mapped", path=self.path
            )
        return self._final

    def _check(self) -> None:
        if self._h is None:
            raise PagecastError("paged region is closed", path=self.path)

    def __enter__(self) -> "PagedRegion":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_h", None):
            self.close()


def open_paged(path: str | Path, budget_bytes: int, policy: str | PolicySpec = "none", **kw) -> PagedRegion:
    """Open ``path`` as a paged region of at most ``budget_bytes`` resident memory."""
    return PagedRegion(path, budget_bytes, policy, **kw)


# ---- prefetch tables (schedule / any predictor → native) -----------------------------


@dataclass
class PrefetchTable:
    """CSR map: a fault on page p prefetches pages[offsets[p]:offsets[p+1]] (best first)."""

    offsets: np.ndarray
    pages: np.ndarray

    @property
    def npages(self) -> int:
        return len(self.offsets) - 1

    def lookup(self, page: int) -> np.ndarray:
        return self.pages[self.offsets[page] : self.offsets[page + 1]]

    @classmethod
    def from_pairs(
        cls, npages: int, trigger_pages: np.ndarray, pages: np.ndarray, score: np.ndarray | None = None
    ) -> "PrefetchTable":
        """Group (trigger page, page) pairs; duplicates merged, higher score first."""
        tp = np.asarray(trigger_pages, np.int64)
        pg = np.asarray(pages, np.int64)
        sc = np.zeros(len(tp), np.float64) if score is None else np.asarray(score, np.float64)
        ok = (tp >= 0) & (tp < npages) & (pg >= 0) & (pg < npages) & (tp != pg)
        tp, pg, sc = tp[ok], pg[ok], sc[ok]
        order = np.lexsort((-sc, tp))
        tp, pg, sc = tp[order], pg[order], sc[order]
        # drop repeated (trigger, page) keeping the first (best-scored) occurrence
        key = tp * npages + pg
        _, first = np.unique(key, return_index=True)
        keep = np.sort(first)
        tp, pg = tp[keep], pg[keep]
        counts = np.bincount(tp, minlength=npages)
        offsets = np.zeros(npages + 1, np.uint64)
        np.cumsum(counts, out=offsets[1:])
        return cls(offsets, pg)


def write_table(path: str | Path, table: PrefetchTable, file_path: str | Path) -> Path:
    """Binary table for the shim: magic, npages, offsets, pages, then the data file's path."""
    from pagecast.util.atomic import atomic_output

    path = Path(path)
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(np.array([(TABLE_MAGIC, table.npages)], TABLE_HEADER_DTYPE).tobytes())
            f.write(np.ascontiguousarray(table.offsets, "<u8").tobytes())
            f.write(np.ascontiguousarray(table.pages, "<i8").tobytes())
            f.write(str(Path(file_path).resolve()).encode() + b"\0")
    return path


def check_table(path: str | Path) -> tuple[int, str]:
    """Every field of a table file checked by the C loader the shim uses: (pages, data
    file). Malformed → PagecastError, one line naming the file."""
    if not Path(path).exists():
        raise PagecastError("no such pager table file", path=path)
    n = ctypes.c_uint64()
    src = ctypes.create_string_buffer(4096)
    if _lib().pgr_table_check(str(path).encode(), ctypes.byref(n), src, len(src)) != 0:
        raise PagecastError(_lib().pgr_last_error().decode(errors="replace"))
    return int(n.value), src.value.decode(errors="replace")


def read_table(path: str | Path, npages: int | None = None) -> PrefetchTable:
    n, _ = check_table(path)
    raw = Path(path).read_bytes()
    at = TABLE_HEADER_DTYPE.itemsize
    offsets = np.frombuffer(raw, "<u8", n + 1, at).copy()
    total = int(offsets[-1])
    pages = np.frombuffer(raw, "<i8", total, at + 8 * (n + 1)).copy()
    if npages is not None and n != npages:
        raise PagecastError(f"pager table covers {n} pages but the region has {npages}", path=path)
    return PrefetchTable(offsets, pages)


def _demand_pages(trace, region: int) -> np.ndarray:
    """Page of every demand event of the trace (-1 where it is another region)."""
    d = read_demand_columns(trace, ["region", "page"])
    return np.where(d["region"] == region, d["page"], -1).astype(np.int64)


def table_from_schedule(schedule, trace, region: int, npages: int) -> PrefetchTable:
    """A schedule's rows keyed by the page demanded at their trigger (in ``trace``).

    Keyed by page, not by trigger index, because prefetching removes faults: the live
    fault stream drifts from the recorded one, the faulting page does not.
    """
    dp = _demand_pages(trace, region)
    s = schedule
    ok = (s.region == region) & (s.trigger >= 0) & (s.trigger < len(dp))
    trig_pages = dp[s.trigger[ok]]
    return PrefetchTable.from_pairs(npages, trig_pages, s.page[ok], s.score[ok])


def table_from_prefetcher(prefetcher, trace, region: int, npages: int) -> PrefetchTable:
    """Run any pagecast Prefetcher over a recorded fault stream (offline) and keep what
    it asked for after each page: the native side replays that per fault."""
    dp = _demand_pages(trace, region)
    prefetcher.reset(trace.regions)
    trig: list[int] = []
    out: list[int] = []
    rank: list[float] = []
    for p in dp[dp >= 0].tolist():
        for i, (r, q) in enumerate(prefetcher.observe(0, region, p, False)):
            if r == region:
                trig.append(p)
                out.append(q)
                rank.append(-i)
    return PrefetchTable.from_pairs(
        npages, np.array(trig, np.int64), np.array(out, np.int64), np.array(rank, np.float64)
    )


# ---- fault logs → traces ------------------------------------------------------------


@dataclass
class FaultLog:
    path: str
    file: str
    page_size: int
    file_offset: int
    length: int
    t0_ns: int
    pid: int
    policy: int
    budget_pages: int
    records: np.ndarray = field(repr=False)


def read_fault_log(path: str | Path) -> FaultLog:
    """Read a pager log; a torn last record (the process died mid-write) is dropped."""
    raw = Path(path).read_bytes()
    if len(raw) < LOG_HEADER or raw[:8] != LOG_MAGIC:
        raise PagecastError("not a pager fault log (bad magic or short header)", path=path)
    h = np.frombuffer(raw, LOG_HEADER_DTYPE, 1)[0]
    if int(h["version"]) != LOG_VERSION:
        raise PagecastError(
            f"pager fault log version {int(h['version'])} not supported (this pagecast reads {LOG_VERSION})", path=path
        )
    file = bytes(h["path"]).split(b"\0", 1)[0].decode(errors="replace")
    nrec = (len(raw) - LOG_HEADER) // LOG_RECORD.itemsize
    recs = np.frombuffer(raw, LOG_RECORD, nrec, LOG_HEADER)
    header = {f: int(h[f]) for f in ("page_size", "file_offset", "length", "t0_ns", "pid", "policy", "budget_pages")}
    return FaultLog(path=str(path), file=file, records=recs, **header)


def logs_to_trace(
    logs: Sequence[str | Path], out: str | Path, *, command: Sequence[str] = (), meta: dict | None = None
) -> Path:
    """Merge pager logs (one per mapping) into one trace: FAULT, PREFETCH and EVICT rows,
    one region per file (page = file page), ordered by time."""
    from pagecast.trace.writer import TraceWriter

    parsed = [read_fault_log(p) for p in logs]
    regions: dict[str, Region] = {}
    chunks = []
    t_base = min((lg.t0_ns for lg in parsed), default=0)
    for lg in parsed:
        reg = regions.get(lg.file)
        end = lg.file_offset + lg.length
        if reg is None:
            reg = Region(
                id=len(regions),
                name=Path(lg.file).name,
                kind="file",
                path=lg.file,
                file_offset=0,
                length=end,
                page_size=lg.page_size,
                order=len(regions),
                extra={"budget_pages": lg.budget_pages, "map_offset": lg.file_offset},
            )
            regions[lg.file] = reg
        reg.length = max(reg.length, end)
        r = lg.records
        chunks.append(
            (
                r["t_ns"] + (lg.t0_ns - t_base),
                np.full(len(r), reg.id, np.int32),
                r["page"],
                r["kind"],
                r["flags"],
                r["tid"],
            )
        )
    cols = [np.concatenate([c[i] for c in chunks]) if chunks else np.empty(0) for i in range(6)]
    order = np.argsort(cols[0], kind="stable")
    page_size = parsed[0].page_size if parsed else PAGE_SIZE
    info = {"command": list(command), "cwd": os.getcwd(), "pager_policy": sorted({lg.policy for lg in parsed})}
    info.update(meta or {})
    w = TraceWriter(out, regions=list(regions.values()), meta=info, page_size=page_size, source="pager")
    try:
        if len(order):
            w.write(
                t_ns=cols[0][order],
                region=cols[1][order],
                page=cols[2][order],
                kind=cols[3][order],
                flags=cols[4][order],
                tid=cols[5][order],
                bytes=np.where(np.isin(cols[3][order], [int(Kind.FAULT), int(Kind.PREFETCH)]), page_size, 0),
            )
        return w.close()
    except BaseException:
        w.abort()
        raise


# ---- unmodified programs -------------------------------------------------------------


@dataclass
class PagerRun:
    returncode: int
    stats: list[dict]  # one per paged mapping, written by the shim at unmap/exit
    trace: Path | None
    trace_error: str | None = None  # the program ran but its trace could not be written (disk full)
    warnings: list[str] = field(default_factory=list)  # a deprecated policy name; files never paged


def pager_env(
    specs: Sequence[tuple[str, int]],
    policy: str | PolicySpec,
    *,
    log_dir: Path | None = None,
    stats_dir: Path | None = None,
    learn_dir: str | Path | None = None,
    strict: bool = True,
    base_env: dict | None = None,
    flush_ms: int | None = None,
    packs: Sequence[str | Path] = (),
    pack_defer: int | None = None,
    pack_stop_after: int | None = None,
) -> dict:
    """Environment that runs a program under the shim with these files paged.

    ``packs``: page packs (``pagecast.pager.pack``) streamed into the matching regions as
    they are mapped; check them first with ``pack.usable_packs``."""
    pol = policy if isinstance(policy, PolicySpec) else PolicySpec.parse(policy)
    env = dict(os.environ if base_env is None else base_env)
    for path, budget in specs:
        # a file the program creates itself is paged when it maps it: only its directory must exist
        if not Path(path).exists() and not Path(path).resolve().parent.is_dir():
            raise PagecastError("no such directory for the file to page", path=path)
        if budget < 1:
            raise PagecastError(f"budget for {path} must be positive")
        _check_budget(budget, f"for {path}")
    env["LD_PRELOAD"] = preload_list(env.get("LD_PRELOAD", ""), shim_path(), first=True)
    env["PAGECAST_PAGER"] = encode_list(f"{Path(p).resolve()}:{int(b)}" for p, b in specs)
    env["PAGECAST_PAGER_POLICY"] = pol.name
    env["PAGECAST_PAGER_DEPTH"] = str(pol.depth)
    env["PAGECAST_PAGER_BEFORE"] = str(pol.before)
    env["PAGECAST_PAGER_MIN_CONF"] = str(pol.min_conf)
    env.pop("PAGECAST_PAGER_TABLE", None)
    if pol.table:
        check_table(pol.table)  # malformed → one line before the program starts
        env["PAGECAST_PAGER_TABLE"] = encode_list([Path(pol.table).resolve()])
    if learn_dir:
        Path(learn_dir).mkdir(parents=True, exist_ok=True)
        env["PAGECAST_PAGER_LEARN"] = str(Path(learn_dir).resolve())
    if log_dir:
        env["PAGECAST_PAGER_LOG"] = str(log_dir)
    if stats_dir:
        env["PAGECAST_PAGER_STATS"] = str(stats_dir)
    env["PAGECAST_PAGER_STRICT"] = "1" if strict else "0"
    if flush_ms is not None:
        env["PAGECAST_PAGER_FLUSH_MS"] = str(int(flush_ms))
    for k in ("PAGECAST_PAGER_PACK", "PAGECAST_PAGER_PACK_DEFER", "PAGECAST_PAGER_PACK_STOP_AFTER"):
        env.pop(k, None)
    if packs:
        env["PAGECAST_PAGER_PACK"] = encode_list(Path(p).resolve() for p in packs)
    if pack_defer is not None:
        env["PAGECAST_PAGER_PACK_DEFER"] = str(int(pack_defer))
    if pack_stop_after is not None:
        env["PAGECAST_PAGER_PACK_STOP_AFTER"] = str(int(pack_stop_after))
    return env


def run_pager(
    cmd: Sequence[str],
    specs: Sequence[tuple[str, int]],
    *,
    policy: str | PolicySpec = "none",
    trace_out: str | Path | None = None,
    learn_dir: str | Path | None = None,
    strict: bool = True,
    stdout=None,
    stderr=None,
    env: dict | None = None,
    flush_ms: int | None = None,
    packs: Sequence[str | Path] = (),
    pack_defer: int | None = None,
    pack_stop_after: int | None = None,
) -> PagerRun:
    """Run ``cmd`` with ``specs`` files on the pager; collect stats and (optionally) a trace.

    The fault logs are written by the program's own pager threads as it runs, so a trace
    can be made even if the program crashes (every record written before the crash).
    """
    if not cmd:
        raise PagecastError("no command given (pagecast pager run FILE:BUDGET -- CMD ...)")
    pol = policy if isinstance(policy, PolicySpec) else PolicySpec.parse(policy)
    check_paged_files(specs)
    if trace_out is not None:
        check_output(trace_out)  # before the program runs, not after
    probe()
    with tempfile.TemporaryDirectory(prefix="pagecast-pager-") as td:
        tdp = Path(td)
        (tdp / "log").mkdir()
        (tdp / "stats").mkdir()
        e = pager_env(
            specs,
            pol,
            log_dir=tdp / "log" if trace_out is not None else None,
            stats_dir=tdp / "stats",
            learn_dir=learn_dir,
            strict=strict,
            base_env=env,
            flush_ms=flush_ms,
            packs=packs,
            pack_defer=pack_defer,
            pack_stop_after=pack_stop_after,
        )
        try:
            returncode = run_program(cmd, env=e, stdout=stdout, stderr=stderr)
        except FileNotFoundError:
            raise PagecastError(f"command not found: {cmd[0]}") from None
        except OSError as oe:
            raise PagecastError(f"cannot run {cmd[0]} ({os_error_text(oe)})") from None
        stats = [json.loads(p.read_text()) for p in sorted((tdp / "stats").glob("*.json"))]
        logs = sorted((tdp / "log").glob("*.pglog"), key=lambda p: [int(x) for x in p.name.split(".")[1:3]])
        trace, trace_error = None, None
        if trace_out is not None:
            try:
                trace = logs_to_trace(
                    logs, trace_out, command=list(cmd), meta={"pager_specs": [[str(p), int(b)] for p, b in specs]}
                )
            except OSError as e:
                trace_error = one_line(from_os_error(e, "trace not written", trace_out))
            except PagecastError as e:  # the program's exit status is still the run's result
                trace_error = one_line(e)
        warnings = ([pol.warning] if pol.warning else []) + unpaged_files(specs, stats)
        return PagerRun(returncode, stats, trace, trace_error, warnings)


def run_with_pager(
    cmd: Sequence[str], specs: Sequence[tuple[str, int]], *, policy: str = "none", trace_out: str | Path | None = None
) -> int:
    """Run an unmodified program with the given files on the pager; returns its exit status."""
    return run_pager(cmd, specs, policy=policy, trace_out=trace_out).returncode
