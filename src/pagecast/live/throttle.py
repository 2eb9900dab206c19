"""Feedback-directed throttling of per-fault prefetchers in the live loop.

A per-fault predictor (markov, the LSTM) names up to k pages per fault. When few of them
are used, the rest are not free: each is a read on the same device as the program's
demand misses, and a disk serves requests in order. On the sparse-weights workload the
LSTM's top-10 issued many times more reads than the program used pages and made it slower
than no prefetching at all (figures in BENCHMARKS.md, "Figures moved out of the code").
So the live loop measures accuracy as it goes and
sets how many predictions per fault it issues (the *degree*), as feedback-directed
prefetching does in hardware (Srinath et al., HPCA 2007):

- a prefetched page is *used* when the program's next fault on it is minor (the page was
  in the page cache, only not mapped yet), *late* when it is major;
- every ``interval`` issued prefetches a window closes; the window before it (whose pages
  have had a window's time to be used) is judged, accuracy = used / issued: below
  ``low`` the degree halves (from "all" to half the predictor's k, at most 8; down to 0:
  nothing issued), above ``high`` it doubles (up to the predictor's own k). The thresholds are the paper's
  accuracy thresholds (0.40 and 0.75): on a device that serves requests one by one a
  useless read costs about what a used one saves, so only accurate prefetching pays;
- at degree 0 there is no signal, so after ``probe_faults`` faults the degree goes back
  to 1 for another window.

Counts are approximate by design (a page used after its window was judged no longer
counts for it; the kernel's fault-around can map a prefetched page without a fault, which
then is never counted used): the estimate errs towards issuing less.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pagecast.live.sources import Predictions
from pagecast.trace.keys import page_keys
from pagecast.trace.schema import Kind

MAX_PENDING = 1 << 16  # prefetched pages remembered while waiting for their fault


@dataclass
class ThrottleConfig:
    interval: int = 256  # prefetches per accuracy window
    low: float = 0.40  # accuracy below this halves the degree
    high: float = 0.75  # above this doubles it
    max_degree: int = 1 << 30  # the predictor's own count (top-k) is the real cap
    probe_faults: int = 2048  # faults at degree 0 before trying degree 1 again


@dataclass
class Throttle:
    cfg: ThrottleConfig = field(default_factory=ThrottleConfig)
    degree: int = field(init=False)  # predictions issued per fault; cfg.max_degree = all of them
    windows: list[tuple[int, float, int]] = field(default_factory=list)  # (issued, accuracy, degree after)

    def __post_init__(self) -> None:
        self.degree = self.cfg.max_degree
        self._keys = np.empty(0, np.int64)  # pages issued, not yet faulted on (sorted) ...
        self._win = np.empty(0, np.int64)  # ... and the window each was issued in
        self._issued: dict[int, int] = {}  # window -> issued in it
        self._used: dict[int, int] = {}  # window -> used so far
        self._cur = 0  # the window being issued
        self._judged = -1  # the last window judged
        self._k = 0  # most predictions one fault has had (degrees above it mean "all")
        self.used = self.late = self.dropped = self.issued = 0
        self._idle_faults = 0

    def observe(self, region: np.ndarray, page: np.ndarray, kind: np.ndarray) -> None:
        """A batch of the program's faults: resolve the prefetched pages among them."""
        if self.degree == 0:
            self._idle_faults += len(page)
            if self._idle_faults >= self.cfg.probe_faults:
                self.degree, self._idle_faults = 1, 0
        if not len(self._keys) or not len(page):
            return
        keys = page_keys(region, page)
        at = np.searchsorted(self._keys, keys)
        at[at == len(self._keys)] = 0
        hit = self._keys[at] == keys
        if not hit.any():
            return
        minor = hit & (kind != int(Kind.FAULT_MAJOR))
        for w, n in zip(*np.unique(self._win[at[minor]], return_counts=True)):
            if int(w) > self._judged:
                self._used[int(w)] = self._used.get(int(w), 0) + int(n)
        self.used += int(np.count_nonzero(minor))
        self.late += int(np.count_nonzero(hit & ~minor))
        gone = np.zeros(len(self._keys), bool)
        gone[at[hit]] = True
        self._keys, self._win = self._keys[~gone], self._win[~gone]

    def limit(self, pred: Predictions) -> Predictions:
        """Keep the first ``degree`` predictions of each causing fault (they come best first)."""
        if not len(pred):
            return pred
        rank = rank_within_cause(pred.cause)
        self._k = max(self._k, int(rank.max()) + 1)
        keep = rank < self.degree
        self.dropped += int(len(pred) - np.count_nonzero(keep))
        out = Predictions(pred.cause[keep], pred.region[keep], pred.page[keep])
        self._note_issued(out)
        return out

    def _note_issued(self, pred: Predictions) -> None:
        if not len(pred):
            return
        self.issued += len(pred)
        self._issued[self._cur] = self._issued.get(self._cur, 0) + len(pred)
        keys = np.concatenate([self._keys, page_keys(pred.region, pred.page)])
        win = np.concatenate([self._win, np.full(len(pred), self._cur, np.int64)])
        order = np.argsort(keys, kind="stable")
        self._keys, self._win = keys[order], win[order]
        if len(self._keys) > MAX_PENDING:  # forget the oldest windows' pages
            keep = self._win >= np.sort(self._win)[len(self._win) - MAX_PENDING]
            self._keys, self._win = self._keys[keep], self._win[keep]
        if self._issued[self._cur] >= self.cfg.interval:
            self._cur += 1
            if self._cur >= 2:  # judge the window before the one just closed: its pages had time to be used
                self._decide(self._cur - 2)

    def _decide(self, w: int) -> None:
        issued, used = self._issued.pop(w, 0), self._used.pop(w, 0)
        self._judged = w
        acc = used / issued if issued else 0.0
        if acc < self.cfg.low:
            # from "all": half the most one fault has had, at most 8; then halve on
            self.degree = min(8, self._k // 2) if self.degree >= self.cfg.max_degree else self.degree // 2
        elif acc > self.cfg.high and self.degree < self.cfg.max_degree:
            self.degree = max(self.degree * 2, 1)
            if self.degree >= self._k:
                self.degree = self.cfg.max_degree
        self.windows.append((issued, round(acc, 3), self.degree))
        self._idle_faults = 0

    def stats(self) -> dict:
        return {
            "degree": self.degree if self.degree < self.cfg.max_degree else "all",
            "issued": self.issued,
            "dropped": self.dropped,
            "used": self.used,
            "late": self.late,
            "windows": len(self.windows),
            "accuracy_by_window": [w[1] for w in self.windows[:64]],
        }


def rank_within_cause(cause: np.ndarray) -> np.ndarray:
    """0, 1, 2... within each run of equal ``cause`` values (predictions are grouped by cause)."""
    n = len(cause)
    if not n:
        return np.empty(0, np.int64)
    start = np.ones(n, bool)
    start[1:] = cause[1:] != cause[:-1]
    first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    return np.arange(n) - first
