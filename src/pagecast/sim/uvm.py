"""UVM mode: the open NVIDIA driver's fault servicing, tree prefetcher and eviction.

Follows kernel-open/nvidia-uvm of NVIDIA/open-gpu-kernel-modules (read, not copied):

* Managed memory is split into VA blocks at 2 MiB virtual-address boundaries (a block
  never crosses one, nor leaves its allocation); pages are 4 KiB, big pages 64 KiB.
* GPU faults are fetched in batches of up to ``uvm_perf_fault_batch_count`` (256).
  Duplicate faults on a page already in the batch are coalesced; the batch is serviced
  as a whole and then replayed. Here a batch holds the faults that arrive within
  ``batch_window_ns`` of its first fault (simulated time), up to the batch count.
* Tree prefetcher (uvm_perf_prefetch.c): per block, leaves = pages resident on the GPU
  ∪ pages faulted in this batch, laid out so big pages align (ghost leaves before an
  unaligned first page); every big page holding a faulted page is filled ("grow fault
  granularity"); then for each faulted page, walking from its leaf to the root of the
  binary tree over the leaves, the largest subtree whose count × 100 exceeds its size ×
  ``uvm_perf_prefetch_threshold`` (51) is selected; stop early once a selection reaches
  the block's end. Prefetched = union − faulted pages. No thrashing detection.
* GPU memory is handed out in 2 MiB root chunks; a block with resident pages holds one.
  When none is free, the chunk that became resident first is evicted (FIFO: the driver
  does not move a chunk on access) and all its pages go back to the host. A keyed
  eviction of the registry (``min``, ``lfu``, ``reuse``, ``learned``) may choose instead:
  every access gives its chunk the policy's key, the resident chunk with the largest key
  leaves (pagecast's model, not the driver's).
* Pre-eviction (pagecast's model of ``cuMemPrefetchAsync`` to the CPU or
  ``cuMemAdvise(SetPreferredLocation, CPU)``): after a batch, chunks the eviction policy
  would take next are evicted until ``pre_evict_chunks`` are free, or chunks named by a
  plan are evicted at their trigger rows; their copies run on the device-to-host copy
  engine in the background, and a batch that takes such a chunk before its copy ended
  waits only for the rest.
* Costs: ``fault_batch_ns`` per batch + ``fault_ns`` per distinct faulted page + per
  contiguous copy ``copy_latency_ns`` + bytes / ``pcie_bytes_per_s``.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.policies.base import Eviction
from pagecast.sim.config import SimConfig, SimResult
from pagecast.sim.engine import INF, _ev_key, next_use_backward
from pagecast.sim.hashtab import grown, intern, lookup, new_table
from pagecast.trace.demand import ReadClock, demand_chunks, read_demand
from pagecast.trace.keys import make_key, page_keys
from pagecast.trace.reader import Trace
from pagecast.trace.schedule import Schedule, read_schedule

PAGES_PER_BLOCK = 512
BIG = 16  # 4 KiB pages per 64 KiB big page
NIL = -1

# block fields B[field, block]
B_KEY, B_LO, B_HI, B_NRES, B_CHUNK, B_PREV, B_NEXT, B_INBATCH, B_FAULTS, B_EKEY = range(10)
N_BFIELDS = 10
# globals
(
    U_NBLOCKS,
    U_USED,
    U_HEAD,
    U_TAIL,
    U_NOW,
    U_LAST_T,
    U_T0,
    U_STARTED,
    U_OPEN,
    U_BSTART,
    U_NF,
    U_NB,
    U_BATCHID,
    C_ACC,
    C_HITS,
    C_FAULTS,
    C_DUP,
    C_BATCHES,
    C_FPAGES,
    C_PF,
    C_USEFUL,
    C_USELESS,
    C_BIN,
    C_BOUT,
    C_STALL,
    C_EVICT,
    C_COPIES,
    C_DISTINCT,
    C_PRE,
    C_PRE_LATE,
    C_PRE_WAIT,
    C_CRIT,
    U_PE_FREE,
    U_PE_HEAD,
    U_PE_N,
    U_SCHED,
) = range(36)
N_U = 36
# pre-evicted chunks whose copy end time is kept; past that the oldest is taken as ended
# (copies end in the order they were queued)
PE_RING = 1024
# config
(Q_CHUNKS, Q_PAGE, Q_ENABLE, Q_THRESH, Q_MINF, Q_BATCH, Q_WINDOW, Q_BATCH_NS, Q_FAULT_NS, Q_COPY_NS, Q_PS_PER_PAGE,
 Q_LRU, Q_EVKIND, Q_PRE) = range(14)  # fmt: skip
# Chunk evictions: uvm-fifo (the default: the order chunks became resident; SimConfig's
# default "lru" and "fifo" mean it too, so configs written before stay as they were) or
# uvm-lru (a chunk moves to the tail whenever a batch migrates pages into it).
UVM_EVICTIONS = {"uvm": 0, "uvm-fifo": 0, "uvm-fifo-2mib": 0, "lru": 0, "fifo": 0, "uvm-lru": 1, "uvm-lru-2mib": 1}
N_Q = 14
# page state flags of the page-array ``tree_prefetch`` (the simulator itself keeps bit maps, below)
P_RES, P_FAULT, P_PF, P_SEEN = 1, 2, 4, 8

DONE, NEED_GROW = 0, 1


@njit(cache=True)
def tree_prefetch(lo, hi, state, threshold, out, work):
    """Pages (block-local indices) the tree prefetcher adds for this batch → out; count.

    ``state[p]`` has P_RES for resident pages and P_FAULT for pages faulted in the batch;
    valid pages are lo..hi-1. Result excludes faulted pages, includes resident ones
    (the caller drops those). ``work`` is int64 scratch of shape (3, >= 529).
    """
    base = (lo // BIG) * BIG  # leaf 0: the big-page boundary at or before lo (ghost leaves)
    first = lo - base
    nleaves = hi - base
    leaves = work[0]
    for j in range(nleaves):
        leaves[j] = 0
    for p in range(lo, hi):
        if state[p] & (P_RES | P_FAULT):
            leaves[p - base] = 1
    # grow fault granularity: fill every big page (clipped to valid pages) holding a fault
    for g0 in range(0, nleaves, BIG):
        has = False
        for leaf in range(g0, min(g0 + BIG, nleaves)):
            if leaf >= first and state[leaf + base] & P_FAULT:
                has = True
                break
        if has:
            for leaf in range(max(g0, first), min(g0 + BIG, nleaves)):
                leaves[leaf] = 1
    prefix = work[1]
    prefix[0] = 0
    for j in range(nleaves):
        prefix[j + 1] = prefix[j] + leaves[j]
    size_top = 1
    while size_top < nleaves:
        size_top *= 2
    sel = work[2]
    for j in range(nleaves):
        sel[j] = 0
    for p in range(lo, hi):
        if not state[p] & P_FAULT:
            continue
        leaf = p - base
        r0, r1 = -1, -1
        size = 1
        while size <= size_top:
            s0 = (leaf // size) * size
            s1 = min(s0 + size, nleaves)
            if (prefix[s1] - prefix[s0]) * 100 > (s1 - s0) * threshold:
                r0, r1 = s0, s1
            size *= 2
        if r0 < 0:
            continue
        r0 = max(r0, first)
        for leaf2 in range(r0, r1):
            sel[leaf2] = 1
        if r1 == nleaves:
            break  # the driver stops once a selection reaches the block's end
    n = 0
    for leaf in range(first, nleaves):
        if sel[leaf] and not state[leaf + base] & P_FAULT:
            out[n] = leaf + base
            n += 1
    return n


# Page state is kept per block as four 512-bit maps: W[b, W_RES] resident pages,
# W[b, W_FLT] pages faulted in the open batch, W[b, W_PF] prefetched pages not used yet,
# W[b, W_SEEN] pages ever demanded. Servicing a batch and evicting a chunk work on 8 words
# per map (popcounts for the tree's subtree counts, shifts for contiguous copies) instead
# of scanning and writing all 512 pages of every block several times per batch.
W_RES, W_FLT, W_PF, W_SEEN = 0, 1, 2, 3
N_MAPS = 4
WORDS = PAGES_PER_BLOCK // 64
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)
_U56 = np.uint64(56)
_U63 = np.uint64(63)


@njit(cache=True, inline="always")
def _popcount(x):
    x = x - ((x >> _ONE) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return int((x * _H01) >> _U56)


@njit(cache=True, inline="always")
def _span(w, a, e):
    """Bits [a, e) of word ``w`` of a block's map (page indices a, e in 0..512)."""
    lo = max(a - 64 * w, 0)
    hi = min(e - 64 * w, 64)
    if hi <= lo:
        return _ZERO
    m = _ALL if hi == 64 else (_ONE << np.uint64(hi)) - _ONE
    return m & ~((_ONE << np.uint64(lo)) - _ONE)


@njit(cache=True, inline="always")
def _runs(words):
    """Maximal runs of set bits across the 512-bit map (one copy each)."""
    c = 0
    carry = _ZERO
    for w in range(WORDS):
        x = words[w]
        c += _popcount(x & ~((x << _ONE) | carry))
        carry = x >> _U63
    return c


@njit(cache=True, inline="always")
def _lowbit(x):
    return _popcount((x & (~x + _ONE)) - _ONE)


@njit(cache=True, inline="always")
def _rank(words, cum, x):
    """Set bits of the map below page ``x`` (0..512); ``cum[w]`` = set bits in words < w."""
    w = x >> 6
    if w >= WORDS:
        return cum[WORDS]
    b = x & 63
    if b == 0:
        return cum[w]
    return cum[w] + _popcount(words[w] & ((_ONE << np.uint64(b)) - _ONE))


@njit(cache=True)
def tree_prefetch_bits(lo, hi, res, flt, threshold, leaves, sel, cum):
    """``tree_prefetch`` on bit maps: pages it selects (faulted ones included) → ``sel``.

    ``leaves`` and ``sel`` are WORDS-long uint64 scratch, ``cum`` WORDS + 1 int64 scratch.
    A subtree's count is a difference of two ranks (prefix popcounts), and a faulted page
    inside the subtree selected for an earlier one is skipped: its largest qualifying
    subtree is that same one (every larger one contains both and did not qualify).
    """
    base = (lo // BIG) * BIG
    first = lo - base
    nleaves = hi - base
    cum[0] = 0
    for w in range(WORDS):
        v = _span(w, lo, hi)
        f = flt[w] & v
        x = (res[w] | f) & v
        if f:
            # grow fault granularity: big pages are 16-page groups aligned in page space
            for k in range(4):
                g = np.uint64(0xFFFF) << np.uint64(16 * k)
                if f & g:
                    x |= g & v
        leaves[w] = x
        cum[w + 1] = cum[w] + _popcount(x)
        sel[w] = _ZERO
    size_top = 1
    while size_top < nleaves:
        size_top *= 2
    done_below = 0  # leaves below this lie in the last selected subtree
    for w in range(WORDS):
        f = flt[w] & _span(w, lo, hi)
        while f:
            p = 64 * w + _lowbit(f)
            f &= f - _ONE
            leaf = p - base
            if leaf < done_below:
                continue
            r0, r1 = -1, -1
            size = 1
            g0 = leaf & ~(BIG - 1)
            if threshold < 100 and g0 >= first and g0 + BIG <= nleaves:
                # the faulted page's whole big page is a leaf (grown): every subtree up
                # to it is full and qualifies, so the walk starts there
                r0, r1 = g0, g0 + BIG
                size = 2 * BIG
            while size <= size_top:
                s0 = leaf & ~(size - 1)  # sizes are powers of two: no division
                s1 = min(s0 + size, nleaves)
                if (_rank(leaves, cum, s1 + base) - _rank(leaves, cum, s0 + base)) * 100 > (s1 - s0) * threshold:
                    r0, r1 = s0, s1
                size *= 2
            if r0 < 0:
                continue
            done_below = r1
            r0 = max(r0, first)
            for w2 in range((r0 + base) >> 6, ((r1 + base - 1) >> 6) + 1):
                sel[w2] |= _span(w2, r0 + base, r1 + base)
            if r1 == nleaves:
                return  # the driver stops once a selection reaches the block's end


@njit(cache=True)
def _unlink(u, B, b):
    """Take block ``b`` out of the residency order (a doubly linked list)."""
    p, nx = B[B_PREV, b], B[B_NEXT, b]
    if p != NIL:
        B[B_NEXT, p] = nx
    else:
        u[U_HEAD] = nx
    if nx != NIL:
        B[B_PREV, nx] = p
    else:
        u[U_TAIL] = p


@njit(cache=True)
def _evict_block(u, q, B, W, b):
    # unlink from the residency FIFO, send every resident page home
    _unlink(u, B, b)
    res = W[b, W_RES]
    nres = 0
    useless = 0
    for w in range(WORDS):
        nres += _popcount(res[w])
        useless += _popcount(W[b, W_PF, w])
    copies = _runs(res)
    for w in range(WORDS):
        res[w] = _ZERO
        W[b, W_PF, w] = _ZERO
    u[C_USELESS] += useless
    u[C_BOUT] += nres * q[Q_PAGE]
    u[C_COPIES] += copies
    u[C_EVICT] += 1
    B[B_NRES, b] = 0
    B[B_CHUNK, b] = 0
    u[U_USED] -= 1
    # eviction copies are on the critical path of the batch that needed the chunk
    return copies * q[Q_COPY_NS] + (nres * q[Q_PS_PER_PAGE]) // 1000


@njit(cache=True)
def _to_tail(u, B, b):
    """Move resident block ``b`` to the tail of the eviction order."""
    _unlink(u, B, b)
    _append(u, B, b)


@njit(cache=True)
def _append(u, B, b):
    """Put block ``b`` last in the residency order."""
    B[B_PREV, b] = u[U_TAIL]
    B[B_NEXT, b] = NIL
    if u[U_TAIL] != NIL:
        B[B_NEXT, u[U_TAIL]] = b
    else:
        u[U_HEAD] = b
    u[U_TAIL] = b


@njit(cache=True)
def _victim(u, q, B, batch):
    """The chunk to evict, passing over chunks of ``batch`` (NIL if only those are left):
    the first in residency order, or for a keyed eviction the largest key (ties: the
    first in that order). A keyed eviction scans the resident chunks: a few thousand at
    most (GPU memory / 2 MiB), once per eviction."""
    if q[Q_EVKIND] == 0:
        v = u[U_HEAD]
        while v != NIL and B[B_INBATCH, v] == batch:
            v = B[B_NEXT, v]
        return v
    best = NIL
    v = u[U_HEAD]
    while v != NIL:
        if B[B_INBATCH, v] != batch and (best == NIL or B[B_EKEY, v] > B[B_EKEY, best]):
            best = v
        v = B[B_NEXT, v]
    return best


@njit(cache=True)
def _pre_evict(u, q, B, W, v):
    """Evict chunk ``v`` ahead of need: its copy queues on the device-to-host engine, off
    the critical path; the ring after the globals keeps when each such chunk is free."""
    c = _evict_block(u, q, B, W, v)
    if u[U_PE_N] == PE_RING:
        u[U_PE_HEAD] = (u[U_PE_HEAD] + 1) % PE_RING
        u[U_PE_N] -= 1
    u[U_PE_FREE] = max(u[U_NOW], u[U_PE_FREE]) + c
    u[N_U + (u[U_PE_HEAD] + u[U_PE_N]) % PE_RING] = u[U_PE_FREE]
    u[U_PE_N] += 1
    u[C_PRE] += 1


@njit(cache=True)
def _take_free(u, q, start):
    """A batch starting at ``start`` takes a free chunk: the wait (ns) if every free chunk is
    one whose pre-eviction copy may not have ended."""
    if u[U_PE_N] == 0 or q[Q_CHUNKS] - u[U_USED] > u[U_PE_N]:
        return 0
    done = u[N_U + u[U_PE_HEAD]]
    u[U_PE_HEAD] = (u[U_PE_HEAD] + 1) % PE_RING
    u[U_PE_N] -= 1
    wait = max(0, done - start)
    if wait > 0:
        u[C_PRE_LATE] += 1
        u[C_PRE_WAIT] += wait
    return wait


@njit(cache=True)
def _service(u, q, B, W, fb, leaves, sel, cum):
    """Service the open batch: chunks, tree prefetch, migrations; returns its cost (ns)."""
    cost = q[Q_BATCH_NS] + q[Q_FAULT_NS] * u[U_NF]
    batch = u[U_BATCHID]
    for k in range(u[U_NB]):
        b = fb[k]
        if B[B_CHUNK, b] == 0:
            if u[U_USED] >= q[Q_CHUNKS]:
                v = _victim(u, q, B, batch)
                if v == NIL:
                    v = u[U_HEAD]
                cost += _evict_block(u, q, B, W, v)
                u[C_CRIT] += 1
            else:
                cost += _take_free(u, q, u[U_NOW] + cost)
            B[B_CHUNK, b] = 1
            u[U_USED] += 1
            _append(u, B, b)
        elif q[Q_LRU] != 0 and u[U_TAIL] != b:
            _to_tail(u, B, b)
        lo, hi = B[B_LO, b], B[B_HI, b]
        res, flt, pf = W[b, W_RES], W[b, W_FLT], W[b, W_PF]
        # Faulted, selected and prefetched pages all lie in [lo, hi) (the block's range
        # only grows, and a fault outside it widened it first): no range masks below.
        nf = 0
        for w in range(WORDS):
            nf += _popcount(flt[w])
        B[B_FAULTS, b] += nf
        if q[Q_ENABLE] and B[B_FAULTS, b] >= q[Q_MINF]:
            tree_prefetch_bits(lo, hi, res, flt, q[Q_THRESH], leaves, sel, cum)
            npf = 0
            for w in range(WORDS):
                new = sel[w] & ~flt[w] & ~res[w]
                npf += _popcount(new)
                pf[w] |= new
            u[C_PF] += npf
        # migrate faulted + prefetched pages that are not resident, in contiguous copies
        moved = 0
        for w in range(WORDS):
            m = (flt[w] | pf[w]) & ~res[w]
            leaves[w] = m
            moved += _popcount(m)
        copies = _runs(leaves)
        u[C_COPIES] += copies
        cost += copies * q[Q_COPY_NS]
        for w in range(WORDS):
            res[w] |= leaves[w]
            flt[w] = _ZERO
        B[B_NRES, b] += moved
        u[C_BIN] += moved * q[Q_PAGE]
        cost += (moved * q[Q_PS_PER_PAGE]) // 1000
    u[C_BATCHES] += 1
    u[U_OPEN] = 0
    u[U_NF] = 0
    u[U_NB] = 0
    return cost


@njit(cache=True)
def _close(u, q, B, W, fb, leaves, sel, cum):
    c = _service(u, q, B, W, fb, leaves, sel, cum)
    u[U_NOW] += c
    u[C_STALL] += c


@njit(cache=True)
def _keep_free(u, q, B, W):
    """After a batch: pre-evict in the eviction's order until ``Q_PRE`` chunks are free."""
    while q[Q_CHUNKS] - u[U_USED] < q[Q_PRE]:
        v = _victim(u, q, B, u[U_BATCHID])  # not the chunks this batch just needed
        if v == NIL:
            break
        _pre_evict(u, q, B, W, v)


@njit(cache=True)
def _planned(u, q, htab, B, W, pe_t, pe_key, gi):
    """Pre-evict the chunks a plan names for rows up to ``gi`` (those resident and not
    needed by the open batch)."""
    while u[U_SCHED] < len(pe_t) and pe_t[u[U_SCHED]] <= gi:
        v = lookup(htab, pe_key[u[U_SCHED]])
        u[U_SCHED] += 1
        if v >= 0 and B[B_CHUNK, v] != 0 and not (u[U_OPEN] and B[B_INBATCH, v] == u[U_BATCHID]):
            _pre_evict(u, q, B, W, v)


@njit(cache=True)
def _new_block(B, W, b, key, start, off, rlen, j):
    """Block ``b`` (VA block ``key``, first page ``start``) made new: its pages within the
    allocation at ``off`` of ``rlen`` pages (unknown: <= 0), nothing resident or seen."""
    B[B_KEY, b] = key
    B[B_LO, b] = max(0, off - start)
    B[B_HI, b] = PAGES_PER_BLOCK if rlen <= 0 else max(1, min(PAGES_PER_BLOCK, off + rlen - start))
    if j >= B[B_HI, b]:
        B[B_HI, b] = j + 1  # a page past the allocation's recorded end still counts
    B[B_NRES, b] = 0
    B[B_CHUNK, b] = 0
    B[B_INBATCH, b] = -1
    B[B_FAULTS, b] = 0
    B[B_EKEY, b] = 0
    for k in range(N_MAPS):
        for w in range(WORDS):
            W[b, k, w] = _ZERO


@njit(cache=True)
def run_uvm(u, q, htab, B, W, fb, leaves, sel, cum, t, reg, pg, roff, rlen, i0, finish, ev, base, pe):
    """Play rows ``i0..`` of one chunk (global row index ``base + i``); returns the row to
    resume at. ``ev`` is (eviction parameters, the chunk's ``given`` per row) of a keyed
    eviction, ``pe`` a pre-eviction plan (trigger rows, chunk keys); None when unused,
    so numba compiles the driver's own path without their branches."""
    n = len(t)
    last_key = -2
    last_b = -1
    for i in range(i0, n):
        if 2 * (u[U_NBLOCKS] + 2) > htab.shape[0] or u[U_NBLOCKS] + 2 > B.shape[1]:
            return i
        ti = t[i]
        if u[U_STARTED] == 0:
            u[U_STARTED] = 1
            u[U_T0] = ti
            u[U_LAST_T] = ti
        if ti > u[U_LAST_T]:
            u[U_NOW] += ti - u[U_LAST_T]
            u[U_LAST_T] = ti
        if u[U_OPEN] and u[U_NOW] - u[U_BSTART] > q[Q_WINDOW]:
            _close(u, q, B, W, fb, leaves, sel, cum)
            _keep_free(u, q, B, W)
        if pe is not None:
            _planned(u, q, htab, B, W, pe[0], pe[1], base + i)
        r = reg[i]
        ri = r if 0 <= r < len(roff) else len(roff) - 1
        off = roff[ri]
        vpage = off + pg[i]
        blk = vpage >> 9
        j = vpage & (PAGES_PER_BLOCK - 1)
        key = make_key(r, blk)
        if key == last_key:  # consecutive faults mostly stay in one 2 MiB block
            b = last_b
        else:
            b = intern(htab, key, u[U_NBLOCKS])
            last_key = key
            last_b = b
        if b == u[U_NBLOCKS]:
            u[U_NBLOCKS] += 1
            _new_block(B, W, b, key, blk * PAGES_PER_BLOCK, off, rlen[ri], j)
        if j < B[B_LO, b]:
            B[B_LO, b] = j
        if j >= B[B_HI, b]:
            B[B_HI, b] = j + 1
        u[C_ACC] += 1
        if ev is not None:
            B[B_EKEY, b] = _ev_key(q[Q_EVKIND], ev[0], base + i, ev[1][i], B[B_EKEY, b], True)
        w = j >> 6
        m = _ONE << np.uint64(j & 63)
        if not W[b, W_SEEN, w] & m:
            W[b, W_SEEN, w] |= m
            u[C_DISTINCT] += 1
        if W[b, W_RES, w] & m:
            u[C_HITS] += 1
            if W[b, W_PF, w] & m:
                u[C_USEFUL] += 1
                W[b, W_PF, w] &= ~m
            continue
        u[C_FAULTS] += 1
        if W[b, W_FLT, w] & m:
            u[C_DUP] += 1
            continue
        if u[U_OPEN] and u[U_NF] >= q[Q_BATCH]:
            _close(u, q, B, W, fb, leaves, sel, cum)
            _keep_free(u, q, B, W)
        if not u[U_OPEN]:
            u[U_OPEN] = 1
            u[U_BSTART] = u[U_NOW]
            u[U_BATCHID] += 1
        W[b, W_FLT, w] |= m
        u[U_NF] += 1
        u[C_FPAGES] += 1
        if B[B_INBATCH, b] != u[U_BATCHID]:
            B[B_INBATCH, b] = u[U_BATCHID]
            fb[u[U_NB]] = b
            u[U_NB] += 1
    if finish and u[U_OPEN]:
        _close(u, q, B, W, fb, leaves, sel, cum)
    return n


def _q(config: SimConfig, trace: Trace) -> np.ndarray:
    p = config.uvm_params
    if p.va_block_size != 2 << 20 or p.big_page_size != 64 << 10:
        raise PagecastError("UVM mode models 2 MiB VA blocks and 64 KiB big pages only")
    if not 1 <= p.uvm_perf_prefetch_threshold <= 100:
        raise PagecastError("uvm_perf_prefetch_threshold must be 1..100 (as in the driver)")
    if not 1 <= p.uvm_perf_prefetch_min_faults <= 20:
        raise PagecastError("uvm_perf_prefetch_min_faults must be 1..20 (as in the driver)")
    if not 1 <= p.uvm_perf_fault_batch_count <= 256:
        raise PagecastError("uvm_perf_fault_batch_count must be 1..256")
    cap_bytes = config.capacity_pages(PAGE_SIZE) * PAGE_SIZE
    if cap_bytes <= 0:
        raise PagecastError("UVM capacity must be positive")
    # The driver allocates and evicts GPU memory in whole 2 MiB root chunks; a smaller
    # capacity (e.g. the default 50 % of a small trace's pages) is one chunk. The result's
    # capacity_pages shows the chunks actually simulated.
    chunks = max(cap_bytes // p.va_block_size, 1)
    q = np.zeros(N_Q, np.int64)
    q[Q_CHUNKS] = chunks
    q[Q_PAGE] = PAGE_SIZE
    q[Q_ENABLE] = 1 if p.uvm_perf_prefetch_enable else 0
    q[Q_THRESH] = p.uvm_perf_prefetch_threshold
    q[Q_MINF] = p.uvm_perf_prefetch_min_faults
    q[Q_BATCH] = p.uvm_perf_fault_batch_count
    q[Q_WINDOW] = p.batch_window_ns
    q[Q_BATCH_NS] = p.fault_batch_ns
    q[Q_FAULT_NS] = p.fault_ns
    q[Q_COPY_NS] = p.copy_latency_ns
    q[Q_PS_PER_PAGE] = round(PAGE_SIZE * 1e12 / p.pcie_bytes_per_s)  # picoseconds per page
    ev = config.eviction if isinstance(config.eviction, str) else getattr(config.eviction, "name", "")
    if ev.lower() in UVM_EVICTIONS:
        q[Q_LRU] = UVM_EVICTIONS[ev.lower()]
    if not 0 <= p.pre_evict_chunks <= min(PE_RING, chunks - 1) and p.pre_evict_chunks:
        raise PagecastError(
            f"pre_evict_chunks must be 0..{min(PE_RING, chunks - 1)} (fewer than the {chunks} chunks of the capacity)"
        )
    q[Q_PRE] = p.pre_evict_chunks
    return q


def chunk_eviction(config: SimConfig) -> Eviction | None:
    """The registry's keyed eviction that chooses among chunks, or None for the driver's
    own order (uvm-fifo, uvm-lru; ``lru`` and ``fifo`` mean uvm-fifo)."""
    from pagecast.sim.simulate import eviction_kind, resolve_eviction

    spec = config.eviction
    name = spec if isinstance(spec, str) else getattr(spec, "name", "")
    if name.lower() in UVM_EVICTIONS:
        return None
    ev = resolve_eviction(spec)
    if ev.structure != "keyed":
        raise PagecastError(
            f"UVM mode evicts 2 MiB chunks: {ev.name!r} works on page frames ({ev.structure}), which the chunk "
            "allocator does not have; use uvm-fifo (the default), uvm-lru or a keyed eviction (min, lfu, reuse, learned)"
        )
    eviction_kind(ev)  # one clear line if it has no compiled kernel
    return ev


def chunk_ids(trace: Trace, d: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
    """Per demand row: the key of its 2 MiB VA block (as the simulator's table keys it) and
    a dense id of it."""
    roff, _ = _region_layout(trace)
    r = d["region"].astype(np.int64)
    ri = np.where((r >= 0) & (r < len(roff)), r, len(roff) - 1)
    blk = (roff[ri] + d["page"].astype(np.int64)) >> 9
    keys = page_keys(r, blk)
    uniq, ids = np.unique(keys, return_inverse=True)
    return keys, ids.astype(np.int64), len(uniq)


def _given(ev: Eviction, trace: Trace, cap_pages: int) -> np.ndarray:
    """Each row's ``given`` for the chunk-level keys: MIN gets its chunk's next use (rows,
    INF: never), any other keyed eviction its page-level values (``ahead``) at the
    capacity in pages, so a chunk carries the key of the access that touched it last."""
    if ev.uses_next_use:
        d = read_demand(trace)
        _, ids, n_ids = chunk_ids(trace, d)
        out = np.empty(len(ids), np.int64)
        next_use_backward(np.full(n_ids, INF, np.int64), ids, 0, out)
        return out
    from pagecast.sim.simulate import ahead_values

    return ahead_values(ev, trace, cap_pages)


def _plan_label(plan: Schedule | str | None) -> str | None:
    return None if plan is None else (f"schedule of {len(plan)} rows" if isinstance(plan, Schedule) else str(plan))


def _plan(trace: Trace, plan: Schedule | str | None) -> tuple[np.ndarray, np.ndarray]:
    """A pre-eviction plan (a Schedule or its file: each row's page's chunk leaves at the
    row's trigger) → (trigger rows, chunk keys), by trigger."""
    if plan is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if not isinstance(plan, Schedule):
        plan = read_schedule(plan)
    s = plan.sorted()
    keys, _, _ = chunk_ids(trace, {"region": s.region, "page": s.page})
    return np.ascontiguousarray(s.trigger, np.int64), np.ascontiguousarray(keys, np.int64)


def _region_layout(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    roff = [((r.base >> 12) & (PAGES_PER_BLOCK - 1)) for r in trace.regions] + [0]
    rlen = [-(-r.length // PAGE_SIZE) if r.length else 0 for r in trace.regions] + [0]
    return np.array(roff, np.int64), np.array(rlen, np.int64)


def simulate_uvm(trace: Trace, config: SimConfig, prefetcher=None) -> SimResult:
    """Play the trace through the UVM driver model (see module docstring)."""
    name = prefetcher if isinstance(prefetcher, str) or prefetcher is None else getattr(prefetcher, "name", "")
    if isinstance(prefetcher, Schedule) or name not in (None, "none", "tree", "uvm"):
        raise PagecastError("UVM mode simulates the driver's own tree prefetcher: use --policy tree (default) or none")
    if name == "none":
        config.uvm_params.uvm_perf_prefetch_enable = False
    t_start = time.perf_counter()
    q = _q(config, trace)
    ev = chunk_eviction(config)
    empty = np.zeros(0, np.int64)
    given, eparams = empty, np.zeros(1, np.int64)
    if ev is not None:
        from pagecast.sim.simulate import eviction_kind

        q[Q_EVKIND] = eviction_kind(ev)
        given, eparams = _given(ev, trace, int(q[Q_CHUNKS]) * PAGES_PER_BLOCK), ev.params()
    pe_t, pe_key = _plan(trace, config.uvm_params.pre_evict_plan)
    pe = (pe_t, pe_key) if len(pe_t) else None
    roff, rlen = _region_layout(trace)
    u = np.zeros(N_U + PE_RING, np.int64)
    u[U_HEAD] = u[U_TAIL] = NIL
    htab = new_table(1024)
    B = np.zeros((N_BFIELDS, 1024), np.int64)
    fb = np.zeros(q[Q_BATCH] + 1, np.int64)
    W = np.zeros((1024, N_MAPS, WORDS), np.uint64)
    leaves = np.zeros(WORDS, np.uint64)
    sel = np.zeros(WORDS, np.uint64)
    cum = np.zeros(WORDS + 1, np.int64)
    read_clock = ReadClock()
    it = read_clock.wrap(demand_chunks(trace, config.chunk_rows))
    cur = next(it, None)
    base = 0
    while cur is not None:
        nxt = next(it, None)
        i = 0
        n = len(cur["t"])
        evs = (eparams, given[base : base + n]) if ev is not None else None
        while i < n:
            i = run_uvm(
                u,
                q,
                htab,
                B,
                W,
                fb,
                leaves,
                sel,
                cum,
                cur["t"],
                cur["region"],
                cur["page"],
                roff,
                rlen,
                i,
                nxt is None,
                evs,
                base,
                pe,
            )
            if i < n:
                htab, B, W = _grown_blocks(htab, B, W, int(u[U_NBLOCKS]) + 2)
        base += n
        cur = nxt
    res = _uvm_result(trace, config, q, u, W, ev, read_clock)
    res.wall_s = time.perf_counter() - t_start
    return res


def _grown_blocks(htab: np.ndarray, B: np.ndarray, W: np.ndarray, need: int) -> tuple:
    """The block table and the per-block arrays with room for ``need`` VA blocks."""
    htab = grown(htab, need)
    if need > B.shape[1]:
        size = 2 * B.shape[1]
        B2 = np.zeros((N_BFIELDS, size), np.int64)
        B2[:, : B.shape[1]] = B
        W2 = np.zeros((size, N_MAPS, WORDS), np.uint64)
        W2[: W.shape[0]] = W
        B, W = B2, W2
    return htab, B, W


def _uvm_result(
    trace: Trace, config: SimConfig, q: np.ndarray, u: np.ndarray, W: np.ndarray, ev, read_clock
) -> SimResult:
    """The counters of a finished run as a SimResult (its ``extra``: the UVM-only ones)."""
    compute = int(u[U_LAST_T] - u[U_T0]) if u[U_STARTED] else 0
    res = SimResult(
        trace=str(trace.path),
        prefetcher="tree" if q[Q_ENABLE] else "none",
        eviction=f"{ev.name}-2MiB" if ev is not None else ("uvm-lru-2MiB" if q[Q_LRU] else "uvm-fifo-2MiB"),
        capacity_pages=int(q[Q_CHUNKS]) * PAGES_PER_BLOCK,
        page_size=PAGE_SIZE,
        accesses=int(u[C_ACC]),
        hits=int(u[C_HITS]),
        faults=int(u[C_FAULTS]),
        prefetches=int(u[C_PF]),
        useful=int(u[C_USEFUL]),
        useless=int(u[C_USELESS]),
        evictions=int(u[C_EVICT]),
        bytes_in=int(u[C_BIN]),
        bytes_out=int(u[C_BOUT]),
        stall_ns=int(u[C_STALL]),
        compute_ns=compute,
        est_time_ns=compute + int(u[C_STALL]),
        distinct_pages=int(u[C_DISTINCT]),
        fault_batches=int(u[C_BATCHES]),
    )
    nb = int(u[U_NBLOCKS])
    res.unused_at_end = int(np.unpackbits((W[:nb, W_RES] & W[:nb, W_PF]).view(np.uint8)).sum())
    res.extra.update(
        duplicate_faults=int(u[C_DUP]),
        faulted_pages=int(u[C_FPAGES]),
        copies=int(u[C_COPIES]),
        chunks=int(q[Q_CHUNKS]),
        va_blocks=nb,
        # evictions = critical_path_evictions (inside a batch that needed the chunk) +
        # pre_evictions (copies in the background; pre_evictions_late of them had not
        # ended when a batch took their chunk, which waited pre_eviction_wait_ns in all;
        # the others are evictions_off_critical_path)
        pre_evictions=int(u[C_PRE]),
        evictions_off_critical_path=int(u[C_PRE] - u[C_PRE_LATE]),
        critical_path_evictions=int(u[C_CRIT]),
        pre_evictions_late=int(u[C_PRE_LATE]),
        pre_eviction_wait_ns=int(u[C_PRE_WAIT]),
        uvm_params=config.uvm_params.__dict__ | {"pre_evict_plan": _plan_label(config.uvm_params.pre_evict_plan)},
        read_cpu_s=read_clock.cpu_s,
    )
    return res
