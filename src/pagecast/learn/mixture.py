"""Fitting the page/delta mixture of a trained model on validation data.

After the delta model is trained, the page table is built from the training parts of
all training runs (``PageTable.build``) and the mixture weight λ is chosen on the
validation parts (another run when there are several: leave-one-run-out), as the λ of
a grid whose merged top-k predictions reach the highest recall of the pages of the
next H events. λ = 0 is the delta model alone, λ = 1 the table first. When the
validation data cannot tell (every λ the same recall: the later part of a single fault
trace, whose pages the table cannot have seen), λ = 0.1: the table decides where the delta
head is unsure and defers to it where it is confident. Candidates
are scored once per event; each λ only re-merges them (numba), so the fit costs about
one batched inference pass over the validation data.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pagecast.learn.dataset import EncodedStream, decode_pages
from pagecast.learn.pagetable import PageTable, mix_block, page_keys
from pagecast.learn.predict import _candidates, forget, score_stream
from pagecast.learn.ranking import ranking_metrics
from pagecast.learn.train import LoadedModel

LAMBDAS = tuple(round(x, 2) for x in np.linspace(0.0, 1.0, 11))
PRIOR_LAMBDA = 0.1
MAX_FIT_EVENTS = 200_000  # per validation part: enough to choose λ, bounded cost on long access traces


def build_table(parts: Sequence[tuple[EncodedStream, range]], n_slots: int, horizon: int, max_succ: int) -> PageTable:
    keys = [page_keys(enc.slots[r.start : r.stop], enc.pages[r.start : r.stop], n_slots) for enc, r in parts]
    return PageTable.build(keys, horizon, max_succ)


def _delta_candidates(lm: LoadedModel, enc: EncodedStream, begin: int, stop: int, top_k: int):
    """Per event in [begin, stop): the decoded delta pages in slot space (ok, slot, page,
    score), each (stop − begin, top_k). ``begin`` is a multiple of the context chunk, so the
    context rule sees the same windows as on the whole stream."""
    k = _candidates(lm, top_k)
    cs, cd = lm.vocab.class_slots_deltas()
    n_slots = lm.table.unknown
    last = np.zeros(n_slots, np.int64)
    seen = np.zeros(n_slots, np.bool_)
    limit = np.full(n_slots, np.iinfo(np.int64).max, np.int64)  # region lengths of the training run are not kept
    slots32 = enc.slots[begin:stop].astype(np.int32)
    pages = enc.pages[begin:stop]
    parts: list[tuple] = []

    def on_block(start: int, scores: np.ndarray, classes: np.ndarray) -> None:
        ok, rank, s, p = decode_pages(slots32, pages, start, classes.astype(np.int64), cs, cd, last, seen, top_k, limit)
        parts.append((ok, s.astype(np.int64), p, np.take_along_axis(scores, rank, 1).astype(np.float32)))

    score_stream(lm, enc.tokens[begin:stop], enc.slots[begin:stop], enc.ips[begin:stop], k, on_block=on_block)
    return tuple(np.concatenate([q[i] for q in parts]) for i in range(4))


def fit_mix(
    lm: LoadedModel, table: PageTable, val: Sequence[tuple[EncodedStream, range]], top_k: int, horizon: int
) -> tuple[float, dict[float, float]]:
    """(best λ, validation recall@top_k per λ). Ties go to the smaller λ (the delta model);
    when every λ scores the same, ``PRIOR_LAMBDA``."""
    if len(table) == 0 or not val:
        return 0.0, {}
    hits = {lam: [0.0, 0] for lam in LAMBDAS}
    try:
        _accumulate(lm, table, val, top_k, horizon, hits)
    finally:
        forget(lm)
    recall = {lam: (h / n if n else 0.0) for lam, (h, n) in hits.items()}
    if max(recall.values()) - min(recall.values()) < 1e-6:
        # Nothing to judge by: validation data the table never fires on (the later part of
        # the one training run of a fault trace, whose pages fault once per run). Keep the
        # table for where the delta head is unsure rather than drop it; a larger weight
        # let a stale table outrank a confident delta head on a run that starts elsewhere.
        return PRIOR_LAMBDA, recall
    best = max(LAMBDAS, key=lambda lam: (round(recall[lam], 6), -lam))
    return best, recall


def _accumulate(lm: LoadedModel, table: PageTable, val, top_k: int, horizon: int, hits: dict) -> None:
    n_slots = lm.table.unknown
    ident = np.arange(n_slots + 1, dtype=np.int64)
    ident[n_slots] = -1
    big = np.full(n_slots + 1, np.iinfo(np.int64).max, np.int64)
    for enc, r in val:
        stop = min(r.stop, r.start + MAX_FIT_EVENTS)
        if stop - r.start < 2:
            continue
        # from one context chunk before the part (not from the stream's start: a sampled
        # stream has many parts)
        c = lm.config.chunk
        begin = max(0, (r.start // c - 1) * c)
        ok, s, p, sc = _delta_candidates(lm, enc, begin, stop, top_k)
        sl = slice(r.start - begin, stop - begin)
        slots = enc.slots[r.start : stop].astype(np.int64)
        pages = enc.pages[r.start : stop]
        keys = page_keys(slots, pages, n_slots)
        rids = np.where(slots < n_slots, slots, -1)
        truth = {"region": rids, "page": pages}
        for lam in LAMBDAS:
            cnt, reg, pg, score = mix_block(
                ok[sl],
                s[sl],
                p[sl],
                sc[sl],
                keys,
                rids,
                pages,
                table.keys,
                table.succ,
                table.prob,
                ident,
                big,
                lam,
                top_k,
            )
            rows, cols = np.nonzero(np.arange(top_k)[None, :] < cnt[:, None])
            m = ranking_metrics(
                (rows, reg[rows, cols], pg[rows, cols], score[rows, cols]), truth, k=top_k, horizon=horizon
            )
            n_ev = stop - r.start
            # an event without predictions counts as zero recall
            hits[lam][0] += m["recall_at_k"] * m["triggers"] if m["triggers"] else 0.0
            hits[lam][1] += n_ev
