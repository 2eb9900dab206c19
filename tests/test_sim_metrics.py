"""Ranking metrics against a direct per-trigger computation."""

from __future__ import annotations

import numpy as np
import pytest

from pagecast.learn.ranking import ranking_metrics, ranking_metrics_stream, window_distinct
from pagecast.trace.schedule import Schedule
from sim_helpers import write_trace


def _reference(pages, rows, k, h):
    by_t: dict[int, list] = {}
    for t, p, s in rows:
        by_t.setdefault(t, []).append((s, p))
    P, R, AP, tp, pp, tt = [], [], [], 0, 0, 0
    for t in range(len(pages)):  # every event: a silent one scores zero
        lst = by_t.get(t, [])
        ranked = []
        for s, p in sorted(lst, key=lambda x: -x[0]):
            if p not in ranked:
                ranked.append(p)
        ranked = ranked[:k]
        truth = set(pages[t + 1 : t + 1 + h])
        if not truth:
            continue
        rel = [p in truth for p in ranked]
        hits = sum(rel)
        P.append(hits / k)
        R.append(hits / len(truth))
        ap, c = 0.0, 0
        for i, r in enumerate(rel):
            if r:
                c += 1
                ap += c / (i + 1)
        AP.append(ap / min(k, len(truth)))
        tp, pp, tt = tp + hits, pp + len(ranked), tt + len(truth)
    p, r = tp / pp, tp / tt
    return np.mean(P), np.mean(R), np.mean(AP), (2 * p * r / (p + r) if p + r else 0.0)


def test_window_distinct():
    ids = np.array([1, 2, 1, 3, 3, 2, 4])
    h = 3
    want = [len(set(ids[i + 1 : i + 1 + h])) for i in range(len(ids))]
    assert window_distinct(ids, h).tolist() == want


@pytest.mark.parametrize("seed", range(3))
def test_matches_reference(tmp_path, seed):
    rng = np.random.default_rng(seed)
    pages = rng.integers(0, 30, 400)
    path = write_trace(tmp_path / "t.parquet", pages)
    n = 600
    trig = rng.integers(0, 400, n)
    pg = rng.integers(0, 35, n)
    score = rng.random(n).astype(np.float32)
    sched = Schedule(trig, trig * 0, np.zeros(n, np.int32), pg, score)
    k, h = 4, 10
    got = ranking_metrics(sched, path, k=k, horizon=h)
    want = _reference(pages.tolist(), list(zip(trig.tolist(), pg.tolist(), score.tolist())), k, h)
    assert got["precision_at_k"] == pytest.approx(want[0])
    assert got["recall_at_k"] == pytest.approx(want[1])
    assert got["map"] == pytest.approx(want[2])
    assert got["micro_f1"] == pytest.approx(want[3])
    assert got["event_coverage"] == pytest.approx(len(set(trig.tolist()) - {399}) / 399)
    # read in blocks of 37 events (each with the horizon after it): the same figures
    streamed = ranking_metrics_stream(sched, path, k=k, horizon=h, block=37)
    for name in ("precision_at_k", "recall_at_k", "map", "micro_f1", "event_coverage", "events_scored"):
        assert streamed[name] == pytest.approx(got[name]), name
    # a simulator's prefetch log (trigger order, rank order within a trigger, no scores): read as it is
    o = np.lexsort((-score, trig))
    log = (trig[o], np.zeros(n, np.int64), pg[o])
    streamed = ranking_metrics_stream(log, path, k=k, horizon=h, block=37)
    for name in ("precision_at_k", "recall_at_k", "map", "micro_f1", "event_coverage"):
        assert streamed[name] == pytest.approx(got[name]), name


def test_silent_events_count_as_zero(tmp_path):
    pages = np.arange(100)
    path = write_trace(tmp_path / "t.parquet", pages)
    trig = np.arange(0, 99, 3)  # predictions at one event in three, all correct
    sched = Schedule(trig, trig, np.zeros(len(trig), np.int32), trig + 1, np.ones(len(trig), np.float32))
    m = ranking_metrics(sched, path, k=1, horizon=1)
    assert m["recall_at_k"] == pytest.approx(33 / 99) and m["event_coverage"] == pytest.approx(33 / 99)
    assert m["precision_at_k"] == pytest.approx(33 / 99) and m["events_scored"] == 99


def test_perfect_predictions(tmp_path):
    pages = np.arange(100)
    path = write_trace(tmp_path / "t.parquet", pages)
    trig = np.arange(99)
    sched = Schedule(trig, trig, np.zeros(99, np.int32), trig + 1, np.ones(99, np.float32))
    m = ranking_metrics(sched, path, k=1, horizon=1)
    assert m["precision_at_k"] == m["recall_at_k"] == m["map"] == m["micro_f1"] == 1.0
