"""Learning eviction from Belady's MIN (in the manner of Hawkeye, Glider and Parrot).

Labels: MIN is played on each training run at a capacity; an access is *friendly* when
MIN keeps its page until the page's next use (that next use is a hit), *averse*
otherwise (MIN evicts it first, or the page is never used again).

What carries from one run of a program to the next is mostly *which* pages MIN keeps: a
loop over a file keeps the same part of the file in every run, an index keeps its inner
pages. Pages are named by their region's identity across runs (``region_hashes``: a
file by its path, an anonymous region by its kind, order and length) and their page
within it, and a **MIN table** keeps, per page and per chunk of 64 pages, the share of
its accesses MIN kept at capacities of 10 %..100 % of the run's distinct pages. Read at
the capacity being played (relative to the training runs' distinct pages), it is the
prior. A small network learns P(friendly) from the prior (page, chunk, whether the
table knows the page) and from what is known at the access: the page's recency, its
stack distance (distinct pages since its last use) and its previous one, both relative
to the capacity, its use count, its previous reuse interval, the delta from the
previous page of its region, whether it writes; and, in-run, what carries across inputs
when the pages MIN keeps differ from run to run (a mixture-of-experts reader routes
each prompt to other experts): the run's progress and the row the page was first seen,
both in units of a training run's length, its chunk's visits so far, the chunk's
recency in units of its own previous revisit interval, its visits decayed per
capacity's worth of rows (an LRFU score), and the share of first uses among recent
rows. The prior of each training run comes from the *other* training runs
(cross-fitting), so the network learns how far a prior from another run can be
trusted, not to copy a label.

Inference is batched ahead of time: ``EvictionModel.scores`` scores every access of a
trace before the simulation and ``keys_from_scores`` turns the score into the key the
simulator's keyed heap evicts by (largest first): the least confident page leaves first
(logit P cut into ``levels`` steps), and among equals the least recently used. With one
level it is Hawkeye's binary rule (averse before friendly); many levels keep the most
confidently friendly pages when the pages predicted friendly do not all fit, where the
binary rule falls back to LRU among them and a loop thrashes.

Only accesses after which some other page is touched are trained on: a page used again
on the very next access is kept by every policy, and the key its access sets is
replaced at once.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
from numba import njit

from pagecast.errors import PagecastError
from pagecast.trace.demand import as_trace, read_demand
from pagecast.trace.regions import row_region_hashes
from pagecast.util.jitcache import configure as _configure_jit_cache

_configure_jit_cache()

EVICTION_FORMAT = "pagecast-eviction-model"
N_BASE = 8  # features of the access (``_features``)
N_ONLINE = 6  # in-run features of the page's object and of the run so far (``_online_features``)
N_FEATURES = N_BASE + N_ONLINE + 3  # + the page's prior, whether the table knows the page, the chunk's prior
NEVER = np.iinfo(np.int64).max // 4
PRIOR_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # capacities of the MIN table
CHUNK_SHIFT = 6  # a chunk: 64 pages of a region
VISIT_GAP = 1 << CHUNK_SHIFT  # rows without the chunk after which its next access starts a new visit
PAGE_BITS = 31  # a stable page key: region hash << PAGE_BITS | page
UNKNOWN = 0.5  # the share of a page the table does not know
TRUST_MARGIN = 0.002  # the model plays only where its replay beat LRU by this share of LRU's faults


@dataclass
class EvictionTrainConfig:
    """How ``train_eviction`` learns (``pagecast train --target eviction``)."""

    capacities: tuple[float, ...] = (0.3, 0.5, 0.6, 0.75, 0.9)  # fractions of each run's distinct pages
    rows_per_case: int = 40_000  # rows sampled per (run, capacity)
    epochs: int = 4
    batch: int = 512
    lr: float = 3e-3
    hidden: int = 32
    levels: int = 64  # steps of P(friendly) in the eviction key (1: Hawkeye's averse-first rule)
    seed: int = 0
    threads: int = 1


@dataclass
class EvictionModelInfo:
    config: EvictionTrainConfig
    train_runs: list[str]
    train_rows: int
    train_accuracy: float
    val_accuracy: float | None = None
    history: list[float] = field(default_factory=list)
    # per training capacity: [fraction, LRU's faults, the model's faults] replayed on the
    # training runs with the cross-fitted prior (``_replay``)
    replay: list[list[float]] = field(default_factory=list)
    run_rows: float = 0.0  # mean rows of the training runs: the unit of the progress features


# --- the stream -----------------------------------------------------------------------
def dense_ids(region: np.ndarray, page: np.ndarray) -> tuple[np.ndarray, int]:
    """Ids 0..n-1 of the (region, page) pairs of a demand stream, and n."""
    key = (region.astype(np.int64) + 1) * (1 << 40) + page.astype(np.int64)
    uniq, ids = np.unique(key, return_inverse=True)
    return ids.astype(np.int64), len(uniq)


@njit(cache=True)
def _prefix(bit: np.ndarray, j: int) -> int:
    """Sum of a Fenwick tree's first ``j`` entries: the live marks among rows before ``j``."""
    total = 0
    while j > 0:
        total += bit[j]
        j -= j & -j
    return total


@njit(cache=True)
def next_uses(ids: np.ndarray, n_ids: int) -> np.ndarray:
    """Row of each row's page's next use (``NEVER`` when none)."""
    out = np.empty(len(ids), np.int64)
    nxt = np.full(n_ids, NEVER, np.int64)
    for i in range(len(ids) - 1, -1, -1):
        s = ids[i]
        out[i] = nxt[s]
        nxt[s] = i
    return out


@njit(cache=True)
def min_hits(ids: np.ndarray, nextuse: np.ndarray, n_ids: int, cap: int) -> np.ndarray:
    """Belady's MIN without prefetch: 1 where a row hits (a lazy max-heap of next uses)."""
    n = len(ids)
    hit = np.zeros(n, np.uint8)
    res = np.zeros(n_ids, np.uint8)
    key = np.zeros(n_ids, np.int64)
    hk = np.empty(2 * n + 2, np.int64)
    hv = np.empty(2 * n + 2, np.int64)
    hn = 0
    nres = 0
    for i in range(n):
        s = ids[i]
        if res[s]:
            hit[i] = 1
        else:
            if nres == cap:
                while True:  # the top entry, if live, is the resident page used farthest ahead
                    v = hv[0]
                    live = res[v] == 1 and key[v] == hk[0]
                    hn -= 1  # pop
                    k0, v0 = hk[hn], hv[hn]
                    j = 0
                    while True:
                        c = 2 * j + 1
                        if c >= hn:
                            break
                        if c + 1 < hn and hk[c + 1] > hk[c]:
                            c += 1
                        if hk[c] <= k0:
                            break
                        hk[j], hv[j] = hk[c], hv[c]
                        j = c
                    if hn > 0:
                        hk[j], hv[j] = k0, v0
                    if live:
                        res[v] = 0
                        break
            else:
                nres += 1
            res[s] = 1
        key[s] = nextuse[i]
        j = hn  # push
        hn += 1
        while j > 0:
            parent = (j - 1) >> 1
            if hk[parent] >= nextuse[i]:
                break
            hk[j], hv[j] = hk[parent], hv[parent]
            j = parent
        hk[j], hv[j] = nextuse[i], s
    return hit


def min_labels(ids: np.ndarray, n_ids: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """(friendly label per row, next use per row): 1 where MIN keeps the page until its next use."""
    nu = next_uses(ids, n_ids)
    hit = min_hits(ids, nu, n_ids, cap)
    lab = np.zeros(len(ids), np.uint8)
    has = nu < len(ids)
    lab[has] = hit[nu[has]]
    return lab, nu


@njit(cache=True)
def _features(ids, region, page, write, n_ids, cap, out):
    """Per row, from the past only: the N_BASE columns of the module docstring."""
    n = len(ids)
    last = np.full(n_ids, -1, np.int64)
    prev_gap = np.full(n_ids, -1, np.int64)
    prev_sd = np.full(n_ids, -1, np.int64)
    count = np.zeros(n_ids, np.int64)
    bit = np.zeros(n + 1, np.int64)  # Fenwick tree over rows: 1 where a page's last use is
    nreg = 1
    for i in range(n):
        nreg = max(nreg, region[i] + 2)
    last_page = np.full(nreg, -1, np.int64)
    have = np.zeros(nreg, np.uint8)
    inv_cap = 1.0 / max(cap, 1)
    for i in range(n):
        s = ids[i]
        l = last[s]
        if l >= 0:
            # distinct pages touched since row l: live marks in (l, i)
            sd = _prefix(bit, i) - _prefix(bit, l + 1)
            j = l + 1
            while j <= n:
                bit[j] -= 1
                j += j & -j
            age = i - l
            out[i, 0] = 0.0
            out[i, 1] = math.log2(1.0 + age) / 20.0
            out[i, 2] = min(sd * inv_cap, 4.0)
        else:
            sd = -1
            out[i, 0] = 1.0
            out[i, 1] = 1.0
            out[i, 2] = 4.0
        out[i, 3] = min(prev_sd[s] * inv_cap, 4.0) if prev_sd[s] >= 0 else 4.0
        count[s] += 1
        out[i, 4] = math.log2(1.0 + count[s]) / 10.0
        out[i, 5] = math.log2(1.0 + prev_gap[s]) / 20.0 if prev_gap[s] >= 0 else 1.0
        r = region[i] + 1
        if have[r]:
            d = page[i] - last_page[r]
            out[i, 6] = (1.0 if d > 0 else -1.0 if d < 0 else 0.0) * math.log2(1.0 + abs(d)) / 20.0
        else:
            out[i, 6] = 0.0
        have[r] = 1
        last_page[r] = page[i]
        out[i, 7] = 1.0 if write[i] else 0.0
        if l >= 0:
            prev_gap[s] = i - l
            prev_sd[s] = sd
        last[s] = i
        j = i + 1
        while j <= n:
            bit[j] += 1
            j += j & -j


@njit(cache=True)
def _online_features(ids, n_ids, cids, n_chunks, cap, scale, out):
    """Per row, from the past only: the run's progress and the page's first sight in run
    lengths (``scale``: a training run's rows), its chunk's visits so far, the chunk's
    recency in units of its own previous revisit interval, its visits decayed with a
    half-life of ``cap`` rows (LRFU), and the share of first uses among recent rows."""
    n = len(ids)
    first = np.full(n_ids, -1, np.int64)
    c_last = np.full(n_chunks, -1, np.int64)
    c_entry = np.full(n_chunks, -1, np.int64)
    c_interval = np.full(n_chunks, -1, np.int64)
    c_visits = np.zeros(n_chunks, np.int64)
    c_freq = np.zeros(n_chunks, np.float64)
    c_freq_t = np.zeros(n_chunks, np.int64)
    half = float(max(cap, 1))
    inv_scale = 1.0 / max(scale, 1.0)
    novel = 0.0  # exponentially weighted share of first uses, time constant cap rows
    alpha = 1.0 / half
    for i in range(n):
        s = ids[i]
        c = cids[i]
        if first[s] < 0:
            first[s] = i
            novel += alpha * (1.0 - novel)
        else:
            novel -= alpha * novel
        out[i, 0] = min(i * inv_scale, 2.0) / 2.0
        out[i, 1] = min(first[s] * inv_scale, 2.0) / 2.0
        if c_last[c] < 0 or i - c_last[c] > VISIT_GAP:  # a new visit of the chunk
            if c_entry[c] >= 0:
                c_interval[c] = i - c_entry[c]
            c_entry[c] = i
            c_visits[c] += 1
            c_freq[c] = c_freq[c] * 2.0 ** (-(i - c_freq_t[c]) / half) + 1.0
            c_freq_t[c] = i
        c_last[c] = i
        out[i, 2] = math.log2(1.0 + c_visits[c]) / 4.0
        if c_interval[c] > 0:
            r = math.log2((i - c_entry[c] + 1.0) / c_interval[c])
            out[i, 3] = max(-4.0, min(4.0, r)) / 4.0
        else:
            out[i, 3] = 1.0
        out[i, 4] = math.log2(1.0 + c_freq[c]) / 4.0
        out[i, 5] = novel


def features(
    d: dict[str, np.ndarray], ids: np.ndarray, n_ids: int, cap: int, scale: float = 0.0, keys=None
) -> np.ndarray:
    out = np.zeros((len(ids), N_BASE + N_ONLINE), np.float32)
    _features(ids, d["region"].astype(np.int64), d["page"].astype(np.int64), d["write"], n_ids, int(cap), out)
    ck = chunk_keys(stable_keys(d) if keys is None else keys)
    _, cids = np.unique(ck, return_inverse=True)
    on = np.empty((len(ids), N_ONLINE), np.float32)
    n_chunks = int(cids.max()) + 1 if len(cids) else 1
    # a model always carries its training runs' length; the run's own only when features are inspected alone
    _online_features(ids, n_ids, cids.astype(np.int64), n_chunks, int(cap), float(scale or len(ids)), on)
    out[:, N_BASE:] = on
    return out


def stable_keys(d: dict[str, np.ndarray]) -> np.ndarray:
    """Per row, the page's name in every run of the program: region identity and page.
    ``d["region_key"]`` (``region_hashes``) when the reader gave it, else the region id."""
    rk = d.get("region_key")
    rk = d["region"].astype(np.int64) if rk is None else np.asarray(rk, np.int64)
    return (rk << PAGE_BITS) | (d["page"].astype(np.int64) & ((1 << PAGE_BITS) - 1))


def chunk_keys(keys: np.ndarray) -> np.ndarray:
    region = keys >> PAGE_BITS
    return (region << PAGE_BITS) | ((keys & ((1 << PAGE_BITS) - 1)) >> CHUNK_SHIFT)


def read_run(path: str | Path) -> dict[str, np.ndarray]:
    """The demand columns of a run with ``region_key`` (what the simulator gives ``ahead``)."""
    t = as_trace(path)
    d = read_demand(t)
    if len(d["t"]) < 2:
        raise PagecastError(f"{path}: fewer than two demand rows, nothing to learn eviction from")
    d["region_key"] = row_region_hashes(t.regions, d["region"])
    return d


# --- the MIN table: which pages MIN kept in the training runs ------------------------
@dataclass
class MinTable:
    """Per stable key (sorted): accesses MIN kept until their next use at each of
    ``PRIOR_GRID``'s capacities, and the accesses counted; ``pages``: distinct pages of a run."""

    keys: np.ndarray
    kept: np.ndarray  # [len(keys), len(PRIOR_GRID)] float32
    count: np.ndarray  # [len(keys)] float32
    pages: float

    @staticmethod
    def merge(tables: Sequence["MinTable"]) -> "MinTable":
        keys = np.unique(np.concatenate([t.keys for t in tables]))
        kept = np.zeros((len(keys), len(PRIOR_GRID)), np.float32)
        count = np.zeros(len(keys), np.float32)
        for t in tables:
            pos = np.searchsorted(keys, t.keys)
            kept[pos] += t.kept
            count[pos] += t.count
        return MinTable(keys, kept, count, float(np.mean([t.pages for t in tables])))

    def share(self, keys: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
        """(share of accesses MIN kept at ``cap`` pages, 1 where the table knows the key);
        unknown keys get ``UNKNOWN``."""
        frac = cap / max(self.pages, 1.0)
        grid = np.asarray(PRIOR_GRID)
        j = int(np.clip(np.searchsorted(grid, frac), 1, len(grid) - 1))
        w = float(np.clip((frac - grid[j - 1]) / (grid[j] - grid[j - 1]), 0.0, 1.0))
        col = (self.kept[:, j - 1] * (1 - w) + self.kept[:, j] * w) / np.maximum(self.count, 1.0)
        if not len(self.keys):
            return np.ones(len(keys), np.float32), np.zeros(len(keys), np.float32)
        pos = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        known = (self.keys[pos] == keys) & (self.count[pos] > 0)
        return np.where(known, col[pos], UNKNOWN).astype(np.float32), known.astype(np.float32)


def _table(keys: np.ndarray, labels: list[np.ndarray], mask: np.ndarray, pages: int) -> MinTable:
    uk, inv = np.unique(keys[mask], return_inverse=True)
    kept = np.stack([np.bincount(inv, weights=y[mask], minlength=len(uk)) for y in labels], 1).astype(np.float32)
    return MinTable(uk, kept, np.bincount(inv, minlength=len(uk)).astype(np.float32), float(pages))


@dataclass
class _Run:
    """One training run: its rows, MIN tables (page, chunk) and labelled rows."""

    d: dict[str, np.ndarray]
    keys: np.ndarray
    ids: np.ndarray
    n_ids: int
    mask: np.ndarray  # rows trained on: the page is not used again on the very next row
    pages: MinTable
    chunks: MinTable


def _load_run(path: str | Path) -> _Run:
    d = read_run(path)
    keys = stable_keys(d)
    ids, n_ids = dense_ids(d["region"], d["page"])
    nu = next_uses(ids, n_ids)
    mask = nu != np.arange(1, len(ids) + 1)
    labels = [min_labels(ids, n_ids, max(1, int(round(n_ids * f))))[0].astype(np.float64) for f in PRIOR_GRID]
    return _Run(
        d, keys, ids, n_ids, mask, _table(keys, labels, mask, n_ids), _table(chunk_keys(keys), labels, mask, n_ids)
    )


def _inputs(d, keys, ids, n_ids, cap, pages: MinTable, chunks: MinTable, scale: float = 0.0) -> np.ndarray:
    x = np.empty((len(ids), N_FEATURES), np.float32)
    nb = N_BASE + N_ONLINE
    x[:, :nb] = features(d, ids, n_ids, cap, scale, keys)
    x[:, nb], x[:, nb + 1] = pages.share(keys, cap)
    x[:, nb + 2] = chunks.share(chunk_keys(keys), cap)[0]
    return x


def _run_rows(runs: list[_Run]) -> float:
    return float(np.mean([len(r.ids) for r in runs]))


def _cases(runs: list[_Run], cfg: EvictionTrainConfig, rng: np.random.Generator):
    """Sampled (inputs, MIN label) of each run at each training capacity, the prior taken
    from the other runs (from the run itself when it is the only one)."""
    xs, ys = [], []
    for k, r in enumerate(runs):
        others = [o for j, o in enumerate(runs) if j != k] or [r]
        pages = MinTable.merge([o.pages for o in others])
        chunks = MinTable.merge([o.chunks for o in others])
        for frac in cfg.capacities:
            cap = max(1, int(round(r.n_ids * frac)))
            y = min_labels(r.ids, r.n_ids, cap)[0]
            keep = np.flatnonzero(r.mask)
            if len(keep) > cfg.rows_per_case:
                keep = np.sort(rng.choice(keep, cfg.rows_per_case, replace=False))
            x = _inputs(r.d, r.keys, r.ids, r.n_ids, cap, pages, chunks, _run_rows(runs))
            xs.append(x[keep])
            ys.append(y[keep].astype(np.float32))
    return np.concatenate(xs), np.concatenate(ys)


def _scores(net, x: np.ndarray, batch: int = 1 << 16) -> np.ndarray:
    import torch

    p = np.empty(len(x), np.float32)
    with torch.no_grad():
        for k in range(0, len(x), batch):
            p[k : k + batch] = torch.sigmoid(net(torch.from_numpy(x[k : k + batch]))[:, 0]).numpy()
    return p


def _replay(net, runs: list[_Run], cfg: EvictionTrainConfig) -> list[list[float]]:
    """[fraction, LRU's faults, the model's faults] per training capacity, summed over the
    training runs played with the prior of the other runs (as a held-out run gets it):
    where the model is no better than LRU there, it plays LRU (``EvictionModel.scores``).
    The keyed heap of ``min_hits`` plays any keys, so no simulator is needed."""
    out = []
    for frac in cfg.capacities:
        lru = model = 0
        for k, r in enumerate(runs):
            others = [o for j, o in enumerate(runs) if j != k] or [r]
            pages = MinTable.merge([o.pages for o in others])
            chunks = MinTable.merge([o.chunks for o in others])
            cap = max(1, int(round(r.n_ids * frac)))
            p = _scores(net, _inputs(r.d, r.keys, r.ids, r.n_ids, cap, pages, chunks, _run_rows(runs)))
            keys = keys_from_scores(p, 0.5, cfg.levels)
            n = len(r.ids)
            lru += n - int(min_hits(r.ids, -np.arange(n, dtype=np.int64), r.n_ids, cap).sum())
            model += n - int(min_hits(r.ids, keys, r.n_ids, cap).sum())
        out.append([float(frac), float(lru), float(model)])
    return out


# --- the model ------------------------------------------------------------------------
def _net(cfg: EvictionTrainConfig):
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(N_FEATURES, cfg.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(cfg.hidden, cfg.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(cfg.hidden, 1),
    )


def train_eviction(
    runs: Sequence[str | Path],
    out: str | Path | None = None,
    cfg: EvictionTrainConfig | None = None,
    *,
    validate: Sequence[str | Path] = (),
    log=None,
):
    """Train on ``runs``; write the model file to ``out`` (private temporary, renamed)."""
    import torch

    cfg = cfg or EvictionTrainConfig()
    if not runs:
        raise PagecastError("train --target eviction needs at least one trace")
    if cfg.levels < 1:
        raise PagecastError(f"eviction levels must be at least 1, not {cfg.levels}")
    torch.manual_seed(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rng = np.random.default_rng(cfg.seed)
    loaded = [_load_run(r) for r in runs]
    xn, yn = _cases(loaded, cfg, rng)
    x, y = torch.from_numpy(xn), torch.from_numpy(yn)
    net = _net(cfg)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    lossf = torch.nn.BCEWithLogitsLoss()
    history = []
    t0 = time.perf_counter()
    for epoch in range(cfg.epochs):
        perm = torch.randperm(len(y))
        total = 0.0
        for k in range(0, len(y), cfg.batch):
            j = perm[k : k + cfg.batch]
            opt.zero_grad()
            loss = lossf(net(x[j])[:, 0], y[j])
            loss.backward()
            opt.step()
            total += loss.item() * len(j)
        history.append(total / max(len(y), 1))
        if log:
            log(f"epoch {epoch + 1}/{cfg.epochs}: loss {history[-1]:.4f} ({time.perf_counter() - t0:.0f} s)")
    net.eval()
    with torch.no_grad():
        acc = float(((net(x)[:, 0] > 0).float() == y).float().mean())
    pages = MinTable.merge([r.pages for r in loaded])
    chunks = MinTable.merge([r.chunks for r in loaded])
    info = EvictionModelInfo(
        cfg, [str(r) for r in runs], int(len(y)), acc, None, history, _replay(net, loaded, cfg), _run_rows(loaded)
    )
    model = EvictionModel(net, info)
    model.pages, model.chunks = pages, chunks
    if validate:
        model.info.val_accuracy = float(np.mean([model.accuracy(v, f) for v in validate for f in cfg.capacities]))
    if out is not None:
        model.save(out)
    return model


_TABLE_FIELDS = ("keys", "kept", "count")


class EvictionModel:
    """A trained eviction network, the MIN tables of its training runs, and what it was
    trained with."""

    pages: MinTable
    chunks: MinTable

    def __init__(self, net, info: EvictionModelInfo):
        self.net, self.info = net, info

    def save(self, path: str | Path) -> None:
        import torch

        from pagecast.util.atomic import atomic_output

        tables = {
            name: {**{f: torch.from_numpy(getattr(t, f)) for f in _TABLE_FIELDS}, "pages": t.pages}
            for name, t in (("pages", self.pages), ("chunks", self.chunks))
        }
        blob = {
            "format": EVICTION_FORMAT,
            "version": 3,
            "state": self.net.state_dict(),
            "tables": tables,
            "info": {**asdict(self.info), "config": asdict(self.info.config)},
        }
        with atomic_output(path) as tmp:
            torch.save(blob, tmp)

    @classmethod
    def load(cls, path: str | Path) -> "EvictionModel":
        import torch

        try:
            blob = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise PagecastError(f"{path}: no such model file") from None
        except Exception as e:
            raise PagecastError(f"{path}: not a model file ({type(e).__name__})") from None
        if not isinstance(blob, dict) or blob.get("format") != EVICTION_FORMAT:
            raise PagecastError(f"{path}: not an eviction model (train one with pagecast train --target eviction)")
        if blob.get("version") != 3:
            raise PagecastError(f"{path}: an eviction model of an older version: train it again")
        info = dict(blob["info"])
        c = dict(info.pop("config"))
        c["capacities"] = tuple(c["capacities"])
        cfg = EvictionTrainConfig(**c)
        net = _net(cfg)
        net.load_state_dict(blob["state"])
        net.eval()
        model = cls(net, EvictionModelInfo(cfg, **info))
        for name in ("pages", "chunks"):
            t = blob["tables"][name]
            setattr(model, name, MinTable(*(t[f].numpy() for f in _TABLE_FIELDS), float(t["pages"])))
        return model

    def scores(self, d: dict[str, np.ndarray], cap: int) -> np.ndarray:
        """P(friendly) of every demand row, batched (the whole run before it is simulated);
        1 everywhere (LRU's order) at a capacity where the model lost to LRU on its
        training runs."""
        if not self.trusted(cap):
            return np.ones(len(d["page"]), np.float32)
        ids, n_ids = dense_ids(d["region"], d["page"])
        x = _inputs(d, stable_keys(d), ids, n_ids, cap, self.pages, self.chunks, self.info.run_rows)
        return _scores(self.net, x)

    def trusted(self, cap: int) -> bool:
        """Whether the model beat LRU on its training runs at the training capacity
        nearest to ``cap`` (relative to the training runs' distinct pages) by more than
        ``TRUST_MARGIN`` of LRU's faults: a smaller gain there is a page or two of an
        in-sample replay, and on another run the model's other choices can cost more."""
        if not self.info.replay:
            return True
        frac = cap / max(self.pages.pages, 1.0)
        _, lru, model = min(self.info.replay, key=lambda r: abs(r[0] - frac))
        return model < lru * (1.0 - TRUST_MARGIN)

    def prior(self, d: dict[str, np.ndarray], cap: int) -> np.ndarray:
        """The MIN table's share for every demand row alone (the network left out)."""
        return self.pages.share(stable_keys(d), cap)[0]

    def accuracy(self, path: str | Path, frac: float) -> float:
        """Share of a run's labelled rows whose MIN label the model predicts at ``frac``."""
        c = self.confusion(read_run(path), frac)
        return float(np.trace(c) / max(c.sum(), 1))

    def confusion(self, d: dict[str, np.ndarray], frac: float) -> np.ndarray:
        """[[averse predicted averse, averse predicted friendly], [friendly .., friendly ..]]
        over a run's labelled rows at ``frac`` of its distinct pages (P >= 0.5: friendly)."""
        ids, n_ids = dense_ids(d["region"], d["page"])
        cap = max(1, int(round(n_ids * frac)))
        y, nu = min_labels(ids, n_ids, cap)
        mask = nu != np.arange(1, len(ids) + 1)
        x = _inputs(d, stable_keys(d), ids, n_ids, cap, self.pages, self.chunks, self.info.run_rows)
        pred = _scores(self.net, x)[mask] >= 0.5  # the network's, trusted or not
        lab = y[mask].astype(bool)
        return np.array([[np.sum(~lab & ~pred), np.sum(~lab & pred)], [np.sum(lab & ~pred), np.sum(lab & pred)]])


LEVEL = 1 << 48  # above every row number: a less confident level leaves before a more confident one
AVERSE = LEVEL


LOGIT_SPAN = 8.0  # steps cover logit(P) in [-8, 8]: a network's confident calls stay apart


def keys_from_scores(p: np.ndarray, threshold: float = 0.5, levels: int = 1) -> np.ndarray:
    """Eviction keys (largest leaves first): with one level, ``AVERSE`` for P(friendly) <
    threshold; with more, logit(P) in [-8, 8] cut into ``levels`` equal steps, the lowest
    step leaving first (on the logit scale, P = 0.99 and 0.999 are steps apart: pages
    called friendly with near certainty still have an order when they do not all fit);
    among equals the least recently used (minus the row)."""
    rows = np.arange(len(p), dtype=np.int64)
    if levels <= 1:
        lev = (p < threshold).astype(np.int64)
    else:
        q = np.clip(p.astype(np.float64), 1e-6, 1 - 1e-6)
        logit = np.log(q) - np.log1p(-q)
        lev = np.floor((LOGIT_SPAN - logit) * levels / (2 * LOGIT_SPAN))
        lev = np.clip(lev, 0, levels - 1).astype(np.int64)
    return lev * LEVEL - rows


# --- the non-learned baseline: a training run's reuse distances ----------------------
@njit(cache=True)
def stack_distances(ids: np.ndarray, n_ids: int) -> np.ndarray:
    """Per row: distinct other pages touched since the page's previous use (-1: first use)."""
    n = len(ids)
    out = np.full(n, -1, np.int64)
    last = np.full(n_ids, -1, np.int64)
    bit = np.zeros(n + 1, np.int64)
    for i in range(n):
        s = ids[i]
        l = last[s]
        if l >= 0:
            sd = _prefix(bit, i) - _prefix(bit, l + 1)
            out[i] = sd
            j = l + 1
            while j <= n:
                bit[j] -= 1
                j += j & -j
        last[s] = i
        j = i + 1
        while j <= n:
            bit[j] += 1
            j += j & -j
    return out


def reuse_table(path: str | Path) -> tuple[np.ndarray, np.ndarray, int]:
    """(sorted (region, page) keys, each page's median reuse distance in one training run,
    the run's distinct pages). A reuse distance is the number of distinct other pages
    touched between two uses (uses on consecutive rows left out: every policy keeps those);
    a page the run never reused has ``NEVER``."""
    d = read_demand(as_trace(path))
    key = (d["region"].astype(np.int64) + 1) * (1 << 40) + d["page"].astype(np.int64)
    ids, n_ids = dense_ids(d["region"], d["page"])
    sd = stack_distances(ids, n_ids)
    has = sd > 0
    dist, gid = sd[has], ids[has]
    med = np.full(n_ids, NEVER, np.int64)
    if len(dist):
        order = np.lexsort((dist, gid))
        d_sorted, id_sorted = dist[order], gid[order]
        starts = np.flatnonzero(np.r_[True, id_sorted[1:] != id_sorted[:-1]])
        ends = np.r_[starts[1:], len(id_sorted)]
        med[id_sorted[starts]] = d_sorted[(starts + ends - 1) // 2]
    return np.unique(key), med, n_ids


def reuse_keys(d: dict[str, np.ndarray], table: tuple[np.ndarray, np.ndarray, int], cap: int) -> np.ndarray:
    """Keys of the learned eviction's form with the prediction taken from the table: a
    page is friendly when its median reuse distance in the training run fits in the
    capacity; a page the run did not see counts as friendly (plain LRU order)."""
    uniq, med, _ = table
    key = (d["region"].astype(np.int64) + 1) * (1 << 40) + d["page"].astype(np.int64)
    p = np.ones(len(key), np.float32)
    if len(uniq):
        pos = np.minimum(np.searchsorted(uniq, key), len(uniq) - 1)
        known = uniq[pos] == key
        p[known & (med[pos] >= cap)] = 0.0
    return keys_from_scores(p)
