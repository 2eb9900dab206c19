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
from pagecast.policies.base import Prefetcher, get_prefetcher
from pagecast.policies.oracle import Oracle
from pagecast.sim import engine as E
from pagecast.sim.config import SimConfig, SimResult
from pagecast.sim.hashtab import grown, new_table
from pagecast.sim.stream import as_trace, demand_chunks, demand_chunks_reversed, read_demand
from pagecast.trace.reader import Trace
from pagecast.trace.regions import Region
from pagecast.trace.schedule import Schedule

PrefetcherSpec = str | Prefetcher | Schedule | None


def parse_prefetcher(spec: str) -> Prefetcher:
    """'name' or 'name:opt=val,opt=val' (ints, floats or strings) → a Prefetcher."""
    name, _, rest = spec.partition(":")
    opts: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        k, eq, v = item.partition("=")
        if not eq:
            raise PagecastError(f"bad prefetcher option {item!r} in {spec!r} (use name:key=value,...)")
        for conv in (int, float):
            try:
                v = conv(v)
                break
            except ValueError:
                pass
        opts[k.strip()] = v
    try:
        return get_prefetcher(name.strip(), **opts)
    except TypeError as e:
        raise PagecastError(f"bad options for prefetcher {name!r}: {e}") from None
    except ValueError as e:
        raise PagecastError(str(e)) from None


def prefetcher_label(p: PrefetcherSpec) -> str:
    if p is None:
        return "none"
    if isinstance(p, str):
        return p
    if isinstance(p, Schedule):
        return str(p.meta.get("name", "schedule"))
    return getattr(p, "name", type(p).__name__)


class _State:
    """The arrays the compiled loop works on, grown on demand."""

    def __init__(self, cfg: np.ndarray, distinct_hint: int, log: bool, regions: Sequence[Region] = ()):
        n = max(1024, distinct_hint)
        self.cfg = cfg
        self.doff, self.dlen, self.dmap = _dense_layout(regions)
        self.g = np.zeros(E.N_GLOBALS, np.int64)
        self.htab = new_table(n)
        self.S = np.zeros((n, E.N_FIELDS), np.int64)
        self.frames = np.zeros(min(int(cfg[E.K_CAP]), n), np.int64)
        self.heap = np.zeros((2, self._heap_size()), np.int64)
        self.stamp = np.zeros(n, np.int64)
        self.logs = np.zeros((2, 1 << 16 if log else 0), np.int64)

    def _heap_size(self) -> int:
        return 2 * len(self.frames) + 2 * MAX_PREFETCH + 16

    def ensure(self, new_keys: int) -> None:
        need = int(self.g[E.G_NSLOTS]) + new_keys + MAX_PREFETCH + 1
        self.htab = grown(self.htab, need)
        if need > self.S.shape[0]:
            size = max(need, 2 * self.S.shape[0])
            S = np.zeros((size, E.N_FIELDS), np.int64)
            S[: self.S.shape[0]] = self.S
            self.S = S
            stamp = np.zeros(size, np.int64)
            stamp[: len(self.stamp)] = self.stamp
            self.stamp = stamp
            nf = min(int(self.cfg[E.K_CAP]), size)
            if nf > len(self.frames):
                frames = np.zeros(nf, np.int64)
                frames[: len(self.frames)] = self.frames
                self.frames = frames
                heap = np.zeros((2, self._heap_size()), np.int64)
                heap[:, : self.heap.shape[1]] = self.heap
                self.heap = heap
        if self.cfg[E.K_LOG] and self.g[E.G_LOGN] + MAX_PREFETCH > self.logs.shape[1]:
            logs = np.zeros((2, 2 * self.logs.shape[1]), np.int64)
            logs[:, : self.logs.shape[1]] = self.logs
            self.logs = logs


DENSE_MAX_PAGES = 1 << 27  # 512 MiB of address space for the id cache (zero pages until touched)


def _dense_layout(regions: Sequence[Region]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Offsets and lengths (pages) of the regions in the dense id cache, and the cache.

    Regions of unknown length, or past DENSE_MAX_PAGES in total, get length 0: their
    pages go to the hash table directly.
    """
    dlen = np.array([max(0, int(r.pages)) for r in regions], np.int64)
    total = np.cumsum(dlen)
    dlen[total > DENSE_MAX_PAGES] = 0
    doff = np.concatenate([[0], np.cumsum(dlen)[:-1]]).astype(np.int64) if len(dlen) else np.zeros(0, np.int64)
    return doff, dlen, np.zeros(int(dlen.sum()) if len(dlen) else 0, np.int32)


def _config_array(config: SimConfig, page_size: int, kind: int) -> np.ndarray:
    ev = config.eviction.lower()
    if ev not in E.EVICTIONS:
        raise PagecastError(f"unknown eviction policy {config.eviction!r} (choose from lru, fifo, clock, min)")
    if config.link_bytes_per_s <= 0:
        raise PagecastError("link bandwidth must be positive")
    cfg = np.zeros(E.N_CFG, np.int64)
    cfg[E.K_CAP] = config.capacity_pages(page_size)
    cfg[E.K_PAGE] = page_size
    cfg[E.K_FAULT_NS] = config.fault_ns
    cfg[E.K_LINK_LAT] = config.link_latency_ns
    cfg[E.K_XFER_NS] = max(1, round(page_size * 1e9 / config.link_bytes_per_s))
    cfg[E.K_EVICT] = E.EVICTIONS[ev]
    cfg[E.K_PF] = kind
    cfg[E.K_MAXPF] = max(0, min(config.max_prefetch, MAX_PREFETCH))
    cfg[E.K_ORACLE_K] = config.oracle_k
    cfg[E.K_LOOKAHEAD] = config.oracle_lookahead
    cfg[E.K_LOG] = 1 if config.log_prefetches else 0
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
    if isinstance(prefetcher, NumbaPrefetcher) and prefetcher.name in E.NUMBA_KINDS:
        return E.NUMBA_KINDS[prefetcher.name], prefetcher
    return E.PF_PYTHON, prefetcher


def simulate(trace_or_path: Trace | str | Path, config: SimConfig | None = None, prefetcher: PrefetcherSpec = "none",
             *, engine: str = "auto") -> SimResult:
    """Simulate ``prefetcher`` (a name, a Prefetcher, or a Schedule) on a trace.

    ``engine="python"`` calls a Prefetcher's per-event ``observe`` instead of its compiled
    twin (same results, slower; any Prefetcher without a compiled twin runs this way).
    """
    config = SimConfig() if config is None else SimConfig(**{**config.__dict__})
    trace = as_trace(trace_or_path)
    if config.uvm:
        from pagecast.sim.uvm import simulate_uvm

        return simulate_uvm(trace, config, prefetcher)
    t_start = time.perf_counter()
    page_size = int(config.page_size or trace.page_size)
    kind, pobj = _resolve(prefetcher, config, engine)
    cfg = _config_array(config, page_size, kind)
    st = _State(cfg, 1024, config.log_prefetches, trace.regions)
    rpages = region_pages(trace.regions)

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

    nextuse_file = None
    nextuse_all: np.ndarray | None = None
    try:
        if cfg[E.K_EVICT] == E.EV_MIN:
            nextuse_all, nextuse_file = _next_use_pass(trace, st)
        out_r = np.zeros(MAX_PREFETCH, np.int64)
        out_p = np.zeros(MAX_PREFETCH, np.int64)
        empty = np.zeros(0, np.int64)
        base = 0
        lookahead = int(config.oracle_lookahead) if kind == E.PF_ORACLE else 0
        chunks = demand_chunks(trace, config.chunk_rows)
        cur = next(chunks, None)
        cur_ids = _ids(st, cur) if cur is not None else None
        while cur is not None:
            nxt = next(chunks, None)
            nxt_ids = _ids(st, nxt) if nxt is not None else None
            n = len(cur["t"])
            ids = cur_ids
            if lookahead and nxt_ids is not None:
                ids = np.concatenate([cur_ids, nxt_ids[:lookahead]])
            nextuse = nextuse_all[base: base + n] if nextuse_all is not None else empty
            i0 = 0
            while True:
                status = E.run(st.g, cfg, st.htab, st.S, st.frames, st.heap, cur["t"], ids, cur["write"],
                               cur["region"], cur["page"], nextuse, n, i0, base, pstate, pparams, rpages, out_r, out_p,
                               st.stamp, sched, st.logs)
                i0 = int(st.g[E.G_POS])
                if status == E.DONE:
                    break
                if status == E.NEED_GROW:
                    st.ensure(0)
                    continue
                i = i0
                reqs = pobj.observe(int(cur["t"][i]), int(cur["region"][i]), int(cur["page"][i]), bool(st.g[E.G_LASTHIT]))
                if reqs:
                    arr = np.asarray(reqs, np.int64).reshape(-1, 2)
                    E.issue_pages(st.g, cfg, st.htab, st.S, st.frames, st.heap, arr[:, 0].copy(),
                                  arr[:, 1].copy(), base + i, st.logs)
                i0 = i + 1
            base += n
            cur, cur_ids = nxt, nxt_ids
    finally:
        if nextuse_file is not None:
            del nextuse_all
            os.unlink(nextuse_file)
    res = _result(trace, config, prefetcher, st, page_size)
    res.wall_s = time.perf_counter() - t_start
    if config.log_prefetches:
        n = int(st.g[E.G_LOGN])
        keys = st.S[st.logs[1, :n], E.F_KEY]
        res.extra["prefetch_log"] = (st.logs[0, :n].copy(), (keys >> 40) - 1, keys & ((1 << 40) - 1))
    return res


def _ids(st: _State, chunk: dict[str, np.ndarray]) -> np.ndarray:
    n = len(chunk["t"])
    ids = np.empty(n, np.int64)
    i = 0
    while True:
        i = E.intern_rows(st.g, st.htab, st.S, chunk["region"], chunk["page"], ids, i, st.dmap, st.doff, st.dlen)
        if i == n:
            return ids
        st.ensure(max(1024, int(st.g[E.G_NSLOTS])))  # grow geometrically


def _next_use_pass(trace: Trace, st: _State) -> tuple[np.ndarray, str]:
    """Backward pass for MIN: next use of every demand row, in a memory-mapped file."""
    total = None
    fd, path = tempfile.mkstemp(prefix="pagecast-nextuse-", suffix=".i64")
    os.close(fd)
    mm = None
    for start, chunk in demand_chunks_reversed(trace):
        n = len(chunk["t"])
        if total is None:
            total = start + n
            mm = np.memmap(path, dtype=np.int64, mode="w+", shape=(max(total, 1),))
            st.S[:, E.F_NXT] = E.INF
        st.ensure(n)
        E.next_use_backward(st.g, st.htab, st.S, chunk["region"], chunk["page"], start, mm[start: start + n])
    if mm is None:
        mm = np.memmap(path, dtype=np.int64, mode="w+", shape=(1,))
    return mm, path


def _result(trace: Trace, config: SimConfig, prefetcher: PrefetcherSpec, st: _State, page_size: int) -> SimResult:
    g = st.g
    ns = int(g[E.G_NSLOTS])
    flags = st.S[:ns, E.F_FLAG]
    compute = int(g[E.G_LAST_T] - g[E.G_T0]) if g[E.G_STARTED] else 0
    stall = int(g[E.C_STALL])
    return SimResult(
        trace=str(trace.path), prefetcher=prefetcher_label(prefetcher), eviction=config.eviction.lower(),
        capacity_pages=int(st.cfg[E.K_CAP]), page_size=page_size,
        accesses=int(g[E.C_ACCESSES]), hits=int(g[E.C_HITS]), faults=int(g[E.C_FAULTS]), late=int(g[E.C_LATE]),
        prefetches=int(g[E.C_PF_ISSUED]), useful=int(g[E.C_PF_USEFUL]), useless=int(g[E.C_PF_USELESS]),
        unused_at_end=int(np.count_nonzero((flags & (E.RES | E.PF)) == (E.RES | E.PF))),
        redundant=int(g[E.C_PF_REDUNDANT]), skipped=int(g[E.C_PF_SKIPPED]), evictions=int(g[E.C_EVICTIONS]),
        bytes_in=int(g[E.C_BYTES_IN]), bytes_out=int(g[E.C_BYTES_OUT]), stall_ns=stall, late_ns=int(g[E.C_LATE_NS]),
        compute_ns=compute, est_time_ns=compute + stall, distinct_pages=int(g[E.G_DISTINCT]),
    )


def count_distinct(trace_or_path: Trace | str | Path, chunk_rows: int = 1 << 20) -> int:
    """Distinct demanded pages of a trace, streaming (for capacities given in percent)."""
    trace = as_trace(trace_or_path)
    cfg = np.zeros(E.N_CFG, np.int64)
    cfg[E.K_CAP] = 1
    st = _State(cfg, 1024, False, trace.regions)
    for chunk in demand_chunks(trace, chunk_rows):
        _ids(st, chunk)
    return int(st.g[E.G_NSLOTS])


def resolve_capacity(spec: str | int, trace_or_path: Trace | str | Path, page_size: int | None = None, _cache: dict | None = None) -> int:
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
