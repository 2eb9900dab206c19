"""The per-fault adapter of a trained model: one ``observe`` per fault, the ``Prefetcher``
behind ``get_prefetcher("learned", ...)`` and the live loop's ``--model``.

It lives in the policies package, not in ``pagecast.learn``, so that learning depends on
nothing but the trace layer and this is the one place that turns a model into a
``Prefetcher``. The leading underscore keeps it out of the registry's discovery, which
would otherwise import torch for every policy lookup.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pagecast.learn.dataset import _DELTA_BITS, _DELTA_OFFSET, GENERIC_SLOT
from pagecast.learn.pagetable import PAGE_BITS, mix_row
from pagecast.learn.predict import _candidates, _mixture, _slot_to_region, lstm_kernel, resolve_backend, step_runner
from pagecast.learn.train import LoadedModel
from pagecast.policies.base import Prefetcher
from pagecast.trace.regions import Region


class LearnedPrefetcher(Prefetcher):
    """Incremental inference: one ``observe`` per fault, up to ``top_k`` pages back.

    LSTM: two staggered recurrent states (reset every 2C events, offset by C) advance
    together in one model call; the one whose context began ``context_start(i)`` scores.
    Transformer: the window since ``context_start(i)`` is re-run (at most seq_len events).
    """

    name = "learned"

    def __init__(self, lm: LoadedModel, *, top_k: int = 10, backend: str = "auto"):
        backend = resolve_backend(lm, backend)
        self.lm, self.top_k, self.backend = lm, top_k, backend
        self.k = _candidates(lm, top_k)
        if backend == "numba":
            self._kern = lstm_kernel(lm, self.k)
        else:
            self._run = step_runner(lm, self.k, backend)
        self._class_of = {int(key): c + 1 for c, key in enumerate(lm.vocab.keys.tolist())}
        cs, cd = lm.vocab.class_slots_deltas()
        self._cls_slot, self._cls_delta = cs.tolist(), cd.tolist()
        self._mix = _mixture(lm)
        width = self.k + (self._mix[0].succ.shape[1] if self._mix else 0)
        self._mr, self._mp = np.zeros(width, np.int64), np.zeros(width, np.int64)
        self._ms = np.zeros(width, np.float32)
        self.reset([])

    def reset(self, regions: Sequence[Region]) -> None:
        lm = self.lm
        self.regions = list(regions)
        self._s2r = _slot_to_region(lm, self.regions).astype(np.int64)
        self._rp = np.array(
            [r.pages if r.pages > 0 else np.iinfo(np.int64).max for r in self.regions] + [np.iinfo(np.int64).max],
            np.int64,
        )
        self._lut = lm.table.lut_for(self.regions).tolist()
        self._slot_to_region = _slot_to_region(lm, self.regions).tolist()
        self._region_pages = [r.pages if r.pages > 0 else None for r in self.regions]
        self._n_slots = lm.table.unknown
        self._last = [0] * self._n_slots
        self._seen = [False] * self._n_slots
        self._i = 0
        cfg = lm.config
        self._c = cfg.chunk
        self._ip = np.zeros(2, np.int64)
        self._tok2 = np.zeros(2, np.int64)
        self._slot2 = np.zeros(2, np.int64)
        self._sel = (np.zeros(1, np.int64), np.ones(1, np.int64))
        if cfg.kind == "lstm":
            self._h = np.zeros((cfg.layers, 2, cfg.hidden), np.float32)
            self._cst = np.zeros((cfg.layers, 2, cfg.hidden), np.float32)
        self._toks: list[int] = []
        self._slots: list[int] = []
        if self.backend == "numba":
            from pagecast.learn.fast_step import _R_OUT, G_SCRATCH, observe_kernel

            pages = np.array([r.pages if r.pages > 0 else np.iinfo(np.int64).max for r in self.regions], np.int64)
            kern = self._kern
            self._ri = kern.run_state(
                lm.table.lut_for(self.regions), _slot_to_region(lm, self.regions), pages, self._n_slots, self.top_k
            )
            self._out = int(self._ri[_R_OUT])  # where the kernel writes (region, page) pairs
            self._score_at = (4 + G_SCRATCH) * cfg.hidden + 3 * cfg.n_classes  # top-k scores in the float state
            self._st = kern.scratch()
            self._obs = observe_kernel

    def observe(self, t_ns: int, region: int, page: int, hit: bool) -> list[tuple[int, int]]:
        if self.backend == "numba":
            # one compiled call: encode, both LSTM states, head, top-k, decode
            ri = self._ri
            m = self._obs(self._kern.wf, self._kern.mi, ri, self._st, region, page)
            if self._mix is not None:
                pairs = ri[self._out : self._out + 2 * m]
                ranks = ri[self._out + 2 * self.top_k : self._out + 2 * self.top_k + m]
                return self._mixed(pairs[::2], pairs[1::2], self._st[self._score_at + ranks], region, page)
            if m == 0:
                return []
            o = ri[self._out : self._out + 2 * m].tolist()
            return list(zip(o[::2], o[1::2]))
        lut = self._lut
        slot = lut[region + 1] if -1 <= region < len(lut) - 1 else self._n_slots
        tok = 0
        if slot < self._n_slots:
            if self._seen[slot]:
                d = page - self._last[slot] + _DELTA_OFFSET
                tok = self._class_of.get((slot << _DELTA_BITS) | d, 0) or self._class_of.get(
                    (GENERIC_SLOT << _DELTA_BITS) | d, 0
                )
            self._last[slot] = page
            self._seen[slot] = True
        i = self._i
        self._i += 1
        c = self._c
        b = i // c
        if self.lm.config.kind == "lstm":
            # state 0 restarts at multiples of 2C, state 1 at odd multiples of C
            if i % (2 * c) == 0:
                self._h[:, 0] = 0.0
                self._cst[:, 0] = 0.0
            elif i % (2 * c) == c:
                self._h[:, 1] = 0.0
                self._cst[:, 1] = 0.0
            sel = 0 if b == 0 or (b - 1) % 2 == 0 else 1
            self._tok2[:] = tok
            self._slot2[:] = slot
            scores, classes, self._h, self._cst = self._run(
                self._tok2, self._slot2, self._ip, self._h, self._cst, self._sel[sel]
            )
        else:
            start = max(0, (b - 1) * c)
            self._toks.append(tok)
            self._slots.append(slot)
            keep = i - start + 1
            if len(self._toks) > keep:
                del self._toks[: len(self._toks) - keep]
                del self._slots[: len(self._slots) - keep]
            t = np.array([self._toks], np.int64)
            scores, classes = self._run(t, np.array([self._slots], np.int64), np.zeros_like(t))
        if self._mix is None:
            return self._decode(classes.tolist(), slot, page)
        picked: list[int] = []
        pairs = self._decode(classes.tolist(), slot, page, picked)
        sc = np.asarray(scores, np.float32).reshape(-1)[picked]
        return self._mixed(
            np.array([r for r, _ in pairs], np.int64), np.array([p for _, p in pairs], np.int64), sc, region, page
        )

    def _mixed(
        self, regs: np.ndarray, pages: np.ndarray, scores: np.ndarray, region: int, page: int
    ) -> list[tuple[int, int]]:
        """The delta pages merged with the page table's successors of (region, page) (``mix_row``)."""
        tab, lam = self._mix
        lut = self._lut
        slot = lut[region + 1] if -1 <= region < len(lut) - 1 else self._n_slots
        key = (slot << PAGE_BITS) | page if slot < self._n_slots and 0 <= page < (1 << PAGE_BITS) else -1
        n = mix_row(
            np.ascontiguousarray(regs, np.int64),
            np.ascontiguousarray(pages, np.int64),
            np.ascontiguousarray(scores, np.float32),
            len(pages),
            key,
            tab.keys,
            tab.succ,
            tab.prob,
            self._s2r,
            self._rp,
            region,
            page,
            lam,
            self.top_k,
            self._mr,
            self._mp,
            self._ms,
        )
        return list(zip(self._mr[:n].tolist(), self._mp[:n].tolist()))

    def _decode(
        self, classes: list[int], slot: int, page: int, picked: list[int] | None = None
    ) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for q, cls in enumerate(classes):
            if cls <= 0:
                continue
            cs = self._cls_slot[cls]
            if cs == GENERIC_SLOT:
                cs = slot  # the region just touched
            if cs >= self._n_slots or not self._seen[cs]:
                continue
            p = self._last[cs] + self._cls_delta[cls]
            if p < 0 or (cs == slot and p == page):
                continue
            rid = self._slot_to_region[cs]
            if rid < 0:
                continue
            lim = self._region_pages[rid]
            if lim is not None and p >= lim:
                continue
            out.append((rid, p))
            if picked is not None:
                picked.append(q)
            if len(out) == self.top_k:
                break
        return out
