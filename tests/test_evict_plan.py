"""The pager's plan-guided eviction (native/policy/pc_evict_plan.h): keep pages never leave,
a streamed chunk's pages leave once the program moved two chunks past it, CLOCK for the
rest. The C step runs on fixed streams (tests/evict_plan_driver.c) against a Python
reference of the rule written here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from pagecast.util.native import build

ROOT = Path(__file__).resolve().parents[1]
OTHER, KEEP, STREAM = 0, 1, 2


def reference(pages: list[int], cap: int, cp: int, cls: list[int]) -> list[tuple[str, int]]:
    frames: list[int | None] = []
    free: list[int] = []
    where: dict[int, int] = {}
    ref: dict[int, bool] = {}
    hand, hist, out = 0, [-1, -1], []
    for p in pages:
        c = p // cp
        if c != hist[0]:
            passed = hist[1] if c != hist[1] else -1
            hist = [c, hist[0]]
            for q in range(passed * cp, min((passed + 1) * cp, len(cls))) if passed >= 0 else ():
                if cls[q] == STREAM and q in where:
                    out.append(("a", q))
                    frames[where[q]] = None
                    free.append(where.pop(q))
        if p in where:
            ref[p] = True
            continue
        h = None
        if len(frames) < cap:
            frames.append(None)
            h = len(frames) - 1
        while h is None and free:
            f = free.pop()
            h = f if frames[f] is None else None
        while h is None:
            i, hand = hand, (hand + 1) % cap
            v = frames[i]
            if v is None:
                h = i
            elif cls[v] == KEEP:
                continue
            elif ref[v] and cls[v] != STREAM:
                ref[v] = False
            else:
                out.append(("v", v))
                del where[v]
                h = i
        frames[h] = p
        where[p] = h
        ref[p] = True
    return out


def c_victims(pages: list[int], cap: int, cp: int, cls: list[int]) -> list[tuple[str, int]]:
    drv = build("evict_plan_driver", [ROOT / "tests/evict_plan_driver.c"], shared=False)
    res = subprocess.run([str(drv), str(cap), str(cp), "".join(map(str, cls))], input="".join(f"{p}\n" for p in pages),
                         capture_output=True, text=True, check=True)  # fmt: skip
    return [(k, int(v)) for k, v in (line.split() for line in res.stdout.splitlines())]


def _stream(seed: int, npages: int, n: int = 4000) -> list[int]:
    """Cyclic scans, a hot set, runs and noise over chunks of every class."""
    rng = np.random.default_rng(seed)
    parts = []
    while sum(map(len, parts)) < n:
        k = int(rng.integers(4))
        if k == 0:
            parts.append(np.arange(npages))
        elif k == 1:
            parts.append(rng.integers(0, 12, 40))
        elif k == 2:
            a = int(rng.integers(0, npages - 60))
            parts.append(np.arange(a, a + 60))
        else:
            parts.append(rng.integers(0, npages, 40))
    return np.concatenate(parts)[:n].tolist()


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("cap", [24, 64])
def test_c_step_evicts_what_the_reference_evicts(seed: int, cap: int) -> None:
    cp, npages = 8, 240
    rng = np.random.default_rng(seed)
    chunk_cls = rng.choice([OTHER, KEEP, STREAM], npages // cp, p=[0.3, 0.1, 0.6])
    cls = np.repeat(chunk_cls, cp)
    keep = np.flatnonzero(cls == KEEP)
    cls[keep[cap // 2 :]] = OTHER  # the keep set leaves room to stream, as the pager's keep_max does
    cls = cls.tolist()
    pages = _stream(seed, npages)
    want = reference(pages, cap, cp, cls)
    assert sum(k == "a" for k, _ in want) > 50 and sum(k == "v" for k, _ in want) > 50
    assert c_victims(pages, cap, cp, cls) == want
    assert not any(cls[v] == KEEP for _, v in want)  # a keep page never leaves


def test_cyclic_scan_reads_the_keep_set_once_and_the_rest_once_a_pass() -> None:
    cp, nchunks, keep_chunks, cap, passes = 16, 20, 8, 8 * 16 + 40, 5
    npages = cp * nchunks
    cls = [KEEP] * (keep_chunks * cp) + [STREAM] * ((nchunks - keep_chunks) * cp)
    pages = list(range(npages)) * passes
    out = c_victims(pages, cap, cp, cls)
    evicted = [v for _, v in out]
    assert not any(v < keep_chunks * cp for v in evicted)
    # every streamed page leaves once a pass (the last pass keeps its last chunks)
    assert len(evicted) >= (passes - 1) * (npages - keep_chunks * cp)
    assert all(k == "a" for k, _ in out)  # all of them after use: the sweep never had to choose
