"""Offline ranking metrics of prefetch predictions against what the trace did next.

For a prediction made at demand event ``i`` (its trigger), the *truth* is the set of
distinct pages demanded in the next ``horizon`` events, i + 1 … i + horizon. Per trigger,
with the top ``k`` predictions in rank order (best score first, duplicates dropped):

* precision@K = hits in the top K / K
* recall@K    = hits in the top K / |truth|
* AP@K        = Σ_r P(r)·rel(r) / min(K, |truth|)  (mAP = mean over triggers)
* micro-F1    = F1 of Σ hits / Σ predictions and Σ hits / Σ |truth| over all triggers

Averages run over every event with a non-empty truth: an event without predictions (a
silent one: a schedule that fires only at misses, a prefetcher that declined) counts as
zero, so a predictor cannot raise its score by speaking only when sure. ``event_coverage``
is the fraction of those events that had predictions; micro-F1's recall also counts the
truth of silent events.
The whole demand stream is held in memory here (one int64 per event and a sort).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagecast.trace.demand import as_trace, read_demand
from pagecast.trace.keys import page_keys, split_keys
from pagecast.trace.schedule import Schedule

PredictionRows = Schedule | tuple[np.ndarray, ...]


def _rows(pred: PredictionRows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(trigger, key, score) sorted by trigger then best first."""
    if isinstance(pred, Schedule):
        trig, key, score = pred.trigger, page_keys(pred.region, pred.page), pred.score.astype(np.float64)
    else:
        trig, region, page = (np.asarray(a, np.int64) for a in pred[:3])
        key = page_keys(region, page)
        # without scores, the order given is the rank order
        score = np.asarray(pred[3], np.float64) if len(pred) > 3 else -np.arange(len(trig), dtype=np.float64)
    order = np.lexsort((-score, trig))
    return trig[order], key[order], score[order]


def window_distinct(ids: np.ndarray, horizon: int) -> np.ndarray:
    """For each i: number of distinct ids among positions i+1 … i+horizon."""
    n = len(ids)
    order = np.lexsort((np.arange(n), ids))
    prev = np.full(n, -1, np.int64)
    same = ids[order][1:] == ids[order][:-1]
    prev[order[1:][same]] = order[:-1][same]
    j = np.arange(n)
    # position j is the first occurrence of its id within the window after i exactly
    # when max(prev[j], j - horizon) <= i < j
    lo = np.maximum(prev, j - horizon)
    lo = np.maximum(lo, 0)
    diff = np.zeros(n + 1, np.int64)
    np.add.at(diff, lo, 1)
    np.add.at(diff, j, -1)
    return np.cumsum(diff)[:n]


def ranking_metrics(
    schedule_or_predictions: PredictionRows, trace: Any, k: int = 10, horizon: int = 64, limit: int | None = None
) -> dict[str, float]:
    """precision@K, recall@K, mAP and micro-F1 of predictions against ``trace``.

    ``limit``: only triggers and events before it are scored (the events after it are the
    truth of the last ones: a block of a longer stream, ``ranking_metrics_stream``).
    """
    if k < 1 or horizon < 1:
        raise ValueError("k and horizon must be positive")
    d = read_demand(as_trace(trace)) if not isinstance(trace, dict) else trace
    stream = page_keys(d["region"], d["page"])
    n = len(stream)
    limit = n if limit is None else min(n, int(limit))
    uniq, ids = np.unique(stream, return_inverse=True)
    trig, key, _ = _rows(schedule_or_predictions)
    ok = (trig >= 0) & (trig < limit)
    trig, key = trig[ok], key[ok]
    trig, key, group, rank = _top_k_distinct(trig, key, k)
    rel = _relevant(uniq, ids, trig, key, horizon)
    truth = window_distinct(ids, horizon)
    truth[limit:] = 0  # beyond the block: scored by the next one
    g_trig = trig[np.r_[True, group[1:] != group[:-1]]] if len(trig) else np.zeros(0, np.int64)
    ng = len(g_trig)
    hits = np.bincount(group, weights=rel, minlength=ng) if ng else np.zeros(0)
    npred = np.bincount(group, minlength=ng) if ng else np.zeros(0)
    t_size = truth[g_trig].astype(np.float64) if ng else np.zeros(0)
    cum = np.cumsum(rel)
    g_start_cum = np.r_[0, cum][np.flatnonzero(np.r_[True, group[1:] != group[:-1]])] if ng else np.zeros(0)
    cum_in_group = cum - g_start_cum[group] if ng else np.zeros(0)
    prec_at_r = cum_in_group / (rank + 1)
    ap_num = np.bincount(group, weights=prec_at_r * rel, minlength=ng) if ng else np.zeros(0)
    valid = t_size > 0
    denom_ap = np.minimum(k, t_size)
    # Every event with a non-empty truth counts; one without predictions scores zero.
    n_scored = int((truth > 0).sum())
    out = {
        "k": k,
        "horizon": horizon,
        "events": n,
        "triggers": int(valid.sum()),
        "events_scored": n_scored,
        "event_coverage": float(valid.sum() / n_scored) if n_scored else float("nan"),
        "precision_at_k": float(np.sum(hits[valid] / k) / n_scored) if n_scored else float("nan"),
        "recall_at_k": float(np.sum(hits[valid] / t_size[valid]) / n_scored) if n_scored else float("nan"),
        "map": float(np.sum(ap_num[valid] / denom_ap[valid]) / n_scored) if n_scored else float("nan"),
    }
    tp, pp, tt = hits[valid].sum(), npred[valid].sum(), truth[truth > 0].sum()
    p = tp / pp if pp else 0.0
    r = tp / tt if tt else 0.0
    out["micro_f1"] = float(2 * p * r / (p + r)) if p + r else 0.0
    out["_sums"] = (
        float(np.sum(hits[valid] / k)),
        float(np.sum(hits[valid] / t_size[valid])),
        float(np.sum(ap_num[valid] / denom_ap[valid])),
        float(tp),
        float(pp),
        float(tt),
    )
    return out


def _top_k_distinct(trig: np.ndarray, key: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """The first ``k`` distinct predictions per trigger: (trigger, key, trigger's group,
    rank in it)."""
    first = np.ones(len(trig), bool)
    if len(trig):
        pair_order = np.lexsort((np.arange(len(trig)), key, trig))
        dup = np.zeros(len(trig), bool)
        dup[pair_order[1:]] = (trig[pair_order[1:]] == trig[pair_order[:-1]]) & (
            key[pair_order[1:]] == key[pair_order[:-1]]
        )
        first = ~dup
    trig, key = trig[first], key[first]
    starts = np.flatnonzero(np.r_[True, trig[1:] != trig[:-1]]) if len(trig) else np.zeros(0, np.int64)
    group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(trig)]))
    rank = np.arange(len(trig)) - starts[group] if len(trig) else np.zeros(0, np.int64)
    keep = rank < k
    return trig[keep], key[keep], group[keep], rank[keep]


def _relevant(uniq: np.ndarray, ids: np.ndarray, trig: np.ndarray, key: np.ndarray, horizon: int) -> np.ndarray:
    """Per prediction: the page's next use after its trigger is within the horizon
    (``uniq``: the stream's distinct keys, ``ids``: the stream as indices into them)."""
    n = len(ids)
    pos = np.searchsorted(uniq, key)
    pos_c = np.minimum(pos, len(uniq) - 1) if len(uniq) else pos
    known = (pos < len(uniq)) & (uniq[pos_c] == key) if len(uniq) else np.zeros(len(key), bool)
    occ = np.lexsort((np.arange(n), ids))
    combined = ids[occ].astype(np.int64) * (n + 1) + occ
    q = pos_c.astype(np.int64) * (n + 1) + trig
    nxt = np.searchsorted(combined, q, side="right")
    nxt_c = np.minimum(nxt, max(n - 1, 0))
    return known & (nxt < n) & (combined[nxt_c] // (n + 1) == pos_c) & (combined[nxt_c] % (n + 1) <= trig + horizon)


def ranking_metrics_stream(
    pred: PredictionRows, trace: Any, k: int = 10, horizon: int = 64, block: int = 1 << 22
) -> dict[str, float]:
    """``ranking_metrics`` over a trace read ``block`` demand events at a time (plus the
    ``horizon`` events after each block, its last triggers' truth): the same figures, in
    memory bounded by the block and the predictions, not by the trace."""
    from pagecast.trace.demand import demand_chunks

    if not isinstance(pred, Schedule) and len(pred) == 3 and np.all(np.diff(pred[0]) >= 0):
        # a prefetch log: in trigger order already, each trigger's requests in rank order;
        # no sorted copies of it (it can hold tens of millions of requests)
        trig, reg_all, page_all = (np.asarray(a, np.int64) for a in pred)
        key = score = None
    else:
        trig, key, score = _rows(pred)
    tot = np.zeros(6)
    events = scored = triggers = 0
    prev = None
    base = 0

    def one(cur: dict, nxt: dict | None, base: int) -> dict:
        tail = {c: nxt[c][:horizon] for c in ("region", "page")} if nxt is not None else None
        d = {c: np.concatenate([cur[c], tail[c]]) if tail else cur[c] for c in ("region", "page")}
        a, b = np.searchsorted(trig, [base, base + len(cur["page"])])
        if key is None:
            rows = (trig[a:b] - base, reg_all[a:b], page_all[a:b])
        else:
            reg, pg = split_keys(key[a:b])
            rows = (trig[a:b] - base, reg, pg, score[a:b])
        return ranking_metrics(rows, d, k=k, horizon=horizon, limit=len(cur["page"]))

    for cur in demand_chunks(as_trace(trace), block):
        if prev is not None:
            m = one(prev, cur, base)
            base += len(prev["page"])
            tot += m["_sums"]
            events, scored, triggers = events + m["events"], scored + m["events_scored"], triggers + m["triggers"]
        prev = cur
    if prev is not None:
        m = one(prev, None, base)
        tot += m["_sums"]
        events, scored, triggers = events + m["events"], scored + m["events_scored"], triggers + m["triggers"]
    p = tot[3] / tot[4] if tot[4] else 0.0
    r = tot[3] / tot[5] if tot[5] else 0.0
    nan = float("nan")
    return {
        "k": k,
        "horizon": horizon,
        "events": events,
        "triggers": triggers,
        "events_scored": scored,
        "event_coverage": triggers / scored if scored else nan,
        "precision_at_k": tot[0] / scored if scored else nan,
        "recall_at_k": tot[1] / scored if scored else nan,
        "map": tot[2] / scored if scored else nan,
        "micro_f1": float(2 * p * r / (p + r)) if p + r else 0.0,
    }
