"""The compiled core of the tiered-memory simulator (numba).

State lives in flat arrays so the loop is resumable: ``run`` returns early when its
tables need to grow (``NEED_GROW``) or when a Python prefetcher must be asked
(``PAUSE``); the driver in ``simulate.py`` does that and calls ``run`` again from where it
stopped. Pages are dense slot ids handed out by ``hashtab``.

Model per demand event (see docs/simulator.md): the clock advances by the gap between
trace timestamps; a resident page is a hit, or a *late* prefetch if its transfer has not
ended (the program waits for the rest); a missing page is a fault that stalls for
``fault_ns + link_latency_ns + transfer``. Prefetches queue on the link (one transfer at
a time, each ``xfer_ns``) and arrive ``link_latency_ns`` after their transfer ends.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pagecast.policies import bestoffset, leap, markov, nextline, stride
from pagecast.sim.hashtab import intern, make_key

# --- per-slot fields: S[slot, field] (one slot's fields share a cache line) ----------------------------------------------
# F_STAMP: for LRU/FIFO, the stamp of the slot's newest entry in the recency queue.
F_KEY, F_FLAG, F_ARR, F_STAMP, F_SPARE, F_POS, F_NXT, F_SEEN = range(8)
N_FIELDS = 8
RES, PF, DIRTY, REF = 1, 2, 4, 8  # F_FLAG bits

# --- globals g[...] ---------------------------------------------------------------
(G_NRES, G_NSLOTS, G_HEAD, G_TAIL, G_HAND, G_NOW, G_LAST_T, G_T0, G_LINK, G_HEAPN, G_SCHED, G_LOGN, G_POS,
 G_LASTHIT, G_STARTED,
 C_ACCESSES, C_HITS, C_FAULTS, C_LATE, C_PF_ISSUED, C_PF_USEFUL, C_PF_USELESS, C_PF_REDUNDANT, C_PF_SKIPPED,
 C_BYTES_IN, C_BYTES_OUT, C_STALL, C_EVICTIONS, C_OBSERVED, C_LATE_NS, G_DISTINCT, G_STAMP) = range(32)
N_GLOBALS = 32

# --- config cfg[...] ----------------------------------------------------------------
(K_CAP, K_PAGE, K_FAULT_NS, K_LINK_LAT, K_XFER_NS, K_EVICT, K_PF, K_MAXPF, K_ORACLE_K, K_LOOKAHEAD, K_LOG) = range(11)
N_CFG = 12

EV_LRU, EV_FIFO, EV_CLOCK, EV_MIN = range(4)
EVICTIONS = {"lru": EV_LRU, "fifo": EV_FIFO, "clock": EV_CLOCK, "min": EV_MIN, "belady": EV_MIN}

PF_NONE, PF_NEXTLINE, PF_STRIDE, PF_LEAP, PF_MARKOV, PF_BESTOFFSET, PF_ORACLE, PF_SCHEDULE, PF_PYTHON = range(9)
NUMBA_KINDS = {"nextline": PF_NEXTLINE, "stride": PF_STRIDE, "leap": PF_LEAP, "markov": PF_MARKOV, "bestoffset": PF_BESTOFFSET}

DONE, NEED_GROW, PAUSE = 0, 1, 2
NIL = -1
INF = 1 << 62
MAX_PF = 64


# --- eviction structures -------------------------------------------------------------
# LRU and FIFO keep a recency queue instead of a doubly linked list: entries (stamp, slot)
# in ``heap[0:2, G_HEAD:G_TAIL]`` in order of use; an entry is live while its slot is
# resident and still carries that stamp. A hit appends one entry (a sequential write)
# instead of unlinking the slot (two random cache misses on its neighbours); the victim
# is the oldest live entry, i.e. exactly the list's head. Stale entries are dropped when
# the queue is full (live entries <= resident pages <= half its length: amortised O(1)).
@njit(cache=True, inline="always")
def _q_live(S, heap, j):
    s = heap[1, j]
    return (S[s, F_FLAG] & RES) != 0 and S[s, F_STAMP] == heap[0, j]


@njit(cache=True)
def _q_compact(g, S, heap):
    k = 0
    for j in range(g[G_HEAD], g[G_TAIL]):
        if _q_live(S, heap, j):
            heap[0, k] = heap[0, j]
            heap[1, k] = heap[1, j]
            k += 1
    g[G_HEAD] = 0
    g[G_TAIL] = k


@njit(cache=True, inline="always")
def _q_push(g, S, heap, s):
    if g[G_TAIL] == heap.shape[1]:
        _q_compact(g, S, heap)
    st = g[G_STAMP] + 1
    g[G_STAMP] = st
    S[s, F_STAMP] = st
    t = g[G_TAIL]
    heap[0, t] = st
    heap[1, t] = s
    g[G_TAIL] = t + 1


@njit(cache=True, inline="always")
def _q_pop(g, S, heap):
    """Slot of the oldest live entry (removed from the queue)."""
    while True:
        j = g[G_HEAD]
        g[G_HEAD] = j + 1
        if _q_live(S, heap, j):
            return heap[1, j]


@njit(cache=True)
def _sift_up(g, heap, key, s):
    j = g[G_HEAPN]
    g[G_HEAPN] = j + 1
    while j > 0:
        parent = (j - 1) >> 1
        if heap[0, parent] >= key:
            break
        heap[0, j] = heap[0, parent]
        heap[1, j] = heap[1, parent]
        j = parent
    heap[0, j] = key
    heap[1, j] = s


@njit(cache=True)
def _heap_push(g, heap, S, frames, key, s):
    if g[G_HEAPN] == heap.shape[1]:
        # Lazy deletion leaves stale entries; keep one live entry per resident page.
        # (No recursion through _heap_push: numba's cache cannot load recursive functions.)
        g[G_HEAPN] = 0
        for j in range(g[G_NRES]):
            r = frames[j]
            _sift_up(g, heap, S[r, F_NXT], r)
    _sift_up(g, heap, key, s)


@njit(cache=True)
def _heap_pop(g, heap):
    n = g[G_HEAPN] - 1
    g[G_HEAPN] = n
    key, s = heap[0, n], heap[1, n]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and heap[0, c + 1] > heap[0, c]:
            c += 1
        if heap[0, c] <= key:
            break
        heap[0, j] = heap[0, c]
        heap[1, j] = heap[1, c]
        j = c
    if n > 0:
        heap[0, j] = key
        heap[1, j] = s


@njit(cache=True)
def _min_victim(g, heap, S):
    """Resident page used farthest in the future (top of the lazy max-heap)."""
    while True:
        s = heap[1, 0]
        if (S[s, F_FLAG] & RES) and S[s, F_NXT] == heap[0, 0]:
            return s
        _heap_pop(g, heap)


@njit(cache=True, inline="always")
def _evict(g, cfg, S, frames, heap):
    """Drop one page; return the frame it held."""
    ev = cfg[K_EVICT]
    if ev == EV_LRU or ev == EV_FIFO:
        v = _q_pop(g, S, heap)
    elif ev == EV_CLOCK:
        cap = cfg[K_CAP]
        while S[frames[g[G_HAND]], F_FLAG] & REF:
            S[frames[g[G_HAND]], F_FLAG] &= ~REF
            g[G_HAND] = (g[G_HAND] + 1) % cap
        v = frames[g[G_HAND]]
        g[G_HAND] = (g[G_HAND] + 1) % cap
    else:
        v = _min_victim(g, heap, S)
        _heap_pop(g, heap)
    f = S[v, F_FLAG]
    if f & PF:
        g[C_PF_USELESS] += 1
    if f & DIRTY:
        g[C_BYTES_OUT] += cfg[K_PAGE]
    S[v, F_FLAG] = 0
    g[C_EVICTIONS] += 1
    return S[v, F_POS]


@njit(cache=True, inline="always")
def _insert(g, cfg, S, frames, heap, s, flags):
    if g[G_NRES] < cfg[K_CAP]:
        pos = g[G_NRES]
        g[G_NRES] += 1
    else:
        pos = _evict(g, cfg, S, frames, heap)
    frames[pos] = s
    S[s, F_POS] = pos
    S[s, F_FLAG] = RES | flags
    ev = cfg[K_EVICT]
    if ev == EV_LRU or ev == EV_FIFO:
        _q_push(g, S, heap, s)
    elif ev == EV_MIN:
        _heap_push(g, heap, S, frames, S[s, F_NXT], s)


@njit(cache=True)
def issue(g, cfg, S, frames, heap, s):
    """Queue a prefetch of slot ``s`` on the link."""
    if S[s, F_FLAG] & RES:
        g[C_PF_REDUNDANT] += 1
        return
    if cfg[K_EVICT] == EV_MIN and g[G_NRES] >= cfg[K_CAP]:
        # MIN never keeps a page needed later than every resident one: do no harm.
        if S[_min_victim(g, heap, S), F_NXT] <= S[s, F_NXT]:
            g[C_PF_SKIPPED] += 1
            return
    start = max(g[G_NOW], g[G_LINK])
    g[G_LINK] = start + cfg[K_XFER_NS]
    S[s, F_ARR] = g[G_LINK] + cfg[K_LINK_LAT]
    _insert(g, cfg, S, frames, heap, s, PF)
    g[C_PF_ISSUED] += 1
    g[C_BYTES_IN] += cfg[K_PAGE]


@njit(cache=True)
def new_slot(g, htab, S, key):
    s = intern(htab, key, g[G_NSLOTS])
    if s == g[G_NSLOTS]:
        g[G_NSLOTS] += 1
        S[s, F_KEY] = key
        S[s, F_FLAG] = 0
        S[s, F_ARR] = 0
        S[s, F_NXT] = INF
        S[s, F_SEEN] = 0
    return s


@njit(cache=True)
def intern_rows(g, htab, S, reg, pg, ids, i0, dmap, doff, dlen):
    """Slot ids of rows i0...; returns where it stopped (len(reg), or earlier when the
    tables need to grow: the caller grows them and calls again from there).

    ``dmap`` caches the hash table for pages inside a known region: entry
    ``doff[r] + page`` holds slot + 1 (0: not looked up yet). Pages are region-relative,
    so this is one small direct-indexed array (4 B per page of the regions) instead of a
    probe into a 16 B-per-entry table at half load; ids stay the hash table's (first-seen
    order), so pages a prefetcher names later map to the same slots.
    """
    last_key = -2
    last_id = -1
    nreg = len(doff)
    for i in range(i0, len(reg)):
        if g[G_NSLOTS] + MAX_PF + 2 > S.shape[0] or 2 * (g[G_NSLOTS] + MAX_PF + 2) > htab.shape[0]:
            return i
        r = reg[i]
        p = pg[i]
        key = make_key(r, p)
        if key != last_key:  # runs of the same page are common: skip the lookup
            if 0 <= r < nreg and 0 <= p < dlen[r]:
                j = doff[r] + p
                v = dmap[j]
                if v == 0:
                    v = new_slot(g, htab, S, key) + 1
                    dmap[j] = v
                last_id = v - 1
            else:
                last_id = new_slot(g, htab, S, key)
            last_key = key
        ids[i] = last_id
    return len(reg)


@njit(cache=True)
def _log(g, logs, gi, s):
    n = g[G_LOGN]
    logs[0, n] = gi
    logs[1, n] = s
    g[G_LOGN] = n + 1


@njit(cache=True, inline="always")
def _flush(g, now, last_t, acc, hits, faults, late, stall, late_ns, distinct, bytes_in, useful, observed):
    g[G_NOW] = now
    g[G_LAST_T] = last_t
    g[C_ACCESSES] += acc
    g[C_HITS] += hits
    g[C_FAULTS] += faults
    g[C_LATE] += late
    g[C_STALL] += stall
    g[C_LATE_NS] += late_ns
    g[G_DISTINCT] += distinct
    g[C_BYTES_IN] += bytes_in
    g[C_PF_USEFUL] += useful
    g[C_OBSERVED] += observed


@njit(cache=True)
def run(g, cfg, htab, S, frames, heap, t, ids, wr, reg, pg, nextuse, n_rows, i0, base,
        pstate, pparams, rpages, out_r, out_p, stamp, sched, logs):
    """Play rows ``i0..n_rows-1`` (``ids`` may extend past ``n_rows``: oracle lookahead)."""
    ev = cfg[K_EVICT]
    kind = cfg[K_PF]
    maxpf = cfg[K_MAXPF]
    fault_cost = cfg[K_FAULT_NS] + cfg[K_LINK_LAT] + cfg[K_XFER_NS]
    page_size = cfg[K_PAGE]
    logging = cfg[K_LOG] != 0
    if i0 < n_rows and g[G_STARTED] == 0:
        g[G_STARTED] = 1
        g[G_T0] = t[i0]
        g[G_LAST_T] = t[i0]
    # The per-access counters live in locals (registers) and reach g only at exits and
    # before calls that read g: stores into g could alias S, so LLVM would otherwise
    # reload and store every counter on every access.
    now = g[G_NOW]
    last_t = g[G_LAST_T]
    acc = hits = faults = late = stall = late_ns = distinct = bytes_in = useful = n_obs = 0
    # Without a prefetcher no slot is created and nothing is logged inside the loop: the
    # room check is loop-invariant, so it runs once.
    check = True
    for i in range(i0, n_rows):
        if check and (g[G_NSLOTS] + MAX_PF + 1 > S.shape[0] or 2 * (g[G_NSLOTS] + MAX_PF + 1) > htab.shape[0]
                      or (logging and g[G_LOGN] + MAX_PF > logs.shape[1])):
            g[G_POS] = i
            _flush(g, now, last_t, acc, hits, faults, late, stall, late_ns, distinct, bytes_in, useful, n_obs)
            return NEED_GROW
        check = kind != PF_NONE
        ti = t[i]
        if ti > last_t:
            now += ti - last_t
            last_t = ti
        s = ids[i]
        acc += 1
        if S[s, F_SEEN] == 0:
            S[s, F_SEEN] = 1
            distinct += 1
        if ev == EV_MIN:
            S[s, F_NXT] = nextuse[i]
        f = S[s, F_FLAG]
        observed = False
        hit = False
        if f & RES:
            arr = S[s, F_ARR]
            if arr > now:
                late += 1
                stall += arr - now
                late_ns += arr - now
                now = arr
            else:
                hits += 1
            if f & PF:
                useful += 1
                S[s, F_FLAG] = f & ~PF
                observed = True
                hit = True
            if ev == EV_LRU and S[s, F_STAMP] != g[G_STAMP]:  # not already the newest entry
                _q_push(g, S, heap, s)
            elif ev == EV_CLOCK:
                S[s, F_FLAG] |= REF
            elif ev == EV_MIN:
                _heap_push(g, heap, S, frames, S[s, F_NXT], s)
        else:
            faults += 1
            stall += fault_cost
            now += fault_cost
            bytes_in += page_size
            _insert(g, cfg, S, frames, heap, s, REF if ev == EV_CLOCK else 0)
            S[s, F_ARR] = now
            if g[G_LINK] < now:
                g[G_LINK] = now
            observed = True
        if wr[i]:
            S[s, F_FLAG] |= DIRTY
        if kind == PF_NONE:
            continue
        g[G_NOW] = now  # issue() reads the clock
        gi = base + i
        if kind == PF_SCHEDULE:
            p = g[G_SCHED]
            while p < sched.shape[1] and sched[0, p] < gi:
                p += 1
            n_done = 0
            while p < sched.shape[1] and sched[0, p] == gi:
                if n_done < maxpf:
                    key = make_key(sched[1, p], sched[2, p])
                    if key >= 0:
                        ps = new_slot(g, htab, S, key)
                        if logging:
                            _log(g, logs, gi, ps)
                        issue(g, cfg, S, frames, heap, ps)
                        n_done += 1
                p += 1
            g[G_SCHED] = p
            continue
        if not observed:
            continue
        n_obs += 1
        if kind == PF_PYTHON:
            g[G_POS] = i
            g[G_LASTHIT] = 1 if hit else 0
            _flush(g, now, last_t, acc, hits, faults, late, stall, late_ns, distinct, bytes_in, useful, n_obs)
            return PAUSE
        if kind == PF_ORACLE:
            k = min(cfg[K_ORACLE_K], maxpf)
            stamp[s] = gi + 1
            found = 0
            end = min(len(ids), i + 1 + cfg[K_LOOKAHEAD])
            j = i + 1
            while j < end and found < k:
                q = ids[j]
                if stamp[q] != gi + 1:
                    stamp[q] = gi + 1
                    found += 1
                    if logging:
                        _log(g, logs, gi, q)
                    issue(g, cfg, S, frames, heap, q)
                j += 1
            continue
        region = reg[i]
        page = pg[i]
        if kind == PF_NEXTLINE:
            n = nextline.nb_observe(pstate, pparams, rpages, ti, region, page, hit, out_r, out_p)
        elif kind == PF_STRIDE:
            n = stride.nb_observe(pstate, pparams, rpages, ti, region, page, hit, out_r, out_p)
        elif kind == PF_LEAP:
            n = leap.nb_observe(pstate, pparams, rpages, ti, region, page, hit, out_r, out_p)
        elif kind == PF_MARKOV:
            n = markov.nb_observe(pstate, pparams, rpages, ti, region, page, hit, out_r, out_p)
        else:
            n = bestoffset.nb_observe(pstate, pparams, rpages, ti, region, page, hit, out_r, out_p)
        for j in range(min(n, maxpf)):
            key = make_key(out_r[j], out_p[j])
            if key >= 0:
                ps = new_slot(g, htab, S, key)
                if logging:
                    _log(g, logs, gi, ps)
                issue(g, cfg, S, frames, heap, ps)
    g[G_POS] = n_rows
    _flush(g, now, last_t, acc, hits, faults, late, stall, late_ns, distinct, bytes_in, useful, n_obs)
    return DONE


@njit(cache=True)
def issue_pages(g, cfg, htab, S, frames, heap, regions, pages, gi, logs):
    """Issue prefetches a Python prefetcher asked for (after a PAUSE)."""
    for j in range(min(len(pages), cfg[K_MAXPF])):
        key = make_key(regions[j], pages[j])
        if key >= 0:
            ps = new_slot(g, htab, S, key)
            if cfg[K_LOG] != 0:
                _log(g, logs, gi, ps)
            issue(g, cfg, S, frames, heap, ps)


@njit(cache=True)
def next_use_backward(g, htab, S, reg, pg, base, nextuse_out):
    """One chunk of the backward pass for MIN: each row's next use (global index).

    Rows are visited last to first; ``S[F_NXT]`` holds, per page, the earliest use seen
    so far, which after the whole pass is the page's first use.
    """
    for i in range(len(reg) - 1, -1, -1):
        s = new_slot(g, htab, S, make_key(reg[i], pg[i]))
        nextuse_out[i] = S[s, F_NXT]
        S[s, F_NXT] = base + i
