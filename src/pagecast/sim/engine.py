"""The compiled core of the tiered-memory simulator (numba).

State lives in flat arrays so the loop is resumable: ``run`` returns early when its
tables need to grow (``NEED_GROW``) or when a Python prefetcher must be asked
(``PAUSE``); the driver in ``simulate.py`` does that and calls ``run`` again from where it
stopped.

Pages are dense ids. A page inside its region's declared length is
``doff[region] + page`` (no lookup at all: the regions table gives each region's length);
any other page (region of unknown length, page past the declared end, region -1) gets an
id after the dense range from the hash table in ``hashtab``. Per-page state is a struct
of arrays indexed by id; the field every access reads, ``st``, packs the page's flags and
its recency stamp into one int64 (one load per access, 8 B per page).

Model per demand event (see docs/simulator.md): the clock advances by the gap between
trace timestamps; a resident page is a hit, or a *late* prefetch if its transfer has not
ended (the program waits for the rest); a missing page is a fault that stalls for
``fault_ns + link_latency_ns + transfer``. Prefetches queue on the link (one transfer at
a time, each ``xfer_ns``) and arrive ``link_latency_ns`` after their transfer ends.
"""

from __future__ import annotations

from collections import namedtuple

from numba import njit

from pagecast.constants import MAX_PREFETCH
from pagecast.sim.cachehint import prefetch_hint
from pagecast.sim.hashtab import intern, make_key
from pagecast.sim.kernels import (  # loads the policies (each configures the jit cache itself)
    EV_SLOTS,
    FIRST_EV_KIND,
    FIRST_KIND,
    KINDS,
    SLOTS,
    ev_slot,
    slot,
)

# --- per-page state --------------------------------------------------------------
# st[id] = stamp << STAMP_SHIFT | flags. The stamp (LRU/FIFO) is the one of the page's
# newest entry in the recency queue; it survives eviction (the entry is dead anyway: the
# page is not resident). arr[id]: when a prefetched page arrives; pos[id]: its frame
# (CLOCK, MIN); nxt[id]: its next use (MIN); hkey[id - ndense]: the key of a hashed id.
RES, PF, DIRTY, REF, SEEN = 1, 2, 4, 8, 16
STAMP_SHIFT = 8
FLAG_MASK = (1 << STAMP_SHIFT) - 1
CLEAR_ON_EVICT = ~(RES | PF | DIRTY | REF)

# --- globals g[...] ---------------------------------------------------------------
(
    G_NRES,
    G_NSLOTS,
    G_HEAD,
    G_TAIL,
    G_HAND,
    G_NOW,
    G_LAST_T,
    G_T0,
    G_LINK,
    G_HEAPN,
    G_SCHED,
    G_LOGN,
    G_POS,
    G_LASTHIT,
    G_STARTED,
    C_ACCESSES,
    C_HITS,
    C_FAULTS,
    C_LATE,
    C_PF_ISSUED,
    C_PF_USEFUL,
    C_PF_USELESS,
    C_PF_REDUNDANT,
    C_PF_SKIPPED,
    C_BYTES_IN,
    C_BYTES_OUT,
    C_STALL,
    C_EVICTIONS,
    C_OBSERVED,
    C_LATE_NS,
    G_DISTINCT,
    G_STAMP,
    G_VLOGN,
) = range(33)
N_GLOBALS = 33

# --- config cfg[...] ----------------------------------------------------------------
(
    K_CAP,
    K_PAGE,
    K_FAULT_NS,
    K_LINK_LAT,
    K_XFER_NS,
    K_EVICT,
    K_PF,
    K_MAXPF,
    K_ORACLE_K,
    K_LOOKAHEAD,
    K_LOG,
    K_NDENSE,
    K_SCHED_ALL,
    K_EV_GUARD,
    K_VLOG,
) = range(15)
N_CFG = 15

# The engine's own eviction structures; every keyed eviction of the registry has a kind
# of its own (``sim.kernels``: FIRST_EV_KIND + its slot), whose key kernel the engine
# calls through the eviction slots below, as it calls prefetchers' kernels.
EV_LRU, EV_FIFO, EV_CLOCK = range(3)
STRUCTURES = {"lru": EV_LRU, "fifo": EV_FIFO, "clock": EV_CLOCK}
if FIRST_EV_KIND != 16 or EV_SLOTS != 8:
    raise RuntimeError("the eviction slot chain in engine._ev_key is written for kinds 16..23")
(EVS0, EVS1, EVS2, EVS3, EVS4, EVS5, EVS6, EVS7) = (ev_slot(i) for i in range(EV_SLOTS))

# The engine's own modes; every compiled policy has a kind of its own from the registry
# (``sim.kernels``: FIRST_KIND + its slot), called through the kernel slots below.
PF_NONE, PF_ORACLE, PF_SCHEDULE, PF_PYTHON = range(4)
NUMBA_KINDS = KINDS
if FIRST_KIND != 16 or SLOTS != 16:
    raise RuntimeError("the kernel slot chain in engine.run is written for kinds 16..31")
(
    SLOT0,
    SLOT1,
    SLOT2,
    SLOT3,
    SLOT4,
    SLOT5,
    SLOT6,
    SLOT7,
    SLOT8,
    SLOT9,
    SLOT10,
    SLOT11,
    SLOT12,
    SLOT13,
    SLOT14,
    SLOT15,
) = (slot(i) for i in range(SLOTS))

DONE, NEED_GROW, PAUSE = 0, 1, 2
NIL = -1
INF = 1 << 62
MAX_PF = MAX_PREFETCH
AHEAD = 16  # rows between a cache hint for a page's state and its use

# The arrays the loop works on, in three groups (numba passes each as one struct):
# the tier's state (grown by the driver between calls), one chunk of demand rows, and
# the policies' inputs.
Tier = namedtuple("Tier", "g cfg htab hkey doff dlen st arr pos nxt frames heap stamp logs vlog")
Rows = namedtuple("Rows", "t ids wr reg pg ahead")
Policies = namedtuple("Policies", "pstate pparams rpages out_r out_p sched eparams")


@njit(cache=True, inline="always")
def _ev_key(ev, eparams, gi, given, prev, demand):
    """The key the registry's keyed eviction of kind ``ev`` gives a page (larger leaves first)."""
    if ev == 16:
        return EVS0(eparams, gi, given, prev, demand)
    elif ev == 17:
        return EVS1(eparams, gi, given, prev, demand)
    elif ev == 18:
        return EVS2(eparams, gi, given, prev, demand)
    elif ev == 19:
        return EVS3(eparams, gi, given, prev, demand)
    elif ev == 20:
        return EVS4(eparams, gi, given, prev, demand)
    elif ev == 21:
        return EVS5(eparams, gi, given, prev, demand)
    elif ev == 22:
        return EVS6(eparams, gi, given, prev, demand)
    return EVS7(eparams, gi, given, prev, demand)


# --- page ids -------------------------------------------------------------------------
@njit(cache=True)
def hashed_id(g, cfg, htab, hkey, key):
    """Id of a page outside the dense range (``key`` from ``make_key``, >= 0)."""
    h = intern(htab, key, g[G_NSLOTS])
    if h == g[G_NSLOTS]:
        g[G_NSLOTS] = h + 1
        hkey[h] = key
    return cfg[K_NDENSE] + h


@njit(cache=True, inline="always")
def page_id(g, cfg, htab, hkey, doff, dlen, r, p):
    """Id of (region, page), or -1 if the page cannot be named (negative, too large)."""
    if 0 <= r < len(doff) and 0 <= p < dlen[r]:
        return doff[r] + p
    key = make_key(r, p)
    if key < 0:
        return -1
    return hashed_id(g, cfg, htab, hkey, key)


@njit(cache=True)
def room(g, htab, hkey, n_new):
    """Whether ``n_new`` more hashed ids fit (tables at most half full)."""
    need = g[G_NSLOTS] + n_new
    return need <= len(hkey) and 2 * need <= htab.shape[0]


@njit(cache=True)
def dense_ids(g, cfg, htab, hkey, doff, dlen, reg, pg, ids, i0):
    """Ids of rows i0...; returns where it stopped: len(reg), or earlier when the hash
    tables must grow for a page outside the dense range (grow them and call again), or
    ``-1 - i`` if row i names a page no id can hold."""
    nreg = len(doff)
    for i in range(i0, len(reg)):
        r = reg[i]
        p = pg[i]
        if 0 <= r < nreg and 0 <= p < dlen[r]:
            ids[i] = doff[r] + p
            continue
        key = make_key(r, p)
        if key < 0:
            return -1 - i  # a page no id can name (negative page or region): bad input
        if not room(g, htab, hkey, 1):
            return i
        ids[i] = hashed_id(g, cfg, htab, hkey, key)
    return len(reg)


@njit(cache=True)
def mark_seen(st, ids):
    """Set SEEN on the pages of ``ids``; return how many were new."""
    new = 0
    for i in range(len(ids)):
        s = ids[i]
        if not st[s] & SEEN:
            st[s] |= SEEN
            new += 1
    return new


# --- eviction structures -------------------------------------------------------------
# LRU and FIFO keep a recency queue instead of a doubly linked list: entries (stamp, id)
# in ``heap[0:2, G_HEAD:G_TAIL]`` in order of use; an entry is live while its page is
# resident and still carries that stamp. A hit appends one entry (a sequential write)
# instead of unlinking the page (two random cache misses on its neighbours); the victim
# is the oldest live entry, i.e. exactly the list's head. Stale entries are dropped when
# the queue is full (live entries <= resident pages <= half its length: amortised O(1)).
@njit(cache=True, inline="always")
def _q_live(st, heap, j):
    x = st[heap[1, j]]
    return (x & RES) != 0 and (x >> STAMP_SHIFT) == heap[0, j]


@njit(cache=True)
def _q_compact(g, st, heap):
    k = 0
    tail = g[G_TAIL]
    qid = heap[1]
    for j in range(g[G_HEAD], tail):
        if j + AHEAD < tail:
            prefetch_hint(st, qid[j + AHEAD])
        if _q_live(st, heap, j):
            heap[0, k] = heap[0, j]
            heap[1, k] = heap[1, j]
            k += 1
    g[G_HEAD] = 0
    g[G_TAIL] = k


@njit(cache=True, inline="always")
def _q_push(g, st, heap, s):
    if g[G_TAIL] == heap.shape[1]:
        _q_compact(g, st, heap)
    stamp = g[G_STAMP] + 1
    g[G_STAMP] = stamp
    st[s] = (stamp << STAMP_SHIFT) | (st[s] & FLAG_MASK)
    t = g[G_TAIL]
    heap[0, t] = stamp
    heap[1, t] = s
    g[G_TAIL] = t + 1


@njit(cache=True, inline="always")
def _q_oldest(st, heap, qh):
    """(id of the oldest live entry at or after ``qh``, the new head): the LRU/FIFO victim."""
    qid = heap[1]
    while True:
        if qh + AHEAD < heap.shape[1]:
            prefetch_hint(st, qid[qh + AHEAD])
        v = qid[qh]
        live = _q_live(st, heap, qh)
        qh += 1
        if live:
            return v, qh


@njit(cache=True, inline="always")
def _q_pop(g, st, heap):
    """Id of the oldest live entry (removed from the queue)."""
    v, g[G_HEAD] = _q_oldest(st, heap, g[G_HEAD])
    return v


@njit(cache=True, inline="always")
def _clock_sweep(st, frames, hand, cap):
    """(victim, its frame, the new hand): clear reference bits up to the first page without one."""
    while st[frames[hand]] & REF:
        st[frames[hand]] &= ~REF
        hand = (hand + 1) % cap
    return frames[hand], hand, (hand + 1) % cap


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
def _heap_push(g, heap, nxt, frames, key, s):
    if g[G_HEAPN] == heap.shape[1]:
        # Lazy deletion leaves stale entries; keep one live entry per resident page.
        # (No recursion through _heap_push: numba's cache cannot load recursive functions.)
        g[G_HEAPN] = 0
        for j in range(g[G_NRES]):
            r = frames[j]
            _sift_up(g, heap, nxt[r], r)
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
def _keyed_victim(g, heap, st, nxt):
    """Resident page with the largest key (top of the lazy max-heap; stale entries dropped)."""
    while True:
        s = heap[1, 0]
        if (st[s] & RES) and nxt[s] == heap[0, 0]:
            return s
        _heap_pop(g, heap)


# The helpers below take the tier's arrays one by one, unpacked from ``Tier`` once per
# ``run``: taking a field out of the struct inside the loop costs a reference-count
# update each time (measured: the general loop ran at 60 % of its speed).
@njit(cache=True, inline="always")
def _evict(g, cfg, st, pos, nxt, frames, heap, vlog):
    """Drop one page; return the frame it held (CLOCK and keyed evictions keep frames)."""
    ev = cfg[K_EVICT]
    if ev == EV_LRU or ev == EV_FIFO:
        v = _q_pop(g, st, heap)
    elif ev == EV_CLOCK:
        v, _, g[G_HAND] = _clock_sweep(st, frames, g[G_HAND], cfg[K_CAP])
    else:
        v = _keyed_victim(g, heap, st, nxt)
        _heap_pop(g, heap)
    x = st[v]
    if x & PF:
        g[C_PF_USELESS] += 1
    if x & DIRTY:
        g[C_BYTES_OUT] += cfg[K_PAGE]
    st[v] = x & CLEAR_ON_EVICT
    g[C_EVICTIONS] += 1
    if cfg[K_VLOG] != 0:
        vlog[g[G_VLOGN]] = v
        g[G_VLOGN] += 1
    if ev == EV_LRU or ev == EV_FIFO:
        return 0
    return pos[v]


@njit(cache=True, inline="always")
def _insert(g, cfg, st, pos, nxt, frames, heap, vlog, s, flags):
    """Make ``s`` resident (a keyed eviction's key is already in ``nxt[s]``)."""
    if g[G_NRES] < cfg[K_CAP]:
        p = g[G_NRES]
        g[G_NRES] += 1
    else:
        p = _evict(g, cfg, st, pos, nxt, frames, heap, vlog)
    st[s] = (st[s] & ~(RES | PF | DIRTY | REF)) | RES | flags
    ev = cfg[K_EVICT]
    if ev == EV_LRU or ev == EV_FIFO:
        _q_push(g, st, heap, s)
    else:
        frames[p] = s
        pos[s] = p
        if ev >= FIRST_EV_KIND:
            _heap_push(g, heap, nxt, frames, nxt[s], s)


@njit(cache=True)
def issue(g, cfg, st, arr, pos, nxt, frames, heap, vlog, eparams, s, gi):
    """Queue a prefetch of page ``s`` on the link (asked for at row ``gi``)."""
    if st[s] & RES:
        g[C_PF_REDUNDANT] += 1
        return
    ev = cfg[K_EVICT]
    if ev >= FIRST_EV_KIND:
        key = _ev_key(ev, eparams, gi, nxt[s], nxt[s], False)
        if cfg[K_EV_GUARD] != 0 and g[G_NRES] >= cfg[K_CAP]:
            # never keep a page that leaves later than every resident one: do no harm
            if nxt[_keyed_victim(g, heap, st, nxt)] <= key:
                g[C_PF_SKIPPED] += 1
                return
        nxt[s] = key
    start = max(g[G_NOW], g[G_LINK])
    g[G_LINK] = start + cfg[K_XFER_NS]
    arr[s] = g[G_LINK] + cfg[K_LINK_LAT]
    _insert(g, cfg, st, pos, nxt, frames, heap, vlog, s, PF)
    g[C_PF_ISSUED] += 1
    g[C_BYTES_IN] += cfg[K_PAGE]


@njit(cache=True)
def _log(g, logs, gi, s):
    n = g[G_LOGN]
    logs[0, n] = gi
    logs[1, n] = s
    g[G_LOGN] = n + 1


@njit(cache=True, inline="always")
def _start(g, t, n_rows, i0):
    """The run's clock starts at its first access (both loops)."""
    if i0 < n_rows and g[G_STARTED] == 0:
        g[G_STARTED] = 1
        g[G_T0] = t[i0]
        g[G_LAST_T] = t[i0]


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
def _issue_t(T, eparams, s, gi):
    issue(T.g, T.cfg, T.st, T.arr, T.pos, T.nxt, T.frames, T.heap, T.vlog, eparams, s, gi)


@njit(cache=True, inline="always")
def _page(T, r, p):
    return page_id(T.g, T.cfg, T.htab, T.hkey, T.doff, T.dlen, r, p)


@njit(cache=True, inline="always")
def _kernel(kind, a, b, c, o, q, ti, region, page, hit):
    """The registry's prefetch kernel of this kind (sim.kernels: slot i = kind 16 + i)."""
    if kind == 16:
        return SLOT0(a, b, c, ti, region, page, hit, o, q)
    elif kind == 17:
        return SLOT1(a, b, c, ti, region, page, hit, o, q)
    elif kind == 18:
        return SLOT2(a, b, c, ti, region, page, hit, o, q)
    elif kind == 19:
        return SLOT3(a, b, c, ti, region, page, hit, o, q)
    elif kind == 20:
        return SLOT4(a, b, c, ti, region, page, hit, o, q)
    elif kind == 21:
        return SLOT5(a, b, c, ti, region, page, hit, o, q)
    elif kind == 22:
        return SLOT6(a, b, c, ti, region, page, hit, o, q)
    elif kind == 23:
        return SLOT7(a, b, c, ti, region, page, hit, o, q)
    elif kind == 24:
        return SLOT8(a, b, c, ti, region, page, hit, o, q)
    elif kind == 25:
        return SLOT9(a, b, c, ti, region, page, hit, o, q)
    elif kind == 26:
        return SLOT10(a, b, c, ti, region, page, hit, o, q)
    elif kind == 27:
        return SLOT11(a, b, c, ti, region, page, hit, o, q)
    elif kind == 28:
        return SLOT12(a, b, c, ti, region, page, hit, o, q)
    elif kind == 29:
        return SLOT13(a, b, c, ti, region, page, hit, o, q)
    elif kind == 30:
        return SLOT14(a, b, c, ti, region, page, hit, o, q)
    return SLOT15(a, b, c, ti, region, page, hit, o, q)


@njit(cache=True, inline="always")
def _room(g, cfg, htab, hkey, logs, vlog, heap, logging, maxpf):
    """Whether one more row fits: its new ids, log entries, victims, and queue entries
    for the pages it may make resident (the queue follows the resident pages: simulate.py)."""
    return (
        room(g, htab, hkey, maxpf + 1)
        and not (logging and g[G_LOGN] + maxpf > logs.shape[1])
        and not (cfg[K_VLOG] != 0 and g[G_VLOGN] + maxpf + 1 > len(vlog))
        and 2 * min(cfg[K_CAP], g[G_NRES] + maxpf + 1) + 2 * maxpf + 16 <= heap.shape[1]
    )


@njit(cache=True)
def _oracle(T, P, ids, i, gi, s, logging):
    """The oracle prefetcher: the next distinct pages of the trace itself."""
    g, cfg, stamp = T.g, T.cfg, T.stamp
    k = min(cfg[K_ORACLE_K], cfg[K_MAXPF])
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
                _log(g, T.logs, gi, q)
            _issue_t(T, P.eparams, q, gi)
        j += 1


@njit(cache=True)
def _schedule(T, P, gi, observed, logging):
    """Issue the schedule's rows triggered by row ``gi``."""
    g, cfg, sched = T.g, T.cfg, P.sched
    maxpf = cfg[K_MAXPF]
    p = g[G_SCHED]
    while p < sched.shape[1] and sched[0, p] < gi:
        p += 1
    # Rows fire where a per-fault predictor would be asked (a miss, or the first
    # use of a prefetched page), unless the config says on every event.
    n_done = 0 if observed or cfg[K_SCHED_ALL] != 0 else maxpf
    while p < sched.shape[1] and sched[0, p] == gi:
        if n_done < maxpf:
            ps = _page(T, sched[1, p], sched[2, p])
            if ps >= 0:
                if logging:
                    _log(g, T.logs, gi, ps)
                _issue_t(T, P.eparams, ps, gi)
                n_done += 1
        p += 1
    g[G_SCHED] = p


@njit(cache=True)
def run(T, R, P, n_rows, i0, base):
    """Play rows ``i0..n_rows-1`` of chunk ``R`` (whose first row is global row ``base``;
    ``R.ids`` may extend past ``n_rows``: oracle lookahead)."""
    g, cfg, st, arr, pos, nxt, frames, heap, vlog = T.g, T.cfg, T.st, T.arr, T.pos, T.nxt, T.frames, T.heap, T.vlog
    htab, hkey, doff, dlen, logs = T.htab, T.hkey, T.doff, T.dlen, T.logs
    t, ids, wr, reg, pg, ahead = R.t, R.ids, R.wr, R.reg, R.pg, R.ahead
    pstate, pparams, rpages, out_r, out_p = P.pstate, P.pparams, P.rpages, P.out_r, P.out_p
    ev = cfg[K_EVICT]
    keyed = ev >= FIRST_EV_KIND
    eparams = P.eparams
    kind = cfg[K_PF]
    maxpf = cfg[K_MAXPF]
    fault_cost = cfg[K_FAULT_NS] + cfg[K_LINK_LAT] + cfg[K_XFER_NS]
    page_size = cfg[K_PAGE]
    logging = cfg[K_LOG] != 0
    _start(g, t, n_rows, i0)
    # The per-access counters live in locals (registers) and reach g only at exits and
    # before calls that read g: stores into g could alias st, so LLVM would otherwise
    # reload and store every counter on every access.
    now = g[G_NOW]
    last_t = g[G_LAST_T]
    acc = hits = faults = late = stall = late_ns = distinct = bytes_in = useful = n_obs = 0
    # The LRU queue's tail and stamp too: a hit appends to the queue right here, and only
    # the calls below that may touch the queue (insert, issue) see them through g.
    qt = g[G_TAIL]
    qstamp = g[G_STAMP]
    qlen = heap.shape[1]
    # Without a prefetcher (or a victim log) no id is created and nothing is logged
    # inside the loop.
    check = kind != PF_NONE or cfg[K_VLOG] != 0
    for i in range(i0, n_rows):
        if i + AHEAD < len(ids):
            prefetch_hint(st, ids[i + AHEAD])
        if check:
            if not _room(g, cfg, htab, hkey, logs, vlog, heap, logging, MAX_PF):
                g[G_POS] = i
                _flush(g, now, last_t, acc, hits, faults, late, stall, late_ns, distinct, bytes_in, useful, n_obs)
                return NEED_GROW
            qt = g[G_TAIL]
            qstamp = g[G_STAMP]
        ti = t[i]
        if ti > last_t:
            now += ti - last_t
            last_t = ti
        s = ids[i]
        gi = base + i
        acc += 1
        if keyed:
            nxt[s] = _ev_key(ev, eparams, gi, ahead[i], nxt[s], True)
        x = st[s]
        if not x & SEEN:
            x |= SEEN
            st[s] = x
            distinct += 1
        observed = False
        hit = False
        if x & RES:
            if x & PF:
                # only a prefetched page can still be in flight: a demand-loaded page
                # arrived when its fault ended, and a page's first use waits for it
                a = arr[s]
                if a > now:
                    late += 1
                    stall += a - now
                    late_ns += a - now
                    now = a
                else:
                    hits += 1
                useful += 1
                x &= ~PF
                st[s] = x
                observed = True
                hit = True
            else:
                hits += 1
            if ev == EV_LRU:
                if (x >> STAMP_SHIFT) != qstamp:  # not already the newest entry: append one (_q_push)
                    if qt == qlen:
                        g[G_TAIL] = qt
                        _q_compact(g, st, heap)
                        qt = g[G_TAIL]
                    qstamp += 1
                    st[s] = (qstamp << STAMP_SHIFT) | (x & FLAG_MASK)
                    heap[0, qt] = qstamp
                    heap[1, qt] = s
                    qt += 1
            elif ev == EV_CLOCK:
                st[s] = x | REF
            elif keyed:
                _heap_push(g, heap, nxt, frames, nxt[s], s)
        else:
            faults += 1
            stall += fault_cost
            now += fault_cost
            bytes_in += page_size
            g[G_TAIL] = qt
            g[G_STAMP] = qstamp
            _insert(g, cfg, st, pos, nxt, frames, heap, vlog, s, REF if ev == EV_CLOCK else 0)
            qt = g[G_TAIL]
            qstamp = g[G_STAMP]
            if g[G_LINK] < now:
                g[G_LINK] = now
            observed = True
        if wr[i]:
            st[s] |= DIRTY
        if kind == PF_NONE:
            if check:  # a victim log without a prefetcher: g stays current as below
                g[G_TAIL] = qt
                g[G_STAMP] = qstamp
            continue
        g[G_NOW] = now  # issue() reads the clock
        g[G_TAIL] = qt
        g[G_STAMP] = qstamp
        if kind == PF_SCHEDULE:
            _schedule(T, P, gi, observed, logging)
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
            _oracle(T, P, ids, i, gi, s, logging)
            continue
        n = _kernel(kind, pstate, pparams, rpages, out_r, out_p, ti, reg[i], pg[i], hit)
        for j in range(min(n, maxpf)):
            ps = page_id(g, cfg, htab, hkey, doff, dlen, out_r[j], out_p[j])
            if ps >= 0:
                if logging:
                    _log(g, logs, gi, ps)
                issue(g, cfg, st, arr, pos, nxt, frames, heap, vlog, eparams, ps, gi)
    g[G_POS] = n_rows
    if not check:  # with a check g is current: every row stored qt/qstamp
        g[G_TAIL] = qt
        g[G_STAMP] = qstamp
    _flush(g, now, last_t, acc, hits, faults, late, stall, late_ns, distinct, bytes_in, useful, n_obs)
    return DONE


@njit(cache=True)
def run_plain(T, R, n_rows, i0):
    """``run`` without a prefetcher, for LRU, FIFO and CLOCK: the same model and counters.

    With no prefetch nothing is ever in flight and no id is created during the loop, so
    the whole state it changes fits in locals: per access one load and one store of
    ``st[id]`` (hinted ``AHEAD`` rows early), and for LRU one queue append. ``run``
    with ``PF_NONE`` is the reference it is tested against.
    """
    g, cfg, st, frames, heap = T.g, T.cfg, T.st, T.frames, T.heap
    t, ids, wr = R.t, R.ids, R.wr
    ev = cfg[K_EVICT]
    lru = ev == EV_LRU
    clock = ev == EV_CLOCK
    cap = cfg[K_CAP]
    fault_cost = cfg[K_FAULT_NS] + cfg[K_LINK_LAT] + cfg[K_XFER_NS]
    _start(g, t, n_rows, i0)
    now = g[G_NOW]
    last_t = g[G_LAST_T]
    qh = g[G_HEAD]
    qt = g[G_TAIL]
    qstamp = g[G_STAMP]
    qlen = heap.shape[1]
    qid = heap[1]
    nres = g[G_NRES]
    hand = g[G_HAND]
    hits = faults = distinct = dirty_out = evictions = 0
    for i in range(i0, n_rows):
        if i + AHEAD < n_rows:
            prefetch_hint(st, ids[i + AHEAD])
        ti = t[i]
        if ti > last_t:
            now += ti - last_t
            last_t = ti
        s = ids[i]
        x = st[s]
        if not x & SEEN:
            x |= SEEN
            distinct += 1
        push = False
        if x & RES:
            hits += 1
            if clock:
                x |= REF
            elif lru and (x >> STAMP_SHIFT) != qstamp:  # not already the newest entry
                push = True
        else:
            faults += 1
            now += fault_cost
            if nres < cap:
                p = nres
                nres += 1
            else:
                # the victims of _evict, from the same functions
                if clock:
                    v, p, hand = _clock_sweep(st, frames, hand, cap)
                else:
                    v, qh = _q_oldest(st, heap, qh)
                xv = st[v]
                if xv & DIRTY:
                    dirty_out += 1
                st[v] = xv & CLEAR_ON_EVICT
                evictions += 1
            x = (x & CLEAR_ON_EVICT) | RES
            if clock:
                x |= REF
                frames[p] = s
            else:
                push = True
        if push:  # _q_push
            if qt == qlen:
                g[G_HEAD] = qh
                g[G_TAIL] = qt
                _q_compact(g, st, heap)
                qh = g[G_HEAD]
                qt = g[G_TAIL]
            qstamp += 1
            x = (qstamp << STAMP_SHIFT) | (x & FLAG_MASK)
            heap[0, qt] = qstamp
            qid[qt] = s
            qt += 1
        if wr[i]:
            x |= DIRTY
        st[s] = x
    n = max(n_rows - i0, 0)
    g[G_POS] = n_rows
    g[G_NOW] = now
    g[G_LAST_T] = last_t
    g[G_HEAD] = qh
    g[G_TAIL] = qt
    g[G_STAMP] = qstamp
    g[G_NRES] = nres
    g[G_HAND] = hand
    g[C_ACCESSES] += n
    g[C_HITS] += hits
    g[C_FAULTS] += faults
    g[C_STALL] += faults * fault_cost
    g[C_BYTES_IN] += faults * cfg[K_PAGE]
    g[C_BYTES_OUT] += dirty_out * cfg[K_PAGE]
    g[C_EVICTIONS] += evictions
    g[G_DISTINCT] += distinct
    return DONE


@njit(cache=True)
def issue_pages(T, eparams, regions, pages, gi):
    """Issue prefetches a Python prefetcher asked for (after a PAUSE)."""
    cfg = T.cfg
    for j in range(min(len(pages), cfg[K_MAXPF])):
        ps = _page(T, regions[j], pages[j])
        if ps >= 0:
            if cfg[K_LOG] != 0:
                _log(T.g, T.logs, gi, ps)
            _issue_t(T, eparams, ps, gi)


@njit(cache=True)
def next_use_backward(nxt, ids, base, nextuse_out):
    """One chunk of the backward pass for MIN: each row's next use (global index).

    Rows are visited last to first; ``nxt`` holds, per page, the earliest use seen so
    far, which after the whole pass is the page's first use.
    """
    for i in range(len(ids) - 1, -1, -1):
        s = ids[i]
        nextuse_out[i] = nxt[s]
        nxt[s] = base + i
