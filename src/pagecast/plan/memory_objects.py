"""Which files of a memory plan the program reads as objects, and how large they are.

Under a memory limit every miss in a mapping reads the kernel's read-around window (the
device's ``read_ahead_kb``, 8 MiB on some disks) around the faulting page, and what that
brings in beside the page pushes out pages the program still needs. A program that reads a
file as objects smaller than that window (the experts of a mixture-of-experts model) loses
most of what each window reads. Its recordings show the objects (``plan.objects``); the live
run then reads each object whole at its first touch and nothing around it (the advice
shim's objects, ``native/advice/advice_shim.c``), and leaves the read-around to the pages
that come back after reclaim, where one request for the window costs less than a fault a page.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.plan.objects import learn_layout
from pagecast.util.device_model import read_ahead_bytes_of

# objects smaller than this are left to the kernel: the shim's first touch of an object is a
# signal, and a file read as objects of a few pages (a database's pages) would take one every
# few pages of a scan
MIN_OBJECT_PAGES = 16


def object_layouts(
    files: np.ndarray, pages: np.ndarray, runs_of: np.ndarray, nruns: int, window: Callable[[int], int]
) -> dict[int, tuple[int, int]]:
    """{file index: (object pages, first page)} for the files whose used pages, per run,
    form whole objects of at least ``MIN_OBJECT_PAGES`` and smaller than the read-around
    window of their device (``window(file index)``, bytes); ``files``/``pages``/``runs_of``:
    every use's file index, page and run number."""
    if len(files) == 0 or nruns > 0xFF:
        return {}
    # one sorted key (file, run, page): pages stay below 2^36 (256 TiB), runs below 2^8
    key = np.unique((files.astype(np.int64) << 44) | (runs_of.astype(np.int64) << 36) | pages.astype(np.int64))
    fkey = key >> 44
    cuts = np.nonzero(np.diff(fkey))[0] + 1
    out: dict[int, tuple[int, int]] = {}
    for part in np.split(key, cuts):
        fi = int(part[0] >> 44)
        run = (part >> 36) & 0xFF
        per_run = [part[run == r] & ((1 << 36) - 1) for r in range(nruns)]
        layout = learn_layout(per_run)
        if layout is not None and MIN_OBJECT_PAGES <= layout.pages and layout.pages * PAGE_SIZE < window(fi):
            out[fi] = (layout.pages, layout.align)
    return out


def plan_object_layouts(runs: Sequence, names: dict[int, str]) -> dict[int, tuple[int, int]]:
    """``object_layouts`` over ``RunStream``s (``pagecast.plan.memory.read_run``), ``names``:
    file index to path."""
    if not runs:
        return {}
    files = np.concatenate([r.file for r in runs])
    pages = np.concatenate([r.page for r in runs])
    runs_of = np.concatenate([np.full(len(r.file), i, np.int64) for i, r in enumerate(runs)])
    return object_layouts(files, pages, runs_of, len(runs), lambda fi: read_ahead_bytes_of(names.get(fi, "")))
