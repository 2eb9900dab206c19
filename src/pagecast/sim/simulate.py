"""``simulate``: play a trace's demand stream through a fast tier of fixed capacity.

The driver streams the trace in chunks, interns pages into dense slots, and hands each
chunk to the compiled loop in ``engine``. Memory depends on the number of distinct
pages (and, for MIN, a memory-mapped next-use file), never on trace length.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pagecast.errors import PagecastError
from pagecast.policies._numba import MAX_PREFETCH, NumbaPrefetcher, region_pages
from pagecast.policies.base import Eviction, Prefetcher
from pagecast.policies.oracle import Oracle
from pagecast.policies.spec import parse_eviction_spec, parse_policy_spec
from pagecast.sim import engine as E
from pagecast.sim.config import SimConfig, SimResult
from pagecast.sim.hashtab import grown, new_table
from pagecast.sim.kernels import EV_KERNELS, EV_KINDS, FIRST_EV_KIND, kind_of
from pagecast.trace.demand import ReadClock, as_trace, demand_chunks, demand_chunks_reversed, read_demand
from pagecast.trace.keys import split_keys
from pagecast.trace.reader import Trace
from pagecast.trace.regions import Region, row_region_hashes
from pagecast.trace.schedule import Schedule

PrefetcherSpec = str | Prefetcher | Schedule | None


def parse_prefetcher(spec: str) -> Prefetcher:
    """'name' or 'name:opt=val,opt=val' (typed by the constructor) → a Prefetcher."""
    return parse_policy_spec(spec).build()


def prefetcher_label(p: PrefetcherSpec) -> str:
    if p is None:
        return "none"
    if isinstance(p, str):
        return p
    if isinstance(p, Schedule):
        return str(p.meta.get("name", "schedule"))
    return getattr(p, "name", type(p).__name__)


class _State:
    """The arrays the compiled loop works on (see ``engine``), grown on demand.

    Ids ``0..ndense-1`` are the dense range (pages inside their region's declared
    length), ids from ``ndense`` on are hashed pages. Per-page arrays are allocated for
    both with ``np.zeros`` (pages of memory the OS hands out when first written), and
    only the arrays the chosen policy uses are ever touched, so RSS follows the pages
    used.
    """

    def __init__(self, cfg: np.ndarray, log: bool, regions: Sequence[Region] = (), key_fill: int = E.INF):
        self.cfg = cfg
        self.doff, self.dlen = _dense_layout(regions)
        self.ndense = int(self.dlen.sum())
        cfg[E.K_NDENSE] = self.ndense
        ev, kind = int(cfg[E.K_EVICT]), int(cfg[E.K_PF])
        keyed = ev >= FIRST_EV_KIND
        self.uses = {
            "st": True,
            "arr": kind != E.PF_NONE,
            "pos": ev == E.EV_CLOCK or keyed,
            "nxt": keyed,
            "stamp": kind == E.PF_ORACLE,
        }
        # a keyed eviction's key of a page never demanded yet (MIN: its first use, filled
        # in by the backward pass; never used at all: INF)
        self.key_fill = key_fill
        self.g = np.zeros(E.N_GLOBALS, np.int64)
        nh = 1024
        self.htab = new_table(nh)
        self.hkey = np.zeros(nh, np.int64)
        n = self.ndense + nh
        self.st = np.zeros(n, np.int64)
        self.arr = np.zeros(n, np.int64)
        self.pos = np.zeros(n, np.int64)
        self.nxt = np.full(n, key_fill, np.int64) if self.uses["nxt"] and key_fill else np.zeros(n, np.int64)
        self.stamp = np.zeros(n, np.int64)
        self.frames = np.zeros(self._frames_size(n), np.int64)
        self.heap = np.zeros((2, self._queue_size(1024)), np.int64)
        self.logs = np.zeros((2, 1 << 16 if log else 0), np.int64)
        self.vlog = np.zeros(1 << 12 if cfg[E.K_VLOG] else 0, np.int64)

    def _frames_size(self, n: int) -> int:
        return min(int(self.cfg[E.K_CAP]), n) if self.uses["pos"] else 1

    def _queue_size(self, resident: int) -> int:
        # LRU/FIFO: the recency queue, MIN: the heap; twice the live entries (one per
        # resident page) keeps compaction and rebuilds amortised O(1)
        return 2 * min(int(self.cfg[E.K_CAP]), resident) + 2 * MAX_PREFETCH + 16

    def reserve(self, new_resident: int) -> None:
        """Room in the queue (heap) for ``new_resident`` more resident pages.

        The queue follows the resident pages, not the capacity: its tail sweeps the
        whole array between compactions, so an array sized for a large capacity would
        be written through (RSS) even when few pages are ever used.
        """
        need = self._queue_size(int(self.g[E.G_NRES]) + new_resident)
        if need > self.heap.shape[1]:
            size = max(need, min(2 * self.heap.shape[1], self._queue_size(1 << 62)))
            heap = np.zeros((2, size), np.int64)
            heap[:, : self.heap.shape[1]] = self.heap
            self.heap = heap

    def tier(self) -> E.Tier:
        """The state ``engine.run`` works on (re-made for every call: ``ensure`` replaces
        the arrays when they grow)."""
        return E.Tier(
            self.g,
            self.cfg,
            self.htab,
            self.hkey,
            self.doff,
            self.dlen,
            self.st,
            self.arr,
            self.pos,
            self.nxt,
            self.frames,
            self.heap,
            self.stamp,
            self.logs,
            self.vlog,
        )

    def ensure(self, new_keys: int) -> None:
        need = int(self.g[E.G_NSLOTS]) + new_keys + MAX_PREFETCH + 1
        self.htab = grown(self.htab, need)
        if need > len(self.hkey):
            nh = max(need, 2 * len(self.hkey))
            self.hkey = _extended(self.hkey, nh, 0)
            n = self.ndense + nh
            for name, used in self.uses.items():
                fill = self.key_fill if name == "nxt" and used else 0
                setattr(self, name, _extended(getattr(self, name), n, fill) if used else np.zeros(n, np.int64))
            nf = self._frames_size(n)
            if nf > len(self.frames):
                self.frames = _extended(self.frames, nf, 0)
        if self.cfg[E.K_LOG] and self.g[E.G_LOGN] + MAX_PREFETCH > self.logs.shape[1]:
            logs = np.zeros((2, 2 * self.logs.shape[1]), np.int64)
            logs[:, : self.logs.shape[1]] = self.logs
            self.logs = logs
        if self.cfg[E.K_VLOG] and self.g[E.G_VLOGN] + MAX_PREFETCH + 1 > len(self.vlog):
            self.vlog = _extended(self.vlog, 2 * len(self.vlog), 0)
        self.reserve(MAX_PREFETCH + 1)

    def keys(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(region, page) of ids (for the prefetch log)."""
        ids = np.asarray(ids, np.int64)
        dense = ids < self.ndense
        region = np.empty(len(ids), np.int64)
        page = np.empty(len(ids), np.int64)
        ends = self.doff + self.dlen
        r = np.searchsorted(ends, ids[dense], side="right")
        region[dense] = r
        page[dense] = ids[dense] - self.doff[r]
        k = self.hkey[ids[~dense] - self.ndense]
        region[~dense], page[~dense] = split_keys(k)
        return region, page


def _extended(a: np.ndarray, n: int, fill: int) -> np.ndarray:
    out = np.full(n, fill, a.dtype) if fill else np.zeros(n, a.dtype)
    out[: len(a)] = a
    return out


# Pages of declared region length that get dense ids (the rest are hashed): with 8 B of
# ``st`` per page, at most 128 MiB of address space per per-page array, however sparsely
# a huge region is used.
DENSE_MAX_PAGES = 1 << 24


def _dense_layout(regions: Sequence[Region]) -> tuple[np.ndarray, np.ndarray]:
    """Offset and length (pages) of each region in the dense id range.

    A region of unknown length, or one that no longer fits in DENSE_MAX_PAGES, gets
    length 0: its pages are hashed.
    """
    dlen = np.zeros(len(regions), np.int64)
    total = 0
    for i, r in enumerate(regions):
        n = max(0, int(r.pages))
        if total + n <= DENSE_MAX_PAGES:
            dlen[i] = n
            total += n
    doff = (np.cumsum(dlen) - dlen).astype(np.int64)
    return doff, dlen


EvictionSpec = str | Eviction


def resolve_eviction(spec: EvictionSpec) -> Eviction:
    """``"lru"``, ``"learned:model=ev.pt"`` (the spec grammar) or an Eviction → an Eviction."""
    if isinstance(spec, Eviction):
        return spec
    if not isinstance(spec, str):
        raise PagecastError(f"not an eviction policy: {spec!r}")
    return parse_eviction_spec(spec).build()


def eviction_label(spec: EvictionSpec) -> str:
    if isinstance(spec, Eviction):
        return spec.name
    return str(parse_eviction_spec(spec))


def eviction_kind(ev: Eviction) -> int:
    """The engine's structure (LRU, FIFO, CLOCK) or the keyed kind running ``ev``."""
    if ev.structure in E.STRUCTURES:
        return E.STRUCTURES[ev.structure]
    kind = EV_KINDS.get(ev.name)
    if ev.structure != "keyed" or kind is None or type(ev).nb_key is not EV_KERNELS[kind - FIRST_EV_KIND][1]:
        raise PagecastError(
            f"eviction {ev.name!r} has no compiled kernel in the registry "
            f"(structure {ev.structure!r}; keyed ones: {', '.join(EV_KINDS)})"
        )
    return kind


def _config_array(config: SimConfig, page_size: int, kind: int, ev: Eviction | None = None) -> np.ndarray:
    ev = resolve_eviction(config.eviction) if ev is None else ev
    if config.link_bytes_per_s <= 0:
        raise PagecastError("link bandwidth must be positive")
    cfg = np.zeros(E.N_CFG, np.int64)
    cfg[E.K_CAP] = config.capacity_pages(page_size)
    cfg[E.K_PAGE] = page_size
    cfg[E.K_FAULT_NS] = config.fault_ns
    cfg[E.K_LINK_LAT] = config.link_latency_ns
    cfg[E.K_XFER_NS] = max(1, round(page_size * 1e9 / config.link_bytes_per_s))
    cfg[E.K_EVICT] = eviction_kind(ev)
    cfg[E.K_EV_GUARD] = 1 if ev.guards_prefetch else 0
    cfg[E.K_VLOG] = 1 if config.log_victims else 0
    cfg[E.K_PF] = kind
    cfg[E.K_MAXPF] = max(0, min(config.max_prefetch, MAX_PREFETCH))
    cfg[E.K_ORACLE_K] = config.oracle_k
    cfg[E.K_LOOKAHEAD] = config.oracle_lookahead
    cfg[E.K_LOG] = 1 if config.log_prefetches else 0
    if config.schedule_triggers not in ("miss", "all"):
        raise PagecastError(f"unknown schedule trigger mode {config.schedule_triggers!r} (miss or all)")
    cfg[E.K_SCHED_ALL] = 1 if config.schedule_triggers == "all" else 0
    return cfg


def _resolve(prefetcher: PrefetcherSpec, config: SimConfig, engine: str) -> tuple[int, Prefetcher | Schedule | None]:
    if prefetcher is None:
        return E.PF_NONE, None
    if isinstance(prefetcher, str):
        prefetcher = parse_prefetcher(prefetcher)
    if isinstance(prefetcher, Schedule):
        return E.PF_SCHEDULE, prefetcher
    if not isinstance(prefetcher, Prefetcher):
        raise PagecastError(f"not a prefetcher: {prefetcher!r}")
    if engine == "python":
        return E.PF_PYTHON, prefetcher
    if prefetcher.name == "none":
        return E.PF_NONE, None
    if isinstance(prefetcher, Oracle):
        config.oracle_k, config.oracle_lookahead = prefetcher.k, prefetcher.lookahead
        return E.PF_ORACLE, prefetcher
    kind = kind_of(prefetcher)  # a registered compiled policy runs inside the loop
    return (E.PF_PYTHON if kind is None else kind), prefetcher


def simulate(
    trace_or_path: Trace | str | Path,
    config: SimConfig | None = None,
    prefetcher: PrefetcherSpec = "none",
    *,
    engine: str = "auto",
) -> SimResult:
    """Simulate ``prefetcher`` (a name, a Prefetcher, or a Schedule) on a trace.

    ``engine="python"`` calls a Prefetcher's per-event ``observe`` instead of its compiled
    twin (same results, slower; any Prefetcher without a compiled twin runs this way).
    ``engine="general"`` runs the general compiled loop even where the leaner one for
    no prefetch (``engine.run_plain``) would do: same results, for verification.
    """
    if engine not in ("auto", "python", "general"):
        raise PagecastError(f"unknown simulator engine {engine!r} (auto, python or general)")
    config = SimConfig() if config is None else SimConfig(**{**config.__dict__})
    trace = as_trace(trace_or_path)
    if isinstance(config.capacity, str) and config.capacity.strip().endswith("%"):
        # the CLI's percent of the trace's distinct pages, accepted from Python too
        config.capacity = resolve_capacity(config.capacity, trace, config.page_size)
    if config.uvm:
        from pagecast.sim.uvm import simulate_uvm

        return simulate_uvm(trace, config, prefetcher)
    t_start = time.perf_counter()
    page_size = int(config.page_size or trace.page_size)
    kind, pobj = _resolve(prefetcher, config, engine)
    ev = resolve_eviction(config.eviction)
    cfg = _config_array(config, page_size, kind, ev)
    st = _State(cfg, config.log_prefetches, trace.regions, E.INF if ev.uses_next_use else 0)
    rpages = region_pages(trace.regions)
    eparams = ev.params()

    pstate, pparams, sched = _prefetcher_arrays(pobj, kind, trace)
    out_r = np.zeros(MAX_PREFETCH, np.int64)
    out_p = np.zeros(MAX_PREFETCH, np.int64)

    nextuse_file = None
    nextuse_all: np.ndarray | None = None
    read_clock = ReadClock()
    try:
        keyed = cfg[E.K_EVICT] >= FIRST_EV_KIND
        if keyed:
            nextuse_all, nextuse_file = _eviction_values(ev, trace, st, int(cfg[E.K_CAP]))
        empty = np.zeros(0, np.int64)
        base = 0
        lookahead = int(config.oracle_lookahead) if kind == E.PF_ORACLE else 0
        plain = kind == E.PF_NONE and not keyed and not config.log_victims and engine != "general"
        chunks = read_clock.wrap(demand_chunks(trace, config.chunk_rows))
        cur = next(chunks, None)
        cur_ids = _ids(st, cur) if cur is not None else None
        while cur is not None:
            nxt = next(chunks, None)
            nxt_ids = _ids(st, nxt) if nxt is not None else None
            n = len(cur["t"])
            ids = cur_ids
            if lookahead and nxt_ids is not None:
                ids = np.concatenate([cur_ids, nxt_ids[:lookahead]])
            nextuse = nextuse_all[base : base + n] if nextuse_all is not None else empty
            # at most one page made resident per row by demand; ``run`` asks for more
            # room before each row's prefetches
            st.reserve(n)
            rows = E.Rows(cur["t"], ids, cur["write"], cur["region"], cur["page"], nextuse)
            if plain:
                E.run_plain(st.tier(), rows, n, 0)
            else:
                pol = E.Policies(pstate, pparams, rpages, out_r, out_p, sched, eparams)
                _run_general(st, pobj, rows, pol, n, base)
            base += n
            cur, cur_ids = nxt, nxt_ids
    finally:
        if nextuse_file is not None:
            del nextuse_all
            os.unlink(nextuse_file)
    res = _result(trace, config, prefetcher, st, page_size)
    res.wall_s = time.perf_counter() - t_start
    res.extra["read_cpu_s"] = read_clock.cpu_s  # forward pass only (MIN's backward pass reads the trace again)
    _add_logs(res, config, st)
    return res


def _eviction_values(ev: Eviction, trace: Trace, st: _State, capacity: int) -> tuple[np.ndarray, str | None]:
    """A keyed eviction's value per demand row, and the scratch file to remove after the run:
    MIN's next use (memory-mapped), else the values batched ahead of time, the whole run's
    before its first row plays."""
    if ev.uses_next_use:
        return _next_use_pass(trace, st)
    return ahead_values(ev, trace, capacity), None


def _prefetcher_arrays(pobj: Any, kind: int, trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The prefetcher made ready for a run, and what the compiled loop reads of it: its state,
    its parameters, and a schedule's rows (trigger, region, page)."""
    pstate = np.zeros(1, np.int64)
    pparams = np.zeros(1, np.int64)
    if isinstance(pobj, Prefetcher):
        pobj.reset(trace.regions)
    if isinstance(pobj, NumbaPrefetcher) and kind != E.PF_PYTHON:
        pparams = pobj.params()
        pstate = pobj.init_state(len(trace.regions))
    if isinstance(pobj, Oracle) and kind == E.PF_PYTHON:
        d = read_demand(trace)
        pobj.set_stream(d["region"], d["page"], d["t"])
    sched = np.zeros((3, 0), np.int64)
    if isinstance(pobj, Schedule):
        s = pobj.sorted()
        sched = np.ascontiguousarray(np.stack([s.trigger, s.region.astype(np.int64), s.page]))
    return pstate, pparams, sched


def _add_logs(res: SimResult, config: SimConfig, st: _State) -> None:
    """The prefetch and victim logs asked for, as (region, page) keys."""
    if config.log_prefetches:
        n = int(st.g[E.G_LOGN])
        region, page = st.keys(st.logs[1, :n])
        res.extra["prefetch_log"] = (st.logs[0, :n].copy(), region, page)
    if config.log_victims:
        res.extra["victims"] = st.keys(st.vlog[: int(st.g[E.G_VLOGN])])


def ahead_values(ev: Eviction, trace: Trace, capacity: int) -> np.ndarray:
    """``ev.ahead`` over the trace's whole demand stream (zeros if it gives none), checked."""
    d = read_demand(trace)
    # the region of every row by its identity across runs, for evictions trained on other runs
    d["region_key"] = row_region_hashes(trace.regions, d["region"])
    a = ev.ahead(d, capacity)
    n = len(d["t"])
    if a is None:
        return np.zeros(n, np.int64)
    a = np.ascontiguousarray(a, np.int64)
    if a.shape != (n,):
        raise PagecastError(f"eviction {ev.name!r} gave {a.shape} values for {n} demand rows of {trace.path}")
    return a


def _run_general(st: _State, pobj, rows: E.Rows, pol: E.Policies, n: int, base: int) -> None:
    """One chunk through ``engine.run``: grow tables and ask a Python prefetcher as it asks."""
    i0 = 0
    while True:
        status = E.run(st.tier(), rows, pol, n, i0, base)
        i0 = int(st.g[E.G_POS])
        if status == E.DONE:
            break
        if status == E.NEED_GROW:
            st.ensure(0)
            continue
        i = i0
        reqs = pobj.observe(int(rows.t[i]), int(rows.reg[i]), int(rows.pg[i]), bool(st.g[E.G_LASTHIT]))
        if reqs:
            arr = np.asarray(reqs, np.int64).reshape(-1, 2)
            E.issue_pages(st.tier(), pol.eparams, arr[:, 0].copy(), arr[:, 1].copy(), base + i)
        i0 = i + 1


def _ids(st: _State, chunk: dict[str, np.ndarray]) -> np.ndarray:
    n = len(chunk["t"])
    ids = np.empty(n, np.int64)
    i = 0
    while True:
        i = E.dense_ids(st.g, st.cfg, st.htab, st.hkey, st.doff, st.dlen, chunk["region"], chunk["page"], ids, i)
        if i == n:
            return ids
        if i < 0:
            row = -1 - i
            raise PagecastError(
                f"demand row has page {int(chunk['page'][row])} of region {int(chunk['region'][row])}, "
                "which cannot be simulated (negative page or region < -1)"
            )
        st.ensure(max(1024, int(st.g[E.G_NSLOTS])))  # grow geometrically


def _next_use_pass(trace: Trace, st: _State) -> tuple[np.ndarray, str]:
    """Backward pass for MIN: next use of every demand row, in a memory-mapped file."""
    fd, path = tempfile.mkstemp(prefix="pagecast-nextuse-", suffix=".i64")
    os.close(fd)
    mm = None
    for start, chunk in demand_chunks_reversed(trace):
        n = len(chunk["t"])
        if mm is None:
            mm = np.memmap(path, dtype=np.int64, mode="w+", shape=(max(start + n, 1),))
        E.next_use_backward(st.nxt, _ids(st, chunk), start, mm[start : start + n])
    if mm is None:
        mm = np.memmap(path, dtype=np.int64, mode="w+", shape=(1,))
    return mm, path


def _result(trace: Trace, config: SimConfig, prefetcher: PrefetcherSpec, st: _State, page_size: int) -> SimResult:
    g = st.g
    compute = int(g[E.G_LAST_T] - g[E.G_T0]) if g[E.G_STARTED] else 0
    stall = int(g[E.C_STALL])
    return SimResult(
        trace=str(trace.path),
        prefetcher=prefetcher_label(prefetcher),
        eviction=eviction_label(config.eviction),
        capacity_pages=int(st.cfg[E.K_CAP]),
        page_size=page_size,
        accesses=int(g[E.C_ACCESSES]),
        hits=int(g[E.C_HITS]),
        faults=int(g[E.C_FAULTS]),
        late=int(g[E.C_LATE]),
        prefetches=int(g[E.C_PF_ISSUED]),
        useful=int(g[E.C_PF_USEFUL]),
        useless=int(g[E.C_PF_USELESS]),
        # every prefetch sets PF on a page not resident; a use (useful) or an eviction (useless) clears it
        unused_at_end=int(g[E.C_PF_ISSUED] - g[E.C_PF_USEFUL] - g[E.C_PF_USELESS]),
        redundant=int(g[E.C_PF_REDUNDANT]),
        skipped=int(g[E.C_PF_SKIPPED]),
        evictions=int(g[E.C_EVICTIONS]),
        bytes_in=int(g[E.C_BYTES_IN]),
        bytes_out=int(g[E.C_BYTES_OUT]),
        stall_ns=stall,
        late_ns=int(g[E.C_LATE_NS]),
        compute_ns=compute,
        est_time_ns=compute + stall,
        distinct_pages=int(g[E.G_DISTINCT]),
    )


def count_distinct(trace_or_path: Trace | str | Path, chunk_rows: int = 1 << 20) -> int:
    """Distinct demanded pages of a trace, streaming (for capacities given in percent)."""
    trace = as_trace(trace_or_path)
    cfg = np.zeros(E.N_CFG, np.int64)
    cfg[E.K_CAP] = 1
    st = _State(cfg, False, trace.regions)
    distinct = 0
    for chunk in demand_chunks(trace, chunk_rows):
        distinct += E.mark_seen(st.st, _ids(st, chunk))
    return distinct


def resolve_capacity(
    spec: str | int, trace_or_path: Trace | str | Path, page_size: int | None = None, _cache: dict | None = None
) -> int:
    """Pages for '4096', '64MiB' or '25%' (of the trace's distinct pages)."""
    trace = as_trace(trace_or_path)
    ps = int(page_size or trace.page_size)
    s = str(spec).strip()
    if s.endswith("%"):
        try:
            frac = float(s[:-1]) / 100
        except ValueError:
            raise PagecastError(f"bad capacity {spec!r}") from None
        if not 0 < frac:
            raise PagecastError(f"capacity {spec!r} must be positive")
        key = str(trace.path)
        if _cache is not None and key in _cache:
            distinct = _cache[key]
        else:
            distinct = count_distinct(trace)
            if _cache is not None:
                _cache[key] = distinct
        return max(1, int(round(distinct * frac)))
    from pagecast.sim.config import parse_capacity

    return parse_capacity(s, ps)
