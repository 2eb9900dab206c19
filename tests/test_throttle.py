"""Feedback-directed throttling of per-fault prefetchers (live/throttle.py)."""

from __future__ import annotations

import numpy as np

from pagecast.live.sources import Predictions
from pagecast.live.throttle import Throttle, ThrottleConfig, rank_within_cause
from pagecast.trace.schema import Kind

MAJOR, MINOR = int(Kind.FAULT_MAJOR), int(Kind.FAULT_MINOR)


def _pred(cause, page):
    cause = np.asarray(cause, np.int64)
    return Predictions(cause, np.zeros(len(cause), np.int32), np.asarray(page, np.int64))


def test_rank_within_cause_matches_a_loop():
    rng = np.random.default_rng(0)
    cause = np.sort(rng.integers(0, 30, 500))
    want, last, k = [], None, 0
    for c in cause.tolist():
        k = k + 1 if c == last else 0
        want.append(k)
        last = c
    assert rank_within_cause(cause).tolist() == want
    assert rank_within_cause(np.empty(0, np.int64)).tolist() == []


def test_limit_keeps_the_first_predictions_of_each_fault_in_order():
    th = Throttle(ThrottleConfig(interval=10**9))
    th.degree = 2
    out = th.limit(_pred([0, 0, 0, 3, 5, 5, 5, 5], [10, 11, 12, 30, 50, 51, 52, 53]))
    assert out.cause.tolist() == [0, 0, 3, 5, 5] and out.page.tolist() == [10, 11, 30, 50, 51]
    assert th.dropped == 3 and th.issued == 5


def _feed(th: Throttle, rounds: int, used: bool, per_fault: int = 4):
    """Each round: 32 faults, each predicting per_fault new pages; the next round's faults
    touch those pages (minor faults when used) or other pages (never used)."""
    page0 = 0
    for _ in range(rounds):
        pages = np.arange(page0, page0 + 32 * per_fault)
        pred = th.limit(_pred(np.repeat(np.arange(32), per_fault), pages))
        page0 += 32 * per_fault
        touched = pred.page if used else np.arange(10**6 + page0, 10**6 + page0 + 32)
        th.observe(np.zeros(len(touched), np.int32), touched, np.full(len(touched), MINOR if used else MAJOR, np.uint8))


def test_useless_prefetching_is_cut_to_nothing_then_probed_again():
    th = Throttle(ThrottleConfig(interval=64, probe_faults=100))
    _feed(th, 40, used=False, per_fault=16)
    degrees = [w[2] for w in th.windows]
    assert degrees[:5] == [8, 4, 2, 1, 0]  # halving from "all" down to nothing
    assert th.used == 0 and all(w[1] == 0 for w in th.windows)
    # at degree 0 nothing is issued; after probe_faults faults it tries degree 1 again
    assert len(degrees) > 5  # windows kept closing: the probes issued pages (and were cut again)
    th.degree, th._idle_faults = 0, 0
    before = th.issued
    th.observe(np.zeros(99, np.int32), np.arange(99), np.full(99, MAJOR, np.uint8))
    assert th.degree == 0 and th.limit(_pred([0], [1])).page.tolist() == [] and th.issued == before
    th.observe(np.zeros(1, np.int32), np.arange(1), np.full(1, MAJOR, np.uint8))
    assert th.degree == 1


def test_used_prefetching_keeps_every_prediction():
    th = Throttle(ThrottleConfig(interval=64))
    _feed(th, 20, used=True)
    assert th.windows and all(w[1] == 1.0 for w in th.windows)
    assert th.stats()["degree"] == "all" and th.dropped == 0
    assert th.used == th.issued == 20 * 32 * 4


def test_a_window_is_judged_once_the_next_one_is_issued():
    th = Throttle(ThrottleConfig(interval=8))
    th.limit(_pred(np.zeros(8), np.arange(8)))  # window 0 closes; its pages have not been touched yet
    assert th.windows == []
    th.observe(np.zeros(6, np.int32), np.arange(6), np.full(6, MINOR, np.uint8))  # 6 of them used
    th.observe(np.zeros(2, np.int32), np.arange(6, 8), np.full(2, MAJOR, np.uint8))  # 2 late
    th.limit(_pred(np.zeros(8), np.arange(8, 16)))  # window 1 closes: window 0 is judged
    assert th.windows == [(8, 0.75, th.cfg.max_degree)] and th.used == 6 and th.late == 2
    th.limit(_pred(np.zeros(8), np.arange(16, 24)))  # window 1: nothing used -> half of k = 8
    assert th.windows[-1] == (8, 0.0, 4)
