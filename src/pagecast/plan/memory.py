"""Plans for a memory limit: what to keep, what to evict right after use, what to prefetch.

Under a limit smaller than its working set a program reads the same pages again pass
after pass, and the kernel's LRU evicts exactly what a cyclic reader needs next. From
recordings (made under the limit, so the pages read again show as faults again) the
planner plays each run's demand stream at the limit's capacity, in chunks of the files,
under LRU (what the kernel does) and Belady's MIN (the floor), and reads off MIN what an
online policy can do:

- **keep**: chunks MIN holds from one use to the next, where LRU does not, for most of
  their reuses — held for the whole run;
- **stream**: every other chunk the runs used — evicted right after use (its next use is
  farther than the budget can hold), and prefetched ahead along ``next`` (the chunk that
  most often followed it), ``prefetch_chunks`` ahead.

MIN is played at the capacity left once the prefetch window is set aside, so on a cyclic
scan the keep set is exactly MIN's steady state there. The plan is validated leave-one-run-
out (planned on the other runs, priced on the one left out) against LRU; a plan that reads
no less than the kernel does falls back to the kernel.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.plan.format import FileIdentity
from pagecast.plan.memory_format import RECENT_CHUNKS, FileMemoryPlan, MemoryPlan
from pagecast.plan.memory_objects import plan_object_layouts
from pagecast.plan.shared_pages import merge_ranges, recorded_identity
from pagecast.sim.misses import lru_misses, min_misses, returns_at_depth
from pagecast.sim.readaround import readaround_reads
from pagecast.trace.demand import read_demand
from pagecast.trace.reader import Trace, open_trace
from pagecast.trace.schema import Kind
from pagecast.util.device_model import DEFAULT_READ_AHEAD_KB, read_ahead_bytes_of
from pagecast.util.elf import is_elf

DEFAULT_CHUNK = 2 << 20
# chunk sizes tried when none is given: large chunks suit programs that stream a file, small
# ones programs that use scattered pages of it (a 2 MiB chunk kept for a few pages wastes it)
CHUNK_CANDIDATES = (2 << 20, 512 << 10, 128 << 10, 32 << 10)  # largest first
SMALLER_CHUNK_GAIN = 0.05
SUCCESSOR_SHARE = 0.5
# distinct chunks a program works in at once (threads splitting a tensor, a loop over two
# arrays): coming back to one of them is not entering a chunk
ENTRY_WINDOW = 4
# share of a file's chunk entries that were late returns (to a chunk the controller would
# have paged out already) above which the file is not streamed from outside
LATE_RETURN_SHARE = 0.05
# chunk sizes a plan is rebuilt at for ``plan --measure`` when its own chunks cannot be
# followed: threads side by side return to chunks a few behind at a fine grain and to none
# at a coarser one
FOLLOW_CHUNKS = (2 << 20, 4 << 20, 8 << 20, 16 << 20)
MIN_MAJORS = 100  # major faults of a file before its pages per major fault are believed
# pages a fault maps when they are in the page cache already (the kernel's fault_around_bytes,
# 64 KiB by default)
FAULT_AROUND_PAGES = 16
# a file with fewer faults than 1/READ_SHARE of its uses is read with read() (stream_room)
READ_SHARE = 8


@dataclass(frozen=True)
class MemoryPlanConfig:
    limit: int
    chunk_bytes: int | None = DEFAULT_CHUNK  # None: the candidate that reads least, validated
    # what the program's own memory (stack, heap) and the controller (~4 MiB) need beside the files
    reserve_bytes: int | None = None
    prefetch_chunks: int | None = None  # default: from the device model
    device_bytes_per_s: float = 200e6  # without a calibration: a conservative disk
    device_latency_s: float = 0.002
    # room left unlocked for what streams through: a miss in a mapping reads the device's
    # read-ahead window around it, and a window evicted before use is read again (thrash);
    # None: twice the read-ahead of the device of the most used file, at least 4 chunks
    stream_room_bytes: int | None = None
    # for the pager backend: it reads what a miss asks for and its batch, no read-around
    # window, so MIN's keep set is cut only to leave it room to stream through (pager_plan)
    pager: bool = False
    # files advised sequential (sequential_plan): the kernel holds none of their pages for
    # reuse, so what LRU hit in the recording streams through as well and needs no room of its
    # own; the room left is stream_room_bytes (sequential_room), at least the pager's
    sequential: bool = False


@dataclass
class RunStream:
    """One recording's file accesses: file index and file page per access, in order."""

    file: np.ndarray
    page: np.ndarray
    anon_pages: int
    # per file: (faults, major faults) of the recording; pages per major fault is how much the
    # kernel read around each miss (a mapping advised MADV_RANDOM reads one page)
    faults: dict[int, tuple[int, int]] = field(default_factory=dict)


@dataclass
class _Extra:
    """What the demand stream leaves out, from one more pass over the recording: its read-family
    requests for file pages (first reads, and under a limit every later one: how a program
    reading a file with ``read()`` uses it) and its faults and major faults per region."""

    reads: dict[str, np.ndarray]
    faults: np.ndarray
    majors: np.ndarray


def _extra(t: Trace) -> _Extra:
    n = len(t.regions) + 1
    faults, majors = np.zeros(n, np.int64), np.zeros(n, np.int64)
    parts: list[tuple[np.ndarray, ...]] = []
    for b in t.iter_batches(["t_ns", "region", "page", "kind"], 1 << 21):
        k, reg = b["kind"], b["region"].astype(np.int64)
        sel = (k == Kind.FILE_READ) | (k == Kind.FILE_REREAD)
        if sel.any():
            parts.append((b["t_ns"][sel], reg[sel], b["page"][sel]))
        f = (reg >= 0) & (reg < n) & ((k == Kind.FAULT_MINOR) | (k == Kind.FAULT_MAJOR))
        faults += np.bincount(reg[f], minlength=n)[:n]
        majors += np.bincount(reg[f & (k == Kind.FAULT_MAJOR)], minlength=n)[:n]
    names = ("t", "region", "page")
    reads = {
        k: np.concatenate([p[i] for p in parts]).astype(np.int64) if parts else np.empty(0, np.int64)
        for i, k in enumerate(names)
    }
    return _Extra(reads, faults, majors)


def _with_reads(d: dict[str, np.ndarray], r: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if not len(r["t"]):
        return d
    t = np.concatenate([d["t"].astype(np.int64), r["t"]])
    order = np.argsort(t, kind="stable")
    return {k: np.concatenate([d[k].astype(np.int64), r[k]])[order] for k in ("region", "page")}


def read_run(trace_path: str | Path, files: dict[str, int]) -> RunStream:
    """The demand stream of one recording in file pages, with its reads of files
    (``read()``); ``files`` grows with new paths."""
    t = open_trace(trace_path)
    extra = _extra(t)
    d = _with_reads(read_demand(t), extra.reads)
    reg_file = {}
    reg_off = {}
    anon = set()
    for r in t.regions:
        if r.extra.get("recorder"):
            continue  # the recorder's own shim: not the program's, neither file nor anonymous
        if r.kind == "file" and r.path:
            reg_file[r.id] = files.setdefault(r.path, len(files))
            reg_off[r.id] = r.file_offset // PAGE_SIZE
        else:
            anon.add(r.id)
    region = d["region"].astype(np.int64)
    is_file = np.isin(region, np.fromiter(reg_file, np.int64, len(reg_file)))
    fmap = np.full(int(region.max(initial=0)) + 1, -1, np.int64)
    omap = np.zeros_like(fmap)
    for rid, fi in reg_file.items():
        if rid < len(fmap):
            fmap[rid], omap[rid] = fi, reg_off[rid]
    reg = region[is_file]
    anon_mask = np.isin(region, np.fromiter(anon, np.int64, len(anon)))
    anon_keys = np.unique(region[anon_mask] * (1 << 40) + d["page"][anon_mask])
    return RunStream(
        fmap[reg], d["page"][is_file].astype(np.int64) + omap[reg], len(anon_keys), _fault_counts(extra, reg_file)
    )


def _fault_counts(extra: _Extra, reg_file: dict[int, int]) -> dict[int, tuple[int, int]]:
    """(faults, major faults) per file index in the recording."""
    out: dict[int, tuple[int, int]] = {}
    for rid, fi in reg_file.items():
        a, m = out.get(fi, (0, 0))
        if 0 <= rid < len(extra.faults):
            a, m = a + int(extra.faults[rid]), m + int(extra.majors[rid])
        out[fi] = (a, m)
    return out


def _first_in_run(keys: np.ndarray) -> np.ndarray:
    first = np.zeros(len(keys), bool)
    _, idx = np.unique(keys, return_index=True)
    first[idx] = True
    return first


def _dense(keys: np.ndarray) -> tuple[np.ndarray, int]:
    u, ids = np.unique(keys, return_inverse=True)
    return ids.astype(np.int64), len(u)


def chunk_keys(run: RunStream, chunk_pages: int) -> np.ndarray:
    return run.file * (1 << 40) + run.page // chunk_pages


def collapse(keys: np.ndarray) -> np.ndarray:
    """Consecutive accesses to the same chunk are one use of it."""
    if len(keys) == 0:
        return keys
    keep = np.ones(len(keys), bool)
    keep[1:] = keys[1:] != keys[:-1]
    return keys[keep]


def own_memory_note(runs: Sequence[RunStream], limit: int) -> str:
    """A line for a program whose own memory (its anonymous pages) takes more than half the
    limit: what it holds no plan can keep or evict, and its files are planned in room they may
    not have (llama.cpp on a CPU with AMX copies its weights out of the mapping at load)."""
    anon = max((r.anon_pages for r in runs), default=0) * PAGE_SIZE
    if anon * 2 <= limit:
        return ""
    return (
        f"the program's own memory ({anon >> 20} MiB of anonymous pages recorded) is more than half "
        f"the {limit >> 20} MiB limit: a plan acts only on file pages"
    )


def capacity_chunks(cfg: MemoryPlanConfig, reserve: int) -> int:
    return max(0, (cfg.limit - reserve) // cfg.chunk_bytes)


def default_reserve(cfg: MemoryPlanConfig, runs: Sequence[RunStream]) -> int:
    """Room for what is not the files: the program's anonymous pages, the controller, slack."""
    if cfg.reserve_bytes is not None:
        return cfg.reserve_bytes
    anon = max((r.anon_pages for r in runs), default=0) * PAGE_SIZE
    return min(cfg.limit // 2, anon + max(6 << 20, cfg.limit // 16))


def prefetch_distance(cfg: MemoryPlanConfig, capacity: int) -> int:
    """Chunks to prefetch ahead: enough to cover a device round trip and one chunk's read
    at the device's rate twice over, never more than a quarter of the capacity."""
    if cfg.prefetch_chunks is not None:
        return max(0, min(cfg.prefetch_chunks, capacity - 1))
    per_chunk = cfg.device_latency_s + cfg.chunk_bytes / cfg.device_bytes_per_s
    want = math.ceil(2 * per_chunk * cfg.device_bytes_per_s / cfg.chunk_bytes)
    return max(1, min(want, capacity // 4))


def keep_set(streams: Sequence[np.ndarray], capacity: int) -> tuple[list[int], set[int], set[int]]:
    """(keep, most useful first; evict after use; left to the kernel) at ``capacity`` chunks.

    Only the reuses LRU misses count: a reuse LRU hits (a chunk used again after a few
    others, as by threads or a kernel working on neighbouring rows) needs no decision and,
    counted, would outnumber the far reuses that do. Keep: chunks whose far reuses MIN hits
    for at least half of them. Evict after use: chunks used once in a run, or whose far
    reuses MIN misses for at least half of them (the budget cannot hold them to their next
    use, so holding them only pushes out others). The rest (reuses LRU hits) are left to
    the kernel."""
    far: Counter[int] = Counter()
    held: Counter[int] = Counter()
    lost: Counter[int] = Counter()
    near: set[int] = set()
    used: set[int] = set()
    for keys in streams:
        if len(keys) == 0:
            continue
        used.update(np.unique(keys).tolist())
        ids, n = _dense(keys)
        cap = max(1, capacity)
        mmiss = min_misses(ids, n, cap)
        reuse = ~_first_in_run(keys)
        lmiss = lru_misses(ids, n, cap) & reuse
        near.update(np.unique(keys[reuse & ~lmiss]).tolist())
        for k, m in zip(keys[lmiss].tolist(), mmiss[lmiss].tolist()):
            far[k] += 1
            held[k] += not m
            lost[k] += m
    chosen = sorted((k for k in far if held[k] * 2 >= far[k] and held[k] > 0), key=lambda k: (-held[k], k))
    keep = chosen[: max(0, capacity - 1)]
    kept = set(keep)
    evict = {k for k in used - kept if (far[k] == 0 and k not in near) or (far[k] and lost[k] * 2 >= far[k])}
    return keep, evict, used - kept - evict


def _entries(keys: Sequence[int], window: int) -> list[int]:
    """The chunks in the order the program entered them: a chunk among the last ``window``
    distinct ones is a return, not an entry. Threads sharing a tensor work on neighbouring
    chunks at once (``169 170 169 170 171``): a successor taken from every change of chunk
    would chain 170 back to 169 and never reach 171."""
    recent: deque[int] = deque(maxlen=window)
    out = []
    for k in keys:
        if k in recent:
            continue
        recent.append(k)
        out.append(k)
    return out


def late_returns(keys: np.ndarray, window: int) -> int:
    """Uses of a chunk among the last ``window`` distinct ones but behind the
    ``RECENT_CHUNKS`` the controller keeps: it paged that chunk out, and the use reads it
    again (``keys`` one file's chunk uses)."""
    return int(returns_at_depth(collapse(keys), RECENT_CHUNKS, max(window, RECENT_CHUNKS + 1)))


def successors(streams: Sequence[np.ndarray], streamed: set[int], window: int = ENTRY_WINDOW) -> dict[int, int]:
    """For each streamed chunk, the streamed chunk entered next, where one was at least
    ``SUCCESSOR_SHARE`` of at least two times: a guess below that would read chunks the
    program does not use next and evict ones it does (scattered reads get no prefetch).

    None for a file where more than ``LATE_RETURN_SHARE`` of the entries were followed by
    a late return within ``window`` chunks (the controller's regret window): paging out
    after use would evict what the program comes back to (three threads sharing a tensor in
    small chunks, BLAS threads each in its own half of a matrix), and measured slower there
    than the keep set alone. Threads working on neighbouring chunks (llama.cpp's matrix
    products) return only to the chunk before the current one, which the controller keeps."""
    counts: dict[int, Counter[int]] = defaultdict(Counter)
    entries: Counter[int] = Counter()
    late: Counter[int] = Counter()
    for keys in streams:
        by_file: dict[int, list[int]] = defaultdict(list)
        for k in keys.tolist():
            if k in streamed:
                by_file[k >> 40].append(k)
        for fi, ks in by_file.items():
            s = _entries(ks, ENTRY_WINDOW)
            entries[fi] += len(s)
            late[fi] += late_returns(np.asarray(ks, np.int64), window)
            for a, b in zip(s, s[1:]):
                counts[a][b] += 1
    out = {}
    for a, c in counts.items():
        fi = a >> 40
        if late[fi] > LATE_RETURN_SHARE * entries[fi]:
            continue
        b, n = c.most_common(1)[0]
        total = sum(c.values())
        if total >= 2 and n >= SUCCESSOR_SHARE * total:
            out[a] = b
    return out


def predicted_misses(
    keys_pages: np.ndarray, chunk_of: np.ndarray, keep: set[int], streamed: set[int], lru: np.ndarray
) -> np.ndarray:
    """Miss flags of the plan on one run's page stream: a page is read on its first use in
    the run; again on every use if its chunk is evicted after use; as LRU reads it if its
    chunk is left to the kernel; never again if its chunk is kept."""
    first = _first_in_run(keys_pages)
    cl = chunk_of.tolist()
    kept = np.fromiter((c in keep for c in cl), bool, len(cl))
    stream = np.fromiter((c in streamed for c in cl), bool, len(cl))
    return first | stream | (~kept & ~stream & lru)


@dataclass
class Priced:
    lru: np.ndarray  # per-access miss flags
    min: np.ndarray
    plan: np.ndarray


def price_run(
    run: RunStream, cfg: MemoryPlanConfig, reserve: int, keep: set[int], streamed: set[int] | None = None
) -> Priced:
    """LRU's, MIN's and the plan's misses on one run; ``streamed`` None: every chunk not kept."""
    pages = run.file * (1 << 40) + run.page
    ids, n = _dense(pages)
    cap = max(1, (cfg.limit - reserve) // PAGE_SIZE)
    chunks = chunk_keys(run, cfg.chunk_bytes // PAGE_SIZE)
    if streamed is None:
        streamed = set(np.unique(chunks).tolist()) - keep
    lru = lru_misses(ids, n, cap)
    return Priced(lru, min_misses(ids, n, cap), predicted_misses(pages, chunks, keep, streamed, lru))


def _ranges(chunks: Sequence[int]) -> list[tuple[int, int]]:
    return merge_ranges(np.asarray(sorted(chunks), np.int64)) if chunks else []


def stream_room(runs: Sequence[RunStream], names: dict[int, str]) -> int:
    """Twice what the kernel reads around a miss in the most used file: the read-ahead window
    of its device, or less where the recordings show fewer pages per major fault (a mapping
    advised MADV_RANDOM reads the faulting page alone). A minor fault on a page the read
    brought in maps up to ``FAULT_AROUND_PAGES`` of them at once, so faults per major fault
    count pages in those units: counted one page each, SQLite's point queries under a 59 MiB
    limit (216 faults a major fault, 8 MiB read each) were given a 2 MiB room, and the keep
    set locked beside it made every query's read evict the page it was for (23× slower).

    A file read with ``read()`` (fewer faults than an eighth of its uses) gets twice the
    device's window: its reader may have advised it sequential, which doubles the window
    (``cat``, ``md5sum`` and the rest of coreutils do). Measured, 200 MiB read 8 times in a
    160 MiB limit: ``cat`` 0.98× the kernel alone with the device's window, 1.42× with
    twice it; a reader without advice 1.90× and 1.64× (``benchmarks/memlimit_reads.py``)."""
    ra = DEFAULT_READ_AHEAD_KB << 10
    fi = _most_used(runs)
    if fi is not None:
        ra = read_ahead_bytes_of(names.get(fi, ""))
        faults = sum(r.faults.get(fi, (0, 0))[0] for r in runs)
        majors = sum(r.faults.get(fi, (0, 0))[1] for r in runs)
        if fi in files_read_with_read(runs):
            ra *= 2
        elif majors >= MIN_MAJORS:
            ra = min(ra, max(1, round(faults * FAULT_AROUND_PAGES / majors)) * PAGE_SIZE)
    return 2 * ra


def _most_used(runs: Sequence[RunStream]) -> int | None:
    """The file the recordings use most (None: they use none)."""
    counts: Counter[int] = Counter()
    for r in runs:
        counts.update(dict(zip(*(x.tolist() for x in np.unique(r.file, return_counts=True)))))
    return next((fi for fi, _ in counts.most_common(1)), None)


def sequential_room(runs: Sequence[RunStream], names: dict[int, str], windows: int = 2) -> int:
    """What a file read in order and advised sequential streams through beside the keep set
    locked next to it (``sequential_plan``): ``windows`` of the kernel's read-ahead windows
    there, each twice the device's read-ahead (VM_SEQ_READ). The kernel asks for the next
    window while the program reads the one before, and how much of that is in memory at once
    depends on the program's threads and streams, so ``plan --measure`` times one and two
    (``SEQUENTIAL_VARIANTS``). Less room makes each window evict the one before it is used.
    Held out (``benchmarks/memlimit_variants.py``, ``seq@MIB``), the power iteration at 127
    MiB: 0.25× the kernel alone with 8 MiB, 2.18× with 16, 1.88× with 32; llama.cpp at 367
    MiB, 2 MiB chunks: 1.82×, 1.97×, 1.82× with 8, 16, 32."""
    ra = DEFAULT_READ_AHEAD_KB << 10
    fi = _most_used(runs)
    if fi is not None:
        ra = read_ahead_bytes_of(names.get(fi, ""))
    return windows * 2 * ra


def files_read_with_read(runs: Sequence[RunStream]) -> set[int]:
    """The files the recordings read with ``read()``: fewer faults on each than an eighth of
    its uses (one count of every file's uses, not one pass over the runs a file)."""
    uses: Counter[int] = Counter()
    faults: Counter[int] = Counter()
    for r in runs:
        uses.update(dict(zip(*(x.tolist() for x in np.unique(r.file, return_counts=True)))))
        faults.update({fi: n for fi, (n, _) in r.faults.items()})
    return {fi for fi, n in uses.items() if faults[fi] * READ_SHARE < n}


def _footprint_chunks(runs: Sequence[RunStream], chunk_pages: int, chunks: set[int]) -> int:
    """Chunks' worth of the distinct pages a run uses in ``chunks`` (at most, over the runs):
    what the part left to the kernel occupies beside the keep set."""
    if not chunks:
        return 0
    sel = np.fromiter(chunks, np.int64, len(chunks))
    most = 0
    for r in runs:
        pages = r.file * (1 << 40) + r.page
        mask = np.isin(chunk_keys(r, chunk_pages), sel)
        most = max(most, len(np.unique(pages[mask])))
    return -(-most // chunk_pages)


def _sequential_left(ordered: list[int], left: set[int], streams: Sequence[np.ndarray]) -> tuple[list[int], set[int]]:
    """(keep candidates, left to the kernel) for files advised sequential: the chunks LRU hit
    in the recording of a file MIN keeps part of join the candidates after MIN's (most used
    first). A recording under a limit shows only what the kernel missed, so a chunk it kept by
    luck between two passes looks like one it always holds; advised sequential, it holds none,
    and reserving room for such chunks (their footprint) only shrank the keep set (llama.cpp:
    74 MiB of a 519 MiB limit reserved for weights it then read every token)."""
    files = {c >> 40 for c in ordered}
    moved = [c for c in left if c >> 40 in files]
    keys, counts = np.unique(np.concatenate([np.asarray(s, np.int64) for s in streams]), return_counts=True)
    uses = dict(zip(keys.tolist(), counts.tolist()))
    moved.sort(key=lambda c: (-uses.get(c, 0), c))
    return ordered + moved, left - set(moved)


def room_bytes(cfg: MemoryPlanConfig) -> int:
    """What the keep set leaves unlocked for the streamed part: the configured room (by
    default twice the device's read-ahead) plus two chunks, at least four chunks."""
    assert cfg.chunk_bytes is not None
    ra = cfg.stream_room_bytes if cfg.stream_room_bytes is not None else 2 * (DEFAULT_READ_AHEAD_KB << 10)
    return max(ra + 2 * cfg.chunk_bytes, 4 * cfg.chunk_bytes)


# what the pager streams through beside its keep set: the chunk passed, the one the program
# is in and the one its batch reaches into (launch.memlimit_pager)
PAGER_ROOM_CHUNKS = 3
# the sequential variants (name, read-ahead windows of room: sequential_room)
SEQUENTIAL_VARIANTS = (("seq", 2), ("seq1", 1))


def _room(cfg: MemoryPlanConfig) -> int:
    assert cfg.chunk_bytes is not None
    if cfg.sequential:
        return max(PAGER_ROOM_CHUNKS * cfg.chunk_bytes, cfg.stream_room_bytes or 0)
    return PAGER_ROOM_CHUNKS * cfg.chunk_bytes if cfg.pager else room_bytes(cfg)


def build(runs: Sequence[RunStream], cfg: MemoryPlanConfig) -> tuple[set[int], set[int], dict[int, int], int, int]:
    """(keep chunks, streamed chunks, successors, reserve, prefetch distance) from ``runs``.

    MIN is played at the capacity less the prefetch window; the keep set it yields is then
    cut (least useful first) to leave the streamed part ``room_bytes`` unlocked and the pages left
    to the kernel the room they use: a keep set that fills the limit makes every read-ahead
    window evict the one before it is used."""
    reserve = default_reserve(cfg, runs)
    cap = capacity_chunks(cfg, reserve)
    dist = prefetch_distance(cfg, cap)
    chunk_pages = cfg.chunk_bytes // PAGE_SIZE
    streams = [collapse(chunk_keys(r, chunk_pages)) for r in runs]
    ordered, streamed, left = keep_set(streams, cap - dist)
    if cfg.sequential:
        ordered, left = _sequential_left(ordered, left, streams)
    room_chunks = -(-_room(cfg) // cfg.chunk_bytes)
    budget = max(0, cap - dist - room_chunks - _footprint_chunks(runs, chunk_pages, left))
    n = budget if cfg.pager else keep_size(runs, cfg, reserve, ordered[:budget])[0]
    keep = set(ordered[:n])
    streamed |= set(ordered[n:])
    return keep, streamed, successors(streams, streamed, max(ENTRY_WINDOW, room_chunks)), reserve, dist


KEEP_SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
# what the live controller adds to the cgroup (its copy-on-write pages, page tables; ~5 MiB
# measured): a keep set is priced with that much less room than the kernel alone gets
CONTROLLER_BYTES = 6 << 20
# a keep set must beat the kernel alone by this share of its reads: the model's error on
# the room left is a few MiB, and near the limit a few MiB less room reads much more
KEEP_MARGIN = 0.05


def _page_space(runs: Sequence[RunStream]) -> dict[int, tuple[int, int]]:
    """Each file's (first index, pages) in one page space: up to the last page a run used."""
    ext: dict[int, int] = {}
    for r in runs:
        for fi, last in zip(*(x.tolist() for x in _max_page_per_file(r))):
            ext[fi] = max(ext.get(fi, 0), last + 1)
    out, base = {}, 0
    for fi in sorted(ext):
        out[fi] = (base, ext[fi])
        base += ext[fi]
    return out


def _max_page_per_file(r: RunStream) -> tuple[np.ndarray, np.ndarray]:
    if len(r.file) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort((r.page, r.file))
    f, p = r.file[order], r.page[order]
    last = np.r_[f[1:] != f[:-1], True]
    return f[last], p[last]


def readaround_bytes(runs: Sequence[RunStream], cfg: MemoryPlanConfig, reserve: int, keep: Sequence[int]) -> int:
    """Bytes the kernel reads over ``runs`` with the chunks ``keep`` locked (read once a
    run) and the rest cycling through what the limit leaves, read-around included."""
    assert cfg.chunk_bytes is not None
    space = _page_space(runs)
    total = sum(n for _, n in space.values())
    if total == 0:
        return 0
    chunk_pages = cfg.chunk_bytes // PAGE_SIZE
    pinned = np.zeros(total, np.bool_)
    for c in keep:
        fi, ci = c >> 40, c & ((1 << 40) - 1)
        if fi in space:
            base, n = space[fi]
            pinned[base + min(n, ci * chunk_pages) : base + min(n, (ci + 1) * chunk_pages)] = True
    window = max(1, (cfg.stream_room_bytes or 2 * (DEFAULT_READ_AHEAD_KB << 10)) // 2 // PAGE_SIZE)
    capacity = max(1, (cfg.limit - reserve) // PAGE_SIZE - int(pinned.sum()))
    bases = np.zeros(max(space) + 1, np.int64)
    ends = np.zeros_like(bases)
    for fi, (base, n) in space.items():
        bases[fi], ends[fi] = base, base + n
    pages = 0
    for r in runs:
        lo, hi = bases[r.file], ends[r.file]
        pages += readaround_reads(lo + r.page, lo, hi, window // 2, window, capacity, pinned) + int(pinned.sum())
    return pages * PAGE_SIZE


def keep_size(
    runs: Sequence[RunStream], cfg: MemoryPlanConfig, reserve: int, keep: Sequence[int]
) -> tuple[int, dict[str, int]]:
    """How many of ``keep`` (most useful first) to lock: of the shares ``KEEP_SHARES``,
    the one the kernel reads least with, read-around included (ties: the smaller), and the
    bytes read per share. A locked part leaves the rest less room, and where each miss
    reads a whole read-ahead window (scattered reads), that can cost more than it saves."""
    tried: dict[str, int] = {}
    best: tuple[float, int] | None = None
    for share in KEEP_SHARES:
        n = round(len(keep) * share)
        if str(n) in tried:
            continue
        read = readaround_bytes(runs, cfg, reserve + (CONTROLLER_BYTES if n else 0), keep[:n])
        tried[str(n)] = read
        score = read if n == 0 else read * (1 + KEEP_MARGIN)
        if best is None or score < best[0]:
            best = (score, n)
    return (best[1] if best else 0), tried


def choose_chunk(runs: Sequence[RunStream], cfg: MemoryPlanConfig) -> tuple[MemoryPlanConfig, dict[str, int]]:
    """``cfg`` with the largest chunk size of ``CHUNK_CANDIDATES`` whose plan reads at most
    ``SMALLER_CHUNK_GAIN`` more than the best one (leave-one-run-out with two runs or more):
    every chunk costs the controller a page-table read and a system call, so a smaller one
    must earn it. Also the bytes read per candidate."""
    results: list[tuple[int, MemoryPlanConfig]] = []
    tried: dict[str, int] = {}
    for c in CHUNK_CANDIDATES:
        cand = dataclasses.replace(cfg, chunk_bytes=c)
        reserve = default_reserve(cand, runs)
        v = _leave_one_out(runs, cand, reserve)
        read = v["plan_bytes"]
        if read is None:
            keep, streamed, *_ = build(runs, cand)
            read = sum(int(price_run(r, cand, reserve, keep, streamed).plan.sum()) * PAGE_SIZE for r in runs)
        tried[str(c)] = int(read)
        results.append((int(read), cand))
    least = min(r for r, _ in results)
    return next(c for r, c in results if r <= least * (1 + SMALLER_CHUNK_GAIN)), tried


def read_runs(traces: Sequence[str | Path]) -> tuple[list[RunStream], dict[str, int]]:
    """The recordings' demand streams and the file index they share (path -> index)."""
    files: dict[str, int] = {}
    return [read_run(t, files) for t in traces], files


def plan_for_limit(
    traces: Sequence[str | Path], cfg: MemoryPlanConfig, read: tuple[list[RunStream], dict[str, int]] | None = None
) -> MemoryPlan:
    """The memory plan for ``cfg.limit`` from ``traces``; ``read``: their ``read_runs``,
    where the caller plans from them more than once."""
    if not traces:
        raise PagecastError("plan --memory: no recordings given")
    if cfg.chunk_bytes is not None and (cfg.chunk_bytes <= 0 or cfg.chunk_bytes % PAGE_SIZE):
        raise PagecastError(f"plan --memory: chunk size {cfg.chunk_bytes} is not a positive multiple of {PAGE_SIZE}")
    runs, files = read if read is not None else read_runs(traces)
    if cfg.stream_room_bytes is None:
        cfg = dataclasses.replace(cfg, stream_room_bytes=stream_room(runs, {i: p for p, i in files.items()}))
    tried: dict[str, int] = {}
    if cfg.chunk_bytes is None:
        cfg, tried = choose_chunk(runs, cfg)
    assert cfg.chunk_bytes is not None
    keep, streamed, nxt, reserve, dist = build(runs, cfg)
    validation = _leave_one_out(runs, cfg, reserve)
    if tried:
        validation["plan_bytes_by_chunk"] = tried
    names = {i: p for p, i in files.items()}
    objects = plan_object_layouts(runs, names)
    ident: dict[str, FileIdentity] = {}
    for t in traces:
        ident.update(recorded_identity(t))
    per_file: dict[int, dict[str, int]] = defaultdict(lambda: {"lru": 0, "min": 0, "plan": 0})
    for r in runs:
        pr = price_run(r, cfg, reserve, keep, streamed)
        for name, flags in (("lru", pr.lru), ("min", pr.min), ("plan", pr.plan)):
            for fi, cnt in zip(*np.unique(r.file[flags], return_counts=True)):
                per_file[int(fi)][name] += int(cnt) * PAGE_SIZE
    out = []
    for fi in sorted(names, key=lambda i: i):
        path = names[fi]
        if path not in ident:
            try:
                ident[path] = FileIdentity.of(path)  # the recorder stored none: as the file is now
            except OSError:
                continue  # gone since: nothing to act on
        if not Path(path).is_file():
            continue
        fk = [c & ((1 << 40) - 1) for c in keep if c >> 40 == fi]
        fs = [c & ((1 << 40) - 1) for c in streamed if c >> 40 == fi]
        fn = {a & ((1 << 40) - 1): b & ((1 << 40) - 1) for a, b in nxt.items() if a >> 40 == fi and b >> 40 == fi}
        out.append(
            FileMemoryPlan(
                path=path,
                identity=ident[path],
                keep=_ranges(fk),
                stream=_ranges(fs),
                next=fn,
                predicted=dict(per_file[fi]),
                objects=objects.get(fi),
            )
        )
    backend = "kernel-advice"
    note = ""
    if validation.get("plan_bytes") is not None and validation["plan_bytes"] >= validation["lru_bytes"]:
        backend, note = "kernel", "leave-one-run-out: the plan would read no less than the kernel's LRU"
        if any(f.objects for f in out):
            # the keep set goes; reading objects whole instead of read-around windows stays
            out = [dataclasses.replace(f, keep=[], stream=[], next={}) for f in out]
            backend, note = "kernel-advice", note + "; objects read whole only"
    if cfg.pager and backend == "kernel-advice":
        backend = "pager"
    own = own_memory_note(runs, cfg.limit)
    note = f"{note}; {own}" if note and own else note or own
    return MemoryPlan(cfg.limit, cfg.chunk_bytes, reserve, dist, backend, out, validation, note, _room(cfg))


def _streamed_bytes(plan: MemoryPlan, followed: bool) -> int:
    """Bytes of the files' streamed chunks (all, or the followed files' only), a chunk past
    a file's end counted as far as the file goes: a small file's one chunk is not a chunk's
    worth of streaming."""
    total = 0
    for f in plan.files:
        if followed and not f.followed():
            continue
        for a, n in f.stream:
            total += max(0, min((a + n) * plan.chunk_bytes, f.identity.size) - a * plan.chunk_bytes)
    return total


def follow_plan(traces: Sequence[str | Path], cfg: MemoryPlanConfig, plan: MemoryPlan) -> MemoryPlan | None:
    """``plan`` rebuilt at the smallest chunk of ``FOLLOW_CHUNKS`` larger than its own at
    which the controller follows at least half of what the rebuilt plan streams, where
    ``plan`` follows less than half of what it streams; None otherwise. The byte model
    prefers small chunks (a finer keep set); whether following a coarser stream from
    outside is faster is for ``plan --measure`` to time."""
    streamed = _streamed_bytes(plan, False)
    if plan.backend != "kernel-advice" or not streamed or 2 * _streamed_bytes(plan, True) >= streamed:
        return None
    read = read_runs(traces)  # once for every chunk size tried
    for chunk in FOLLOW_CHUNKS:
        if chunk <= plan.chunk_bytes:
            continue
        cand = plan_for_limit(traces, dataclasses.replace(cfg, chunk_bytes=chunk), read)
        total = _streamed_bytes(cand, False)
        if cand.backend == "kernel-advice" and total and 2 * _streamed_bytes(cand, True) >= total:
            return cand
    return None


def mapped_share(
    traces: Sequence[str | Path], plan: MemoryPlan, read: tuple[list[RunStream], dict[str, int]] | None = None
) -> float:
    """The share of what ``plan`` keeps or streams that lies in data files the recordings map
    (not read with ``read()``): the part the pager can serve. Programs and libraries (ELF)
    count as not mapped: the dynamic loader maps them with system calls the pager's shim does
    not see. ``read``: the recordings as ``read_runs`` returned them, if read already."""
    runs, files = read if read is not None else read_runs(traces)
    by_read = files_read_with_read(runs)
    size = {f.path: sum(n for _, n in (*f.keep, *f.stream)) for f in plan.files if f.keep or f.stream}
    mapped = sum(n for path, n in size.items() if path in files and files[path] not in by_read and not is_elf(path))
    total = sum(size.values())
    return mapped / total if total else 0.0


def pager_plan(traces: Sequence[str | Path], cfg: MemoryPlanConfig, plan: MemoryPlan) -> MemoryPlan | None:
    """``plan`` rebuilt for the pager at its chunk size (``MemoryPlanConfig.pager``), where
    that keeps more: the kernel backend's keep set is cut to leave the kernel's read-around
    windows room (SQLite's point queries at 59 MiB: cut to nothing), which the pager does
    not read. None where it keeps no more, or where ``plan`` found nothing to gain."""
    if plan.backend == "kernel":
        return None
    cand = plan_for_limit(traces, dataclasses.replace(cfg, chunk_bytes=plan.chunk_bytes, pager=True))
    return cand if cand.backend == "pager" and cand.keep_bytes() > plan.keep_bytes() else None


def sequential_plan(
    traces: Sequence[str | Path],
    cfg: MemoryPlanConfig,
    plan: MemoryPlan,
    read: tuple[list[RunStream], dict[str, int]] | None = None,
    windows: int = 2,
) -> MemoryPlan | None:
    """``plan``'s keep set rebuilt for files read in order and advised ``sequential``: the
    kernel then reads ahead of a miss only, never behind it, and reclaims first the pages the
    program used through that mapping, so what is not kept streams through ``windows``
    read-ahead windows (``sequential_room``) and MIN's keep set is cut only to leave them
    room, beside the same reserve as ``plan``'s, kept as one run inside the part read in
    order (``_contiguous_keep``), the part not kept read in large folios (the advice shim's
    ``l``). Locked only, nothing followed from outside; files read as objects keep their own
    reading. ``plan --measure`` times it beside
    the other variants (``--sequential``). None where ``plan`` found nothing to gain or this
    keeps nothing, and where a file it keeps is read with ``read()``: the advice is for
    mappings, and such a file's read-ahead still needs the room (``stream_room``)."""
    if plan.backend == "kernel":
        return None
    runs, files = read if read is not None else read_runs(traces)
    room = cfg.stream_room_bytes  # as the caller set it (--stream-room)
    if room is None:
        room = sequential_room(runs, {i: p for p, i in files.items()}, windows)
    rebuilt = dataclasses.replace(
        cfg,
        chunk_bytes=plan.chunk_bytes,
        pager=True,
        sequential=True,
        reserve_bytes=plan.reserve_bytes,
        stream_room_bytes=room,
    )
    cand = plan_for_limit(traces, rebuilt, (runs, files))
    if cand.backend == "kernel" or not cand.keep_bytes():
        return None
    by_read = files_read_with_read(runs)
    if any(f.keep and files.get(f.path) in by_read for f in cand.files):
        return None
    out = []
    for f in cand.files:
        advised = bool(f.keep) and not f.objects
        span = _read_in_order(runs, files[f.path], cand.chunk_bytes, f.identity.size) if advised else None
        keep = _contiguous_keep(f, span, -(-f.identity.size // cand.chunk_bytes)) if advised else f.keep
        # the advice on the whole mapping: the part read by lookups advised random beside it
        # read less (llama.cpp: 1,603 MiB against 1,650) and ran slower (0.135 s a token
        # against 0.099, held out at 519 MiB, the sequential part read in large folios)
        out.append(dataclasses.replace(f, keep=keep, stream=[], next={}, advice="sequential" if advised else None))
    return dataclasses.replace(cand, files=out, backend="kernel-advice", prefetch_chunks=0)


def sequential_variants(
    traces: Sequence[str | Path],
    cfg: MemoryPlanConfig,
    plan: MemoryPlan,
    read: tuple[list[RunStream], dict[str, int]] | None = None,
    names: Sequence[str] | None = None,
) -> dict[str, MemoryPlan]:
    """The sequential variants ``plan --measure`` times (``SEQUENTIAL_VARIANTS``; ``names``:
    only these): the keep set leaving two read-ahead windows of room (``seq``) and one
    (``seq1``); one where they keep the same (the caller set the room) or none where
    ``sequential_plan`` has none."""
    read = read if read is not None else read_runs(traces)
    out: dict[str, MemoryPlan] = {}
    for name, windows in SEQUENTIAL_VARIANTS:
        if names is not None and name not in names:
            continue
        p = sequential_plan(traces, cfg, plan, read, windows)
        if p is not None and all([f.keep for f in p.files] != [f.keep for f in q.files] for q in out.values()):
            out[name] = p
    return out


def _read_in_order(runs: Sequence[RunStream], fi: int, chunk_bytes: int, size: int) -> tuple[int, int] | None:
    """(first chunk, chunks) of file ``fi`` from the first to the last chunk a run used at
    least half the pages of: the part read in order, whose keep set ``_contiguous_keep`` makes
    one run; None where that is the whole file. The rest is read by lookups (token
    embeddings: a row a token)."""
    chunk_pages = chunk_bytes // PAGE_SIZE
    dense: set[int] = set()
    for r in runs:
        pages = np.unique(r.page[r.file == fi])
        chunks, counts = np.unique(pages // chunk_pages, return_counts=True)
        dense.update(chunks[counts * 2 >= chunk_pages].tolist())
    if not dense:
        return None
    lo, hi = min(dense), max(dense)
    if lo == 0 and (hi + 1) * chunk_bytes >= size:
        return None
    return (lo, hi - lo + 1)


def _contiguous_keep(f: FileMemoryPlan, span: tuple[int, int] | None, size_chunks: int) -> list[tuple[int, int]]:
    """``f``'s keep set inside the part read in order made one run of as many chunks, from
    the first of them on: a file read in order pass after pass is a cyclic scan, for which
    any chunks of the same number spare the same reads (MIN's steady state on one is its
    head), and the part not kept then streams as one run the kernel reads ahead through, not
    as holes between kept chunks, each a read of its own (llama.cpp at 519 MiB, held out:
    3.71-4.32x the kernel alone with its 420 MiB kept as one run, 3.44x as the 15 runs MIN's
    choices made)."""
    lo, n = span if span is not None else (0, size_chunks)
    kept = {a + k for a, m in f.keep for k in range(m)}
    inside = sorted(c for c in kept if lo <= c < lo + n)
    if not inside:
        return f.keep
    head = range(inside[0], inside[0] + len(inside))  # ends by the last of them: inside the part
    return merge_ranges(np.array(sorted(set(head) | (kept - set(inside)))))


def _leave_one_out(runs: Sequence[RunStream], cfg: MemoryPlanConfig, reserve: int) -> dict[str, Any]:
    """Bytes read over the runs, each priced with a plan made from the others."""
    if len(runs) < 2:
        return {"runs": len(runs), "lru_bytes": None, "min_bytes": None, "plan_bytes": None}
    tot = {"lru_bytes": 0, "min_bytes": 0, "plan_bytes": 0}
    for i, r in enumerate(runs):
        keep, streamed, *_ = build([x for j, x in enumerate(runs) if j != i], cfg)
        pr = price_run(r, cfg, reserve, keep, streamed)
        tot["lru_bytes"] += int(pr.lru.sum()) * PAGE_SIZE
        tot["min_bytes"] += int(pr.min.sum()) * PAGE_SIZE
        tot["plan_bytes"] += int(pr.plan.sum()) * PAGE_SIZE
    return {"runs": len(runs), **tot}


def explain_rows(plan: MemoryPlan) -> list[dict[str, object]]:
    mib = 1 << 20
    rows = []
    for f in plan.files:
        p = f.predicted
        rows.append(
            {
                "file": f.path,
                "keep_mib": round(f.keep_chunks() * plan.chunk_bytes / mib, 1),
                "stream_mib": round(sum(n for _, n in f.stream) * plan.chunk_bytes / mib, 1),
                "lru_read_mib": round(p.get("lru", 0) / mib, 1),
                "min_read_mib": round(p.get("min", 0) / mib, 1),
                "plan_read_mib": round(p.get("plan", 0) / mib, 1),
            }
        )
    return rows
