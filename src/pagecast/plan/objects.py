"""The objects a program reads whole, learned from its recordings: their size and alignment.

Many programs read a file as fixed-size objects, each read whole once it is touched: the
experts of a mixture-of-experts model, a table's rows or pages, the records of a file
format. Every recording shows it: the pages a run used form runs of consecutive pages
whose lengths are multiples of one size (two neighbouring objects read make one longer
run), starting at one offset modulo that size. ``learn_layout`` finds that size and
offset over all the recordings of a file, and says how much of the used pages it covers;
``object_pages`` expands pages to the whole objects they fall in, so a plan can warm the
objects that recur across runs whole (pages of an object no recording happened to touch
included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

MIN_PAGES = 2  # an object of one page is a page: nothing to learn
MIN_OBJECTS = 4  # object-aligned runs needed across the recordings before a size is believed
MIN_COVERAGE = 0.8  # share of the used pages the layout must explain
MAX_SIZES = 64  # run lengths tried as the object size, smallest first


@dataclass(frozen=True)
class ObjectLayout:
    """Objects of ``pages`` pages starting at pages ``align`` + k * ``pages``; ``coverage``:
    the share of the recordings' used pages lying in whole objects of this layout;
    ``objects``: how many whole objects the recordings read (over all runs)."""

    pages: int
    align: int
    coverage: float
    objects: int

    def describe(self) -> str:
        return (
            f"objects of {self.pages} pages ({self.pages * 4} KiB) at page {self.align} + k x {self.pages}, "
            f"read whole: {self.objects} reads cover {self.coverage:.0%} of the recorded pages"
        )


def page_runs(pages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of the maximal runs of consecutive pages in sorted unique ``pages``."""
    if len(pages) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    breaks = np.nonzero(np.diff(pages) != 1)[0] + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(pages)]])
    return pages[starts].astype(np.int64), (ends - starts).astype(np.int64)


def learn_layout(runs: Sequence[np.ndarray]) -> ObjectLayout | None:
    """The object layout the recordings (``runs``: sorted unique used pages of one file per
    run) show, or None. The size is the smallest run length of at least ``MIN_PAGES`` (merged
    neighbours are multiples of it) that explains the runs, the offset the most common start
    modulo it: runs of whole aligned objects must hold at least ``MIN_COVERAGE`` of the used
    pages, and there must be ``MIN_OBJECTS`` of them."""
    parts = [page_runs(np.asarray(r, np.int64)) for r in runs if len(r)]
    if not parts:
        return None
    starts = np.concatenate([s for s, _ in parts])
    lengths = np.concatenate([n for _, n in parts])
    total = int(lengths.sum())
    long = lengths >= MIN_PAGES
    if not long.any():
        return None
    for size in np.unique(lengths[long])[:MAX_SIZES]:  # the smallest size that explains the runs
        size = int(size)
        offsets, count = np.unique(starts[long] % size, return_counts=True)
        align = int(offsets[np.argmax(count)])
        whole = ((starts - align) % size == 0) & (lengths % size == 0)
        covered = int(lengths[whole].sum())
        nobjects = int((lengths[whole] // size).sum())
        if nobjects >= MIN_OBJECTS and covered >= MIN_COVERAGE * total:
            return ObjectLayout(size, align, covered / total, nobjects)
    return None


def object_pages(pages: np.ndarray, layout: ObjectLayout, file_pages: int) -> np.ndarray:
    """Every page of the objects ``pages`` fall in (sorted unique, inside the file)."""
    if len(pages) == 0:
        return np.empty(0, np.int64)
    p = np.asarray(pages, np.int64)
    first = np.unique((p - layout.align) // layout.pages)
    base = layout.align + first * layout.pages
    out = (base[:, None] + np.arange(layout.pages)[None, :]).ravel()
    return np.unique(out[(out >= 0) & (out < file_pages)])
