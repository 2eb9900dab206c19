"""Learning eviction from Belady's MIN (in the manner of Hawkeye, Glider and Parrot).

Labels: MIN is played on each training run at a capacity; an access is *friendly* when
MIN keeps its page until the page's next use (that next use is a hit), *averse*
otherwise (MIN evicts it first, or the page is never used again). A small network learns
P(friendly) from what is known at the access — the page's recency, its stack distance
(distinct pages since its last use) and its previous one, both relative to the
capacity, its use count, its previous reuse interval, the delta from the previous page
of its region, whether it writes — and from the region-relative page itself (a hashed
embedding, as the prefetchers' page table keys pages by region and page), so what one
run taught about a page applies to the next run of the program.

Inference is batched ahead of time: ``EvictionModel.scores`` scores every access of a
trace before the simulation and ``keys_from_scores`` turns the score into the key the
simulator's keyed heap evicts by (largest first): a page predicted averse (P(friendly)
below ``threshold``) leaves before every page predicted friendly, and among equals the
least recently used leaves first — Hawkeye's rule. The loss is plain cross-entropy, so
P is calibrated: a page is called averse only when the network is confident, since
evicting a page MIN would keep costs a fault and keeping an averse one only delays LRU.

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
from pagecast.util.jitcache import configure as _configure_jit_cache

_configure_jit_cache()

EVICTION_FORMAT = "pagecast-eviction-model"
N_FEATURES = 8
NEVER = np.iinfo(np.int64).max // 4


@dataclass
class EvictionTrainConfig:
    """How ``train_eviction`` learns (``pagecast train --target eviction``)."""

    capacities: tuple[float, ...] = (0.3, 0.5, 0.6, 0.75, 0.9)  # fractions of each run's distinct pages
    rows_per_case: int = 40_000  # rows sampled per (run, capacity)
    epochs: int = 4
    batch: int = 512
    lr: float = 3e-3
    hidden: int = 64
    buckets: int = 1 << 15  # hashed (region, page) embedding rows
    embed: int = 8
    threshold: float = 0.5  # P(friendly) below it: predicted averse
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
    """Per row, from the past only: the N_FEATURES columns of the module docstring."""
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


def features(d: dict[str, np.ndarray], ids: np.ndarray, n_ids: int, cap: int) -> np.ndarray:
    out = np.empty((len(ids), N_FEATURES), np.float32)
    _features(ids, d["region"].astype(np.int64), d["page"].astype(np.int64), d["write"], n_ids, int(cap), out)
    return out


def page_buckets(region: np.ndarray, page: np.ndarray, buckets: int) -> np.ndarray:
    """Hashed (region, page): the row of the page's embedding."""
    h = (region.astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15) ^ page.astype(np.uint64) * np.uint64(
        0xBF58476D1CE4E5B9
    )
    return ((h >> np.uint64(17)) % np.uint64(buckets)).astype(np.int64)


# --- the model ------------------------------------------------------------------------
def _net(cfg: EvictionTrainConfig):
    import torch

    class EvictionNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(cfg.buckets, cfg.embed)
            self.mlp = torch.nn.Sequential(
                torch.nn.Linear(N_FEATURES + cfg.embed, cfg.hidden),
                torch.nn.ReLU(),
                torch.nn.Linear(cfg.hidden, cfg.hidden),
                torch.nn.ReLU(),
                torch.nn.Linear(cfg.hidden, 2),
            )

        def forward(self, x, b):
            """(logit of P(friendly), log2 of the rows to the page's next use / GAP_SCALE)."""
            out = self.mlp(torch.cat([x, self.emb(b)], 1))
            return out[:, 0], out[:, 1]

    return EvictionNet()


GAP_SCALE = 32.0  # log2 of a next-use distance in rows, divided by this (targets in 0..1)


@dataclass
class _Case:
    x: np.ndarray
    b: np.ndarray
    y: np.ndarray
    gap: np.ndarray  # log2(rows to the next use) / GAP_SCALE; never used again: twice the run


def _cases(path: str | Path, cfg: EvictionTrainConfig, rng: np.random.Generator) -> list[_Case]:
    """Sampled (features, page bucket, MIN label) of one run at each training capacity."""
    d = read_demand(as_trace(path))
    if len(d["t"]) < 2:
        raise PagecastError(f"{path}: fewer than two demand rows, nothing to learn eviction from")
    ids, n_ids = dense_ids(d["region"], d["page"])
    buckets = page_buckets(d["region"], d["page"], cfg.buckets)
    out = []
    for frac in cfg.capacities:
        cap = max(1, int(round(n_ids * frac)))
        y, nu = min_labels(ids, n_ids, cap)
        keep = np.flatnonzero(nu != np.arange(1, len(ids) + 1))  # not used again on the very next row
        if len(keep) > cfg.rows_per_case:
            keep = np.sort(rng.choice(keep, cfg.rows_per_case, replace=False))
        x = features(d, ids, n_ids, cap)
        rows = np.arange(len(ids), dtype=np.int64)
        gap = np.where(nu < len(ids), nu - rows, 2 * len(ids)).astype(np.float64)
        lg = (np.log2(gap[keep]) / GAP_SCALE).astype(np.float32)
        out.append(_Case(x[keep], buckets[keep], y[keep].astype(np.float32), lg))
    return out


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
    torch.manual_seed(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rng = np.random.default_rng(cfg.seed)
    cases = [c for r in runs for c in _cases(r, cfg, rng)]
    x = torch.from_numpy(np.concatenate([c.x for c in cases]))
    b = torch.from_numpy(np.concatenate([c.b for c in cases]))
    y = torch.from_numpy(np.concatenate([c.y for c in cases]))
    gap = torch.from_numpy(np.concatenate([c.gap for c in cases]))
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
            logit, lg = net(x[j], b[j])
            loss = lossf(logit, y[j]) + 10.0 * torch.nn.functional.mse_loss(lg, gap[j])
            loss.backward()
            opt.step()
            total += loss.item() * len(j)
        history.append(total / max(len(y), 1))
        if log:
            log(f"epoch {epoch + 1}/{cfg.epochs}: loss {history[-1]:.4f} ({time.perf_counter() - t0:.0f} s)")
    net.eval()
    with torch.no_grad():
        acc = float(((net(x, b)[0] > 0).float() == y).float().mean())
    val = None
    if validate:
        vc = [c for r in validate for c in _cases(r, cfg, rng)]
        with torch.no_grad():
            vx = torch.from_numpy(np.concatenate([c.x for c in vc]))
            vb = torch.from_numpy(np.concatenate([c.b for c in vc]))
            vy = torch.from_numpy(np.concatenate([c.y for c in vc]))
            val = float(((net(vx, vb)[0] > 0).float() == vy).float().mean())
    info = EvictionModelInfo(cfg, [str(r) for r in runs], int(len(y)), acc, val, history)
    model = EvictionModel(net, info)
    if out is not None:
        model.save(out)
    return model


class EvictionModel:
    """A trained eviction network and what it was trained with."""

    def __init__(self, net, info: EvictionModelInfo):
        self.net, self.info = net, info

    def save(self, path: str | Path) -> None:
        import torch

        from pagecast.util.atomic import atomic_output

        blob = {
            "format": EVICTION_FORMAT,
            "version": 1,
            "state": self.net.state_dict(),
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
        info = dict(blob["info"])
        c = dict(info.pop("config"))
        c["capacities"] = tuple(c["capacities"])
        cfg = EvictionTrainConfig(**c)
        net = _net(cfg)
        net.load_state_dict(blob["state"])
        net.eval()
        return cls(net, EvictionModelInfo(cfg, **info))

    def scores(self, d: dict[str, np.ndarray], cap: int, batch: int = 1 << 16) -> tuple[np.ndarray, np.ndarray]:
        """(P(friendly), predicted rows to the next use) of every demand row, batched (the
        whole run before it is simulated)."""
        import torch

        ids, n_ids = dense_ids(d["region"], d["page"])
        x = features(d, ids, n_ids, cap)
        b = page_buckets(d["region"], d["page"], self.info.config.buckets)
        p = np.empty(len(ids), np.float32)
        lg = np.empty(len(ids), np.float32)
        with torch.no_grad():
            for k in range(0, len(ids), batch):
                logit, g = self.net(torch.from_numpy(x[k : k + batch]), torch.from_numpy(b[k : k + batch]))
                p[k : k + batch] = torch.sigmoid(logit).numpy()
                lg[k : k + batch] = g.numpy()
        return p, np.exp2(np.clip(lg, 0.0, 1.5) * GAP_SCALE)


AVERSE = 1 << 48  # above every row number: averse pages leave before friendly ones


def keys_from_scores(p: np.ndarray, threshold: float = 0.5, gap: np.ndarray | None = None) -> np.ndarray:
    """Eviction keys (largest leaves first): ``AVERSE`` for P(friendly) < threshold, plus
    the predicted row of the next use (row + predicted gap; without ``gap``, minus the
    row: least recently used first)."""
    rows = np.arange(len(p), dtype=np.int64)
    base = -rows if gap is None else rows + np.minimum(gap, AVERSE // 4).astype(np.int64)
    return np.where(p < threshold, AVERSE, 0).astype(np.int64) + base


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
