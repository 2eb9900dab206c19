"""The one-layer LSTM as compiled numba code: the ``numba`` backend, per fault and batched.

A profile of the earlier per-fault path (BENCHMARKS.md, "Figures moved out of the code")
split each ``observe`` into the kernel (row-dot loops that did not vectorise, the input
projection recomputed per step), dispatching 19 arguments and copies, and Python
encode/decode around it, the kernel the largest part. Hence, here:

* the input projection is folded into per-token tables (``P_tok = E_tok·W_ihᵀ`` etc.), so
  a step's input part is two row lookups instead of 8 k multiply-adds;
* weights are stored transposed so every inner loop is a contiguous ``y += w_row · s``
  over the output (vectorises under fastmath), for the recurrent matrix and the head;
* encode (pair class by binary search), both staggered cell updates, the head, top-k by
  a threshold-guarded insertion buffer and decode to pages run in ONE compiled call whose
  arguments are four flat arrays plus (region, page): offsets live in the arrays' headers;
* the batched schedule runs the very same step in a compiled loop over the stream, so the
  live predictor and the schedule agree by construction (not only up to rounding).

Later, for the smaller default model (256 classes, hidden 48), where the head's GEMV is no
longer the cost: both staggered states share one pass over W_hh, and top-k drops classes
that cannot rank with two branch-free floor passes before the insertion (``select_topk``).

Same maths as ``models.LSTMStep`` (tested against it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numba
import numpy as np
import torch

from pagecast.learn.dataset import _DELTA_BITS, _DELTA_OFFSET, GENERIC_SLOT
from pagecast.learn.models import DeltaLSTM

# Header of the int64 model array ``mi``: dimensions and offsets (numba folds these constants).
_H, _NCLS, _NSLOTS, _K, _SOFTMAX, _CHUNK, _NIP = 0, 1, 2, 3, 4, 5, 6
_O_PTOK, _O_PSLOT, _O_PIP, _O_WHH, _O_WOUT, _O_BOUT = 7, 8, 9, 10, 11, 12  # into wf
_O_KEYS, _O_CSLOT, _O_CDELTA, _NKEYS = 13, 14, 15, 16  # into mi
_MI_HEADER = 17
# Header of the int64 run array ``ri`` (one per reset: the trace's regions and the stream state).
_R_I, _R_TOPK, _R_NLUT, _R_LUT, _R_S2R, _R_RPAGES, _R_LAST, _R_SEEN, _R_OUT = range(9)
_RI_HEADER = 9


@numba.njit(cache=True, fastmath=True, inline="always")
def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


@numba.njit(cache=True, fastmath=True)
def _exp_neg(z, out, bits):
    """out = exp(z) element-wise, vectorisable (float32, relative error ~2e-7).

    Without SVML numba calls libm once per element, which was 2/3 of a step; here 2^round
    comes from the exponent bits and e^(remainder) from a degree-6 Taylor polynomial
    (|remainder·ln2| ≤ 0.35, so the truncation error is below float32 rounding).
    """
    two = bits.view(np.float32)
    for r in range(z.shape[0]):
        t = min(max(z[r], np.float32(-87.0)), np.float32(88.0)) * np.float32(1.4426950408889634)
        n = np.floor(t + np.float32(0.5))
        u = (t - n) * np.float32(0.6931471805599453)
        p = np.float32(1.0) + u * (
            np.float32(1.0)
            + u
            * (
                np.float32(0.5)
                + u
                * (
                    np.float32(1.0 / 6)
                    + u * (np.float32(1.0 / 24) + u * (np.float32(1.0 / 120) + u * np.float32(1.0 / 720)))
                )
            )
        )
        bits[r] = (np.int32(n) + np.int32(127)) << 23
        out[r] = p * two[r]


@numba.njit(cache=True, inline="always")
def _mat(wf, off, rows, cols):
    # Views, not index arithmetic on the flat array: a computed flat index defeats numba's
    # proof that it is non-negative, and the wrap-around check then blocks vectorisation.
    return wf[off : off + rows * cols].reshape(rows, cols)


G_SCRATCH = 20  # float32 scratch of the cell, in units of H: gates of both states (8H), z, exp, bits (12H)


@numba.njit(cache=True, fastmath=True)
def _cell(wf, mi, tok, slot, ip, h, c, g):
    """Advance both staggered states h[s], c[s] (s = 0, 1) by one event (same input).

    ``g`` is float32 scratch of ``G_SCRATCH``·H. Both states' recurrent products run in one
    pass over W_hh: every weight row is loaded once for two multiply-adds (the matrix is
    64 KB at H = 64, beyond L1, so the second pass used to stream it from L2 again).
    """
    hid = mi[_H]
    g4 = 4 * hid
    ptok = _mat(wf, mi[_O_PTOK] + tok * g4, 1, g4)[0]
    pslot = _mat(wf, mi[_O_PSLOT] + slot * g4, 1, g4)[0]
    whh = _mat(wf, mi[_O_WHH], hid, g4)
    g0 = g[:g4]
    g1 = g[g4 : 2 * g4]
    for r in range(g4):
        g0[r] = ptok[r] + pslot[r]
    if mi[_NIP] > 0:
        pip = _mat(wf, mi[_O_PIP] + ip * g4, 1, g4)[0]
        for r in range(g4):
            g0[r] += pip[r]
    for r in range(g4):
        g1[r] = g0[r]
    for j in range(hid):
        h0 = h[0, j]
        h1 = h[1, j]
        w = whh[j]
        for r in range(g4):
            g0[r] += w[r] * h0
            g1[r] += w[r] * h1
    z = g[2 * g4 : 3 * g4]
    e = g[3 * g4 : 4 * g4]
    bits = g[4 * g4 : 5 * g4].view(np.int32)
    for s in range(2):
        gs = g[s * g4 : (s + 1) * g4]
        # gates i, f, o: σ(x) = 1/(1+e^−x); cell input: tanh(x) = 2σ(2x) − 1
        for r in range(g4):
            z[r] = -gs[r]
        for r in range(2 * hid, 3 * hid):
            z[r] = np.float32(-2.0) * gs[r]
        _exp_neg(z, e, bits)
        for r in range(g4):
            e[r] = np.float32(1.0) / (np.float32(1.0) + e[r])
        for j in range(hid):
            c[s, j] = e[hid + j] * c[s, j] + e[j] * (np.float32(2.0) * e[2 * hid + j] - np.float32(1.0))
            z[j] = np.float32(-2.0) * c[s, j]
        _exp_neg(z[:hid], e[:hid], bits[:hid])
        for j in range(hid):
            h[s, j] = e[3 * hid + j] * (np.float32(2.0) / (np.float32(1.0) + e[j]) - np.float32(1.0))


@numba.njit(cache=True, fastmath=True, inline="always")
def _floor_compact(val, cls, m, k):
    """Keep, in place and in order, the candidates that can still be among the top k; new count.

    The floor is a lower bound on the k-th largest value: split the m candidates into k
    groups; each group's maximum is a distinct candidate, so at least k reach the smallest
    of those maxima. The pass is branch-free (max/min, compaction by a counter).
    """
    if m < 2 * k:
        return m
    floor = val[0]  # no ±inf literals: fastmath lets the compiler assume they never occur
    for q in range(k):
        a = q * m // k
        b = (q + 1) * m // k
        g = val[a]
        for r in range(a + 1, b):
            g = max(g, val[r])
        floor = g if q == 0 else min(floor, g)
    n = 0
    for r in range(m):
        v = val[r]
        val[n] = v
        cls[n] = cls[r]
        n += v >= floor
    return n


@numba.njit(cache=True, fastmath=True)
def select_topk(lg, scratch, k, out_s, out_c):
    """The k largest of ``lg[1:]`` (class 0, "other", is never ranked) into out_s/out_c,
    descending, ties to the lower class (a stable descending sort); returns the count.

    ``scratch``: float32 of ``2 · len(lg)``. A plain insertion costs a mispredicted branch
    and shifts per class it looks at, which was most of a step at 256 classes; two
    branch-free floor passes first leave it a few dozen candidates.
    """
    n_cls = lg.shape[0]
    val = scratch[:n_cls]
    cls = scratch[n_cls : 2 * n_cls].view(np.int32)
    for r in range(1, n_cls):
        val[r - 1] = lg[r]
        cls[r - 1] = r
    n = _floor_compact(val, cls, n_cls - 1, k)
    n = _floor_compact(val, cls, n, k)
    m = 0
    for r in range(n):
        v = val[r]
        if m < k:
            q = m
            m += 1
        elif v > out_s[k - 1]:
            q = k - 1
        else:
            continue
        while q > 0 and out_s[q - 1] < v:
            out_s[q] = out_s[q - 1]
            out_c[q] = out_c[q - 1]
            q -= 1
        out_s[q] = v
        out_c[q] = cls[r]
    return m


@numba.njit(cache=True, fastmath=True)
def _head_topk(wf, mi, hs, logits, k, out_s, out_c):
    """Top-k classes (never class 0, "other") of the head on feature ``hs``; returns the count.

    ``logits``: float32 scratch of ``3 · n_classes`` (logits, candidate values, candidate classes).
    Ranking is by score, ties to the lower class (what a stable descending sort gives).
    """
    n_cls = mi[_NCLS]
    wout = _mat(wf, mi[_O_WOUT], hs.shape[0], n_cls)
    bout = _mat(wf, mi[_O_BOUT], 1, n_cls)[0]
    lg = logits[:n_cls]
    for r in range(n_cls):
        lg[r] = bout[r]
    for j in range(hs.shape[0]):
        hj = hs[j]
        for r in range(n_cls):
            lg[r] += wout[j, r] * hj
    m = select_topk(lg, logits[n_cls:], k, out_s, out_c)
    if mi[_SOFTMAX]:
        mx = out_s[0]
        tot = 0.0
        for r in range(1, n_cls):
            tot += np.exp(lg[r] - mx)
        for q in range(m):
            out_s[q] = np.exp(out_s[q] - mx) / tot
    else:
        for q in range(m):
            out_s[q] = _sig(out_s[q])
    return m


@numba.njit(cache=True, fastmath=True)
def _advance(wf, mi, i, tok, slot, ip, h, c, g, logits, k, out_s, out_c, rank=True):
    """Event i of a stream under the context rule: reset, step both states, rank; count of classes."""
    ch = mi[_CHUNK]
    hid = mi[_H]
    ph = i % (2 * ch)
    if ph == 0 or ph == ch:  # state 0 restarts at multiples of 2C, state 1 at odd multiples of C
        s = 0 if ph == 0 else 1
        for j in range(hid):
            h[s, j] = 0.0
            c[s, j] = 0.0
    _cell(wf, mi, tok, slot, ip, h, c, g)
    if not rank:
        return 0
    b = i // ch
    sel = 0 if b == 0 or (b - 1) % 2 == 0 else 1
    return _head_topk(wf, mi, h[sel], logits, k, out_s, out_c)


@numba.njit(cache=True, fastmath=True)
def observe_kernel(wf, mi, ri, st, region, page):
    """One fault: encode, step, rank, decode. Pages go to ``ri[out:]`` as (region, page) pairs,
    their ranks (index into the top-k scores) after them, at ``ri[out + 2·top_k:]``.

    ``st`` (float32) holds h (2, H), c (2, H) and scratch; returns the number of pages.
    """
    hid = mi[_H]
    n_cls = mi[_NCLS]
    n_slots = mi[_NSLOTS]
    k = mi[_K]
    h = st[: 2 * hid].reshape(2, hid)
    c = st[2 * hid : 4 * hid].reshape(2, hid)
    o = (4 + G_SCRATCH) * hid
    g = st[4 * hid : o]
    logits = st[o : o + 3 * n_cls]
    out_s = st[o + 3 * n_cls : o + 3 * n_cls + k]
    out_c = ri[ri[_R_OUT] + 2 * ri[_R_TOPK] :][:k]
    last = ri[ri[_R_LAST] :][:n_slots]
    seen = ri[ri[_R_SEEN] :][:n_slots]
    n_lut = ri[_R_NLUT]
    slot = ri[ri[_R_LUT] + region + 1] if -1 <= region < n_lut - 1 else n_slots
    tok = 0
    if slot < n_slots:
        if seen[slot]:
            key = (slot << _DELTA_BITS) | (page - last[slot] + _DELTA_OFFSET)
            keys = mi[mi[_O_KEYS] : mi[_O_KEYS] + mi[_NKEYS]]
            q = np.searchsorted(keys, key)
            if q < keys.shape[0] and keys[q] == key:
                tok = q + 1
            else:  # the generic pair of the same delta
                key = (np.int64(GENERIC_SLOT) << _DELTA_BITS) | (page - last[slot] + _DELTA_OFFSET)
                q = np.searchsorted(keys, key)
                if q < keys.shape[0] and keys[q] == key:
                    tok = q + 1
        last[slot] = page
        seen[slot] = 1
    i = ri[_R_I]
    ri[_R_I] = i + 1
    m = _advance(wf, mi, i, tok, slot, 0, h, c, g, logits, k, out_s, out_c)
    top_k = ri[_R_TOPK]
    out = ri[_R_OUT]
    s2r = ri[_R_S2R]
    rp = ri[_R_RPAGES]
    cslot = mi[_O_CSLOT]
    cdelta = mi[_O_CDELTA]
    got = 0
    for q in range(m):
        cls = out_c[q]
        if cls <= 0:
            continue
        cs = mi[cslot + cls]
        if cs == GENERIC_SLOT:
            cs = slot  # the region just touched
        if cs >= n_slots or not seen[cs]:
            continue
        p = last[cs] + mi[cdelta + cls]
        if p < 0 or (cs == slot and p == page):
            continue
        rid = ri[s2r + cs]
        if rid < 0 or p >= ri[rp + rid]:
            continue
        ri[out + 2 * got] = rid
        ri[out + 2 * got + 1] = p
        out_c[got] = q  # rank of this page (got <= q: ranks still to read are not overwritten)
        got += 1
        if got == top_k:
            break
    return got


@numba.njit(cache=True, fastmath=True, parallel=True)
def score_stream_kernel(wf, mi, tokens, slots, ips, start, stop, sub, scores, classes):
    """Ranked (scores, classes) of events start … stop−1 (rows 0 … of the outputs): the live
    step in a compiled loop, over sub-blocks of ``sub`` events in parallel.

    The context rule makes this exact: at a multiple of 2C state 0 restarts, and state 1
    restarted C events earlier, so a sub-block starting there only needs those C events
    replayed (without the head) to hold bit-for-bit the sequential states.
    ``start`` and ``sub`` are multiples of 2C.
    """
    k = scores.shape[1]
    ch = mi[_CHUNK]
    n_sub = (stop - start + sub - 1) // sub
    for sb in numba.prange(n_sub):
        a = start + sb * sub
        e = min(stop, a + sub)
        h = np.zeros((2, mi[_H]), np.float32)
        c = np.zeros((2, mi[_H]), np.float32)
        g = np.empty(G_SCRATCH * mi[_H], np.float32)
        logits = np.empty(3 * mi[_NCLS], np.float32)
        out_s = np.empty(k, np.float32)
        out_c = np.empty(k, np.int64)
        for i in range(max(0, a - ch), a):
            _advance(wf, mi, i, tokens[i], slots[i], ips[i], h, c, g, logits, k, out_s, out_c, False)
        for i in range(a, e):
            m = _advance(wf, mi, i, tokens[i], slots[i], ips[i], h, c, g, logits, k, out_s, out_c, True)
            r = i - start
            for q in range(m):
                scores[r, q] = out_s[q]
                classes[r, q] = out_c[q]
            for q in range(m, k):
                scores[r, q] = 0.0
                classes[r, q] = 0


def _pack(parts: Sequence[np.ndarray], dtype, header: int) -> tuple[np.ndarray, list[int]]:
    offs, pos = [], header
    for p in parts:
        offs.append(pos)
        pos += p.size
    buf = np.zeros(pos, dtype)
    for o, p in zip(offs, parts):
        buf[o : o + p.size] = p.ravel()
    return buf, offs


@dataclass
class LSTMKernel:
    """The model's weights and vocabulary in the flat layout of the compiled kernels."""

    wf: np.ndarray  # float32: P_tok, P_slot, P_ip, W_hhᵀ, W_outᵀ, b_out
    mi: np.ndarray  # int64: header, vocabulary keys, class → (slot, delta)
    hidden: int
    n_classes: int
    k: int

    @classmethod
    def build(
        cls,
        model: DeltaLSTM,
        head: str,
        k: int,
        keys: np.ndarray | None = None,
        cls_slot: np.ndarray | None = None,
        cls_delta: np.ndarray | None = None,
    ) -> "LSTMKernel":
        if model.cfg.layers != 1:
            raise ValueError("the numba kernels support one LSTM layer")
        sd = {n: p.detach().to(torch.float64).numpy() for n, p in model.state_dict().items()}
        w_ih = sd["lstm.weight_ih_l0"]
        # Folding the embeddings through W_ih once (in float64) removes the per-step input GEMV.
        p_tok = sd["embed.tok.weight"] @ w_ih.T
        p_slot = sd["embed.slot.weight"] @ w_ih.T + sd["lstm.bias_ih_l0"] + sd["lstm.bias_hh_l0"]
        p_ip = sd["embed.ip.weight"] @ w_ih.T if "embed.ip.weight" in sd else np.zeros((0, w_ih.shape[0]))
        pre = "horizon_head" if head == "horizon" else "next_head"
        w_out, b_out = sd[f"{pre}.weight"], sd[f"{pre}.bias"]
        wf, fo = _pack([p_tok, p_slot, p_ip, sd["lstm.weight_hh_l0"].T, w_out.T, b_out], np.float32, 0)
        n_cls, hid = w_out.shape[0], model.cfg.hidden
        if keys is None:
            keys, cls_slot, cls_delta = np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64)
        mi, io = _pack(
            [np.asarray(keys, np.int64), np.asarray(cls_slot, np.int64), np.asarray(cls_delta, np.int64)],
            np.int64,
            _MI_HEADER,
        )
        mi[[_H, _NCLS, _NSLOTS, _K, _SOFTMAX, _CHUNK, _NIP]] = [
            hid,
            n_cls,
            model.cfg.n_slots,
            k,
            head != "horizon",
            model.cfg.chunk,
            p_ip.shape[0],
        ]
        mi[[_O_PTOK, _O_PSLOT, _O_PIP, _O_WHH, _O_WOUT, _O_BOUT]] = fo
        mi[[_O_KEYS, _O_CSLOT, _O_CDELTA, _NKEYS]] = io + [len(keys)]
        return cls(wf, mi, hid, n_cls, k)

    def scratch(self) -> np.ndarray:
        """The float32 state array of ``observe_kernel``: h, c, gates, logits, top-k scores."""
        return np.zeros((4 + G_SCRATCH) * self.hidden + 3 * self.n_classes + self.k, np.float32)

    def run_state(
        self, lut: np.ndarray, slot_to_region: np.ndarray, region_pages: np.ndarray, n_slots: int, top_k: int
    ) -> np.ndarray:
        """The int64 run array of ``observe_kernel`` for one stream (after ``reset``)."""
        parts = [
            np.asarray(lut, np.int64),
            np.asarray(slot_to_region, np.int64),
            np.asarray(region_pages, np.int64),
            np.zeros(n_slots, np.int64),
            np.zeros(n_slots, np.int64),
            np.zeros(2 * top_k + self.k, np.int64),
        ]
        ri, o = _pack(parts, np.int64, _RI_HEADER)
        ri[[_R_I, _R_TOPK, _R_NLUT]] = [0, top_k, len(lut)]
        ri[[_R_LUT, _R_S2R, _R_RPAGES, _R_LAST, _R_SEEN, _R_OUT]] = o
        return ri

    def score_stream(
        self,
        tokens: np.ndarray,
        slots: np.ndarray,
        ips: np.ndarray,
        threads: int = 1,
        block: int = 1 << 16,
        sub: int = 2048,
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(start, scores, classes) per block of events, in order; memory bounded by ``block``.

        ``sub`` (rounded to a multiple of 2C): events per parallel work item; each replays C
        events, so small values cost recomputation.
        """
        tokens, slots, ips = (np.ascontiguousarray(a, np.int64) for a in (tokens, slots, ips))
        two_c = 2 * int(self.mi[_CHUNK])
        sub = two_c * max(1, sub // two_c)
        block = sub * max(1, block // sub)
        n = len(tokens)
        scores = np.empty((min(block, n), self.k), np.float32)
        classes = np.empty((min(block, n), self.k), np.int64)
        prev = numba.get_num_threads()
        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
        try:
            for a in range(0, n, block):
                b = min(n, a + block)
                score_stream_kernel(self.wf, self.mi, tokens, slots, ips, a, b, sub, scores, classes)
                yield a, scores[: b - a], classes[: b - a]
        finally:
            numba.set_num_threads(prev)
