"""The page side of the learned predictor: region-relative pages seen in training.

The delta vocabulary cannot name the irregular jumps between code and data pages of
shared libraries and compilers, but those pages recur from run to run at the same
region-relative page (regions are matched by key). ``PageTable`` keeps, for every
(region slot, page) of the training runs, the pages that followed it within the next
H distinct-page events and how often (an empirical probability, counted over all
training runs at once, discounted a little by how many steps ahead they came). At inference the model's delta candidates and the table's page
candidates are merged per event by a mixture weight λ learned on validation data
(``learn/mixture.py``): score(page) = (1 − λ)·p_delta(page) + λ·p_table(page), so where
the table is sure of the next pages they win, and where the program walks by deltas the
model does. Voyager splits page and offset and Hashemi et al. cluster the address
space for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numba
import numpy as np

from pagecast.trace.followers import distinct_followers
from pagecast.trace.keys import PAGE_BITS  # key = slot << PAGE_BITS | page (slots, not regions)
from pagecast.trace.keys import PAGE_MASK as _PAGE_MASK

STEP_DISCOUNT = 0.05


def page_keys(slots: np.ndarray, pages: np.ndarray, n_slots: int) -> np.ndarray:
    """(slot, page) → packed key; −1 for the unknown slot or a page that does not fit."""
    slots = np.asarray(slots, np.int64)
    pages = np.asarray(pages, np.int64)
    ok = (slots >= 0) & (slots < n_slots) & (pages >= 0) & (pages <= _PAGE_MASK)
    return np.where(ok, (slots << PAGE_BITS) | pages, -1)


def _distinct_steps(keys: np.ndarray) -> np.ndarray:
    """Drop repeats of the same page in a row (an access trace touches a page many times)."""
    if len(keys) == 0:
        return keys
    keep = np.r_[True, keys[1:] != keys[:-1]]
    return keys[keep]


def _pair_counts(src: np.ndarray, dst: np.ndarray, n: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, ...]:
    """(src, dst, count, sum of steps) summed over equal (src, dst) pairs, sorted by src then dst."""
    if len(src) == 0:
        e = np.empty(0, np.int64)
        return e, e, e, np.empty(0, np.float64)
    order = np.lexsort((dst, src))
    src, dst, n, steps = src[order], dst[order], n[order], steps[order]
    new = np.r_[True, (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])]
    g = np.cumsum(new) - 1
    m = int(g[-1]) + 1
    return (
        src[new],
        dst[new],
        np.bincount(g, weights=n, minlength=m).astype(np.int64),
        np.bincount(g, weights=steps, minlength=m),
    )


@dataclass
class PageTable:
    """Sorted source keys; per source up to M successor keys (−1: none) and probabilities."""

    keys: np.ndarray  # (n,) int64, sorted
    succ: np.ndarray  # (n, M) int64
    prob: np.ndarray  # (n, M) float32 scores, descending per row: P(follows within H) · step discount

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def empty(cls, m: int = 1) -> "PageTable":
        return cls(np.empty(0, np.int64), np.full((0, m), -1, np.int64), np.zeros((0, m), np.float32))

    @classmethod
    def build(cls, key_streams: Sequence[np.ndarray], horizon: int, max_succ: int) -> "PageTable":
        """From packed key streams (``page_keys``) of the training parts of one or more runs.

        Pairs are counted stream by stream and merged, so memory holds the distinct
        (page, successor) pairs and one stream's pairs, not every event's."""
        agg: list[tuple[np.ndarray, ...]] = []
        occ: list[tuple[np.ndarray, np.ndarray]] = []
        for k in key_streams:
            k = _distinct_steps(np.asarray(k, np.int64))
            at, d, st = distinct_followers(k, horizon, horizon)
            s = k[at]
            agg.append(_pair_counts(s, d, np.ones(len(s), np.int64), st.astype(np.float64)))
            occ.append(np.unique(k[k >= 0], return_counts=True))
        if not agg or sum(len(a[0]) for a in agg) == 0:
            return cls.empty(max_succ)
        ps_k, pd_k, counts, step_sum = _pair_counts(*(np.concatenate([a[i] for a in agg]) for i in range(4)))
        mean_step = step_sum / counts
        ou = np.concatenate([o[0] for o in occ])
        occ_keys, oinv = np.unique(ou, return_inverse=True)
        occ_n = np.bincount(oinv, weights=np.concatenate([o[1] for o in occ]), minlength=len(occ_keys))
        n_src = occ_n[np.searchsorted(occ_keys, ps_k)]
        # A successor's score is how often it followed within H events, discounted by how
        # far ahead it usually came (5 % per step): of several pages that always follow, the
        # nearest ranks first, which is the one needed soonest. Ties: smaller key.
        score = np.minimum(1.0, counts / np.maximum(n_src, 1)) * (1.0 - STEP_DISCOUNT * (mean_step - 1.0))
        order = np.lexsort((pd_k, -score, ps_k))
        ps_k, pd_k, score = ps_k[order], pd_k[order], score[order]
        first = np.r_[True, ps_k[1:] != ps_k[:-1]]
        starts = np.flatnonzero(first)
        rank = np.arange(len(ps_k)) - np.repeat(starts, np.diff(np.r_[starts, len(ps_k)]))
        keep = rank < max_succ
        ps_k, pd_k, score, rank = ps_k[keep], pd_k[keep], score[keep], rank[keep]
        src_keys = np.unique(ps_k)
        row = np.searchsorted(src_keys, ps_k)
        succ = np.full((len(src_keys), max_succ), -1, np.int64)
        prob = np.zeros((len(src_keys), max_succ), np.float32)
        succ[row, rank] = pd_k
        prob[row, rank] = score.astype(np.float32)
        return cls(src_keys.astype(np.int64), succ, prob)

    def to_blob(self) -> dict:
        import torch

        return {
            "keys": torch.from_numpy(self.keys.copy()),
            "succ": torch.from_numpy(self.succ.copy()),
            "prob": torch.from_numpy(self.prob.copy()),
        }

    @classmethod
    def from_blob(cls, blob: dict) -> "PageTable":
        return cls(
            blob["keys"].numpy().astype(np.int64),
            blob["succ"].numpy().astype(np.int64),
            blob["prob"].numpy().astype(np.float32),
        )


@numba.njit(cache=True)
def mix_row(
    d_reg,
    d_page,
    d_score,
    nd,
    key,
    t_keys,
    t_succ,
    t_prob,
    s2r,
    rpages,
    cur_rid,
    cur_page,
    lam,
    top_k,
    o_reg,
    o_page,
    o_score,
) -> int:
    """Merge one event's delta candidates (region, page, score; best first) with the table's
    successors of ``key`` into the ``top_k`` pages of highest (1 − λ)·p_delta + λ·p_table.

    Table pages map slot → region through ``s2r`` (−1: region absent from this run) and must
    lie inside the region (``rpages``) and differ from the page just touched. Ties keep the
    delta order first, then the table's. Returns how many were written to ``o_*``.
    """
    m = 0
    cap = len(o_page)
    for j in range(nd):
        if m >= cap:
            break
        o_reg[m] = d_reg[j]
        o_page[m] = d_page[j]
        o_score[m] = (1.0 - lam) * d_score[j]
        m += 1
    if lam > 0.0 and key >= 0 and len(t_keys) > 0:
        q = np.searchsorted(t_keys, key)
        if q < len(t_keys) and t_keys[q] == key:
            for j in range(t_succ.shape[1]):
                sk = t_succ[q, j]
                if sk < 0:
                    break
                slot = sk >> PAGE_BITS
                pg = sk & _PAGE_MASK
                if slot >= len(s2r):
                    continue
                rid = s2r[slot]
                if rid < 0 or pg >= rpages[rid] or (rid == cur_rid and pg == cur_page):
                    continue
                w = lam * t_prob[q, j]
                found = False
                for r in range(m):
                    if o_reg[r] == rid and o_page[r] == pg:
                        o_score[r] += w
                        found = True
                        break
                if not found and m < cap:
                    o_reg[m] = rid
                    o_page[m] = pg
                    o_score[m] = w
                    m += 1
    # stable selection sort of the first top_k by descending score
    n = min(m, top_k)
    for a in range(n):
        b = a
        for c in range(a + 1, m):
            if o_score[c] > o_score[b]:
                b = c
        if b != a:
            rr, pp, ss = o_reg[b], o_page[b], o_score[b]
            for c in range(b, a, -1):
                o_reg[c], o_page[c], o_score[c] = o_reg[c - 1], o_page[c - 1], o_score[c - 1]
            o_reg[a], o_page[a], o_score[a] = rr, pp, ss
    return n


@numba.njit(cache=True)
def mix_block(ok, d_reg, d_page, d_score, keys, rids, pages, t_keys, t_succ, t_prob, s2r, rpages, lam, top_k):
    """``mix_row`` for a block of events: ``ok``/``d_*`` (m, K) from the delta decoder, ``keys``
    (m,) the events' own page keys, ``rids``/``pages`` (m,) their region and page.
    Returns (count per row, region, page, score) each (m, top_k)."""
    m, kk = d_page.shape
    width = kk + t_succ.shape[1]
    cnt = np.zeros(m, np.int64)
    o_reg = np.zeros((m, top_k), np.int64)
    o_page = np.zeros((m, top_k), np.int64)
    o_score = np.zeros((m, top_k), np.float32)
    br = np.zeros(width, np.int64)
    bp = np.zeros(width, np.int64)
    bs = np.zeros(width, np.float32)
    dr = np.zeros(kk, np.int64)
    dp = np.zeros(kk, np.int64)
    ds = np.zeros(kk, np.float32)
    for r in range(m):
        nd = 0
        for j in range(kk):
            if ok[r, j]:
                dr[nd] = d_reg[r, j]
                dp[nd] = d_page[r, j]
                ds[nd] = d_score[r, j]
                nd += 1
        n = mix_row(
            dr, dp, ds, nd, keys[r], t_keys, t_succ, t_prob, s2r, rpages, rids[r], pages[r], lam, top_k, br, bp, bs
        )
        cnt[r] = n
        for j in range(n):
            o_reg[r, j] = br[j]
            o_page[r, j] = bp[j]
            o_score[r, j] = bs[j]
    return cnt, o_reg, o_page, o_score
