"""A learned per-event gate over prefetchers: the model and the classic ones as experts.

A learned model wins where a program's pages recur from run to run and loses to Linux's
read-around where "the next page" is all there is to know (an allocator's anonymous
memory, a file read once). The gate does not pick one prefetcher per program: at every
event it asks each expert what it would prefetch, estimates how much of it will be used,
and issues the pages of the expert with the best estimate, or nothing — in the spirit of
prefetcher orchestration (Pythia, Bera et al., MICRO 2021) and bandit-based selection of
prefetchers.

* **Experts** (``default_experts``): every classic prefetcher (``nextline`` read-around,
  a short forward ``nextline``, ``stride``, ``markov``, ``bestoffset``, ``leap``,
  ``extent``, the page-successor table filled from a training run) and the model's
  schedule. Each sees every event shown (a fault trace's faults, an access trace's misses
  of an LRU tier) as a miss, so its state does not depend on what the gate chose.
* **Label**: the *precision* of what the gate would issue for an expert at event i — the
  share of its first L pages that the next ``horizon`` shown events demand. Labels over
  all the pages an expert names misjudge it when L cuts them (a successor table's chain
  of eight pages against the model's one page, in a tier where L = 1 was chosen).
* **Features** (causal, and none names a page, so they carry across runs and programs):
  per expert, its recent precision (predictions whose horizon has passed, over the last
  ``window`` events) and recent coverage (share of the last ``window`` demanded pages it
  had named within the horizon before), how many pages it names now; per event, the
  region kind (file / anonymous / other), the fault kind (access, minor, major, other),
  write, same region as the previous event, the region-relative delta (log-magnitude
  and sign) and the offset within the region (share of its length); and the expert's
  *measured* precision on this run at the label's horizon (its predictions old enough to
  be judged). Anonymous memory
  gets region-relative offsets and deltas rather than addresses: allocations move
  between runs, their shape does not.
* **Model**: a small MLP over (features, expert one-hot) → precision logit, trained by
  weighted binary cross entropy (weight: pages named) on several runs.
* **Decision**: score_e = min(pages_e, L) · (p̃_e − τ) with p̃_e = (1 − α)·p̂_e + α·measured_e
  (the MLP, fitted on other programs, pulled towards what the expert does on this one);
  the best expert's first L pages are issued when its score is positive. τ
  (``GateModel.threshold``), L, a share of the tier's capacity (``GateModel.budget``: a
  tier of 40 pages is flushed by a 31-page read-around) and α (``GateModel.online``) are
  chosen per capacity by cross-fitting on runs of other programs (``sim/gate_fit.py``).

The gate's output is a ``Schedule`` (``gate_schedule``), so it runs in the simulator's
compiled loop (``simulate``, ``pagecast eval --gate``); the live loop and the pager do not
run it (the experts would have to run beside the model in the predictor process).
``GateResult.choices`` counts the events given to each expert.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
from numba import njit

from pagecast.errors import PagecastError
from pagecast.policies._numba import NumbaPrefetcher, region_pages
from pagecast.policies.spec import parse_policy_spec
from pagecast.trace.demand import as_trace, read_demand_columns
from pagecast.trace.reader import Trace
from pagecast.trace.schedule import Schedule
from pagecast.trace.schema import FLAG_WRITE, Kind

# classic experts (the spec grammar of ``pagecast.policies.spec``); pagesucc is added with
# its training run, the model with its schedule
CLASSIC_EXPERTS = (
    "nextline",
    "nextline:window=5,before=0",
    "stride",
    "markov",
    "bestoffset",
    "leap",
    "extent",
)
MODEL = "model"
NONE = "none"
N_EVENT_FEATURES = 13
N_EXPERT_FEATURES = 4
GATE_FORMAT = "pagecast-gate"
GATE_VERSION = 2  # 2: labels and features over the first L pages; the label-horizon precision feature


@dataclass
class GateConfig:
    horizon: int = 16  # features: a page named at i counts as used if one of the next H shown events demands it
    window: int = 64  # recent accuracy over the last W events
    hidden: int = 16
    steps: int = 150  # full-batch Adam steps
    lr: float = 0.03
    seed: int = 0
    max_rows: int = 120_000  # (event, expert) rows a fit samples at most


def label_horizon(capacity_pages: int) -> int:
    """Events within which a prefetched page must be demanded to count as useful: about
    as long as an LRU tier of that many pages keeps a page that prefetching made newest
    (half: prefetches fill it too)."""
    return max(16, int(capacity_pages) // 2)


@dataclass
class Predictions:
    """What every expert names after each shown event: CSR rows ``ptr[i]:ptr[i+1]``."""

    names: list[str]
    ptr: list[np.ndarray]
    region: list[np.ndarray]
    page: list[np.ndarray]


@dataclass
class Stream:
    """The events the experts are shown, with the columns the features need."""

    index: np.ndarray  # position in the trace's demand stream (a schedule's trigger)
    t_ns: np.ndarray
    region: np.ndarray
    page: np.ndarray
    kind: np.ndarray
    flags: np.ndarray
    region_kind: np.ndarray  # per region id: 0 file, 1 anonymous, 2 other; last entry: unknown
    region_len: np.ndarray  # per region id: pages (0 unknown)
    regions: list = field(default_factory=list)


def read_stream(trace: Trace | str | Path, events: np.ndarray | None = None) -> Stream:
    trace = as_trace(trace)
    d = read_demand_columns(trace, ["t_ns", "region", "page", "kind", "flags"])
    idx = np.arange(len(d["page"]), dtype=np.int64) if events is None else np.asarray(events, np.int64)
    rk = np.array(
        [0 if r.kind == "file" else 1 if r.kind in ("anon", "heap", "stack") else 2 for r in trace.regions] + [2]
    )
    return Stream(
        idx,
        d["t_ns"][idx].astype(np.int64),
        d["region"][idx].astype(np.int64),
        d["page"][idx].astype(np.int64),
        d["kind"][idx].astype(np.int64),
        d["flags"][idx].astype(np.int64),
        rk.astype(np.int64),
        region_pages(trace.regions),
        list(trace.regions),
    )


@njit(cache=True)
def _drive(fn, state, params, rpages, t, reg, pg, out_r, out_p, ptr, rr, pp, i0, m0):
    """Run one compiled prefetcher over events i0.. as misses, appending what it names;
    returns (next event, rows used): stops early when ``rr`` is full."""
    m = m0
    for i in range(i0, len(pg)):
        if m + len(out_p) > len(rr):
            return i, m
        n = fn(state, params, rpages, t[i], reg[i], pg[i], False, out_r, out_p)
        for j in range(n):
            rr[m] = out_r[j]
            pp[m] = out_p[j]
            m += 1
        ptr[i + 1] = m
    return len(pg), m


def run_expert(pf: NumbaPrefetcher, s: Stream) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ptr, region, page) of a compiled prefetcher shown every event of ``s`` as a miss."""
    pf.reset(s.regions)
    n = len(s.page)
    ptr = np.zeros(n + 1, np.int64)
    size = max(1024, 4 * n)
    rr, pp = np.zeros(size, np.int64), np.zeros(size, np.int64)
    i, m = 0, 0
    while i < n:
        i, m = _drive(
            type(pf).nb_observe,
            pf._state,
            pf._params,
            pf._rpages,
            s.t_ns,
            s.region,
            s.page,
            pf._out_r,
            pf._out_p,
            ptr,
            rr,
            pp,
            i,
            m,
        )
        if i < n:
            rr, pp = (
                np.concatenate([rr, np.zeros(len(rr), np.int64)]),
                np.concatenate([pp, np.zeros(len(pp), np.int64)]),
            )
    return ptr, rr[:m].copy(), pp[:m].copy()


def schedule_rows(sched: Schedule, s: Stream) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A schedule (the model's) as CSR rows over the shown events (rows at other triggers dropped)."""
    sch = sched.sorted()
    pos = np.searchsorted(s.index, sch.trigger)
    ok = (pos < len(s.index)) & (s.index[np.minimum(pos, len(s.index) - 1)] == sch.trigger)
    pos = pos[ok]
    ptr = np.zeros(len(s.index) + 1, np.int64)
    np.add.at(ptr, pos + 1, 1)
    return np.cumsum(ptr), sch.region[ok].astype(np.int64), sch.page[ok].astype(np.int64)


def expert_predictions(s: Stream, classic: Sequence[str], model: Schedule | None) -> Predictions:
    p = Predictions([], [], [], [])
    for spec in classic:
        pf = parse_policy_spec(spec).build()
        if not isinstance(pf, NumbaPrefetcher):
            raise PagecastError(f"gate expert {spec!r} has no compiled step")
        ptr, r, pg = run_expert(pf, s)
        p.names.append(spec)
        p.ptr.append(ptr), p.region.append(r), p.page.append(pg)
    if model is not None:
        ptr, r, pg = schedule_rows(model, s)
        p.names.append(MODEL)
        p.ptr.append(ptr), p.region.append(r), p.page.append(pg)
    return p


def default_experts(train_run: str | Path | None) -> list[str]:
    """The classic experts, and the page-successor table filled from ``train_run``."""
    out = list(CLASSIC_EXPERTS)
    if train_run is not None:
        out.append(f"pagesucc:train={train_run}")
    return out


def expert_label(spec: str) -> str:
    """A short name for reports: the training run of ``pagesucc:train=...`` is dropped."""
    return "pagesucc(train)" if spec.startswith("pagesucc") else spec


# ---- labels and features -----------------------------------------------------------


def _useful(s: Stream, ptr: np.ndarray, reg: np.ndarray, pg: np.ndarray, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """(useful per named page, next shown event demanding it or -1): a page named at i is
    useful when one of events i+1 .. i+H demands it."""
    n = len(s.page)
    ev_key = (s.region << 40) ^ s.page
    pr_key = (reg << 40) ^ pg
    uniq, inv = np.unique(np.concatenate([ev_key, pr_key]), return_inverse=True)
    ev_id, pr_id = inv[:n], inv[n:]
    order = np.lexsort((np.arange(n), ev_id))
    comb = ev_id[order] * (n + 1) + order
    at = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
    q = np.searchsorted(comb, pr_id * (n + 1) + at, side="right")
    qc = np.minimum(q, n - 1) if n else q
    hit = (q < n) & (ev_id[order][qc] == pr_id) if n else np.zeros(len(pr_id), bool)
    nxt = np.where(hit, order[qc] if n else 0, -1)
    useful = hit & (nxt - at <= horizon)
    return useful, np.where(useful, nxt, -1)


@njit(cache=True)
def _expert_features(ptr, useful, nxt, horizon, window, out):
    """out[i] = (recent precision, recent coverage, log pages now) of one expert, causally."""
    n = len(ptr) - 1
    covered = np.zeros(n, np.int64)
    for j in range(len(nxt)):
        if nxt[j] >= 0:
            covered[nxt[j]] = 1
    done_u = np.zeros(n + 1, np.float64)
    done_c = np.zeros(n + 1, np.float64)
    for i in range(n):
        u = 0
        for j in range(ptr[i], ptr[i + 1]):
            u += useful[j]
        done_u[i + 1] = done_u[i] + u
        done_c[i + 1] = done_c[i] + (ptr[i + 1] - ptr[i])
    cov = np.zeros(n + 1, np.float64)
    for i in range(n):
        cov[i + 1] = cov[i] + covered[i]
    for i in range(n):
        hi = max(0, i - horizon)  # predictions at j < i - H are resolved at i
        lo = max(0, hi - window)
        uu = done_u[hi] - done_u[lo]
        cc = done_c[hi] - done_c[lo]
        out[i, 0] = (uu + 1.0) / (cc + 2.0)
        a = max(0, i - window)
        out[i, 1] = (cov[i] - cov[a]) / max(1, i - a)  # events before i whose page it had named
        out[i, 2] = np.log1p(ptr[i + 1] - ptr[i]) / 4.0


def event_features(s: Stream) -> np.ndarray:
    n = len(s.page)
    f = np.zeros((n, N_EVENT_FEATURES), np.float32)
    rk = s.region_kind[np.where((s.region >= 0) & (s.region < len(s.region_kind) - 1), s.region, -1)]
    f[np.arange(n), rk] = 1  # 0..2: file, anonymous, other
    kind = np.select([s.kind == Kind.ACCESS, s.kind == Kind.FAULT_MINOR, s.kind == Kind.FAULT_MAJOR], [0, 1, 2], 3)
    f[np.arange(n), 3 + kind] = 1  # 3..6: access, minor, major, other
    f[:, 7] = (s.flags & FLAG_WRITE) != 0
    same = np.zeros(n, bool)
    same[1:] = s.region[1:] == s.region[:-1]
    delta = np.zeros(n, np.int64)
    delta[1:] = s.page[1:] - s.page[:-1]
    delta[~same] = 0
    f[:, 8] = same
    f[:, 9] = np.log2(1 + np.abs(delta)) / 16
    f[:, 10] = np.sign(delta)
    rlen = s.region_len[np.where((s.region >= 0) & (s.region < len(s.region_len) - 1), s.region, -1)]
    f[:, 11] = np.where(rlen > 0, s.page / np.maximum(rlen, 1), 0.5)
    f[:, 12] = np.log2(1 + rlen) / 24
    return f


@dataclass
class Table:
    """Per expert: features (n, F) and, where labels are known, precision and pages named."""

    names: list[str]
    ev: np.ndarray
    ex: list[np.ndarray]
    precision: list[np.ndarray]
    pages: list[np.ndarray]


def truncate(p: Predictions, limit: int | None) -> Predictions:
    """Each expert's first ``limit`` pages per event (all: None): what the gate would issue."""
    if limit is None:
        return p
    out = Predictions(list(p.names), [], [], [])
    for ptr, reg, pg in zip(p.ptr, p.region, p.page):
        cnt = np.minimum(np.diff(ptr), limit)
        rank = np.arange(len(pg)) - np.repeat(ptr[:-1], np.diff(ptr))
        keep = rank < limit
        out.ptr.append(np.concatenate([[0], np.cumsum(cnt)]).astype(np.int64))
        out.region.append(reg[keep])
        out.page.append(pg[keep])
    return out


def build_table(
    s: Stream, p: Predictions, cfg: GateConfig, horizon: int | None = None, limit: int | None = None
) -> Table:
    """Features (causal) and labels (precision within ``horizon`` events, ``label_horizon``
    of the capacity; default ``cfg.horizon``) of each expert's first ``limit`` pages per event
    (the pages the gate would issue; all: None)."""
    p = truncate(p, limit)
    ev = event_features(s)
    ex, prec, pages = [], [], []
    lh = cfg.horizon if horizon is None else horizon
    for e in range(len(p.names)):
        useful, nxt = _useful(s, p.ptr[e], p.region[e], p.page[e], cfg.horizon)
        out = np.zeros((len(s.page), N_EXPERT_FEATURES - 1), np.float64)
        _expert_features(p.ptr[e], useful.astype(np.int64), nxt, cfg.horizon, cfg.window, out)
        if lh != cfg.horizon:
            useful, nxt = _useful(s, p.ptr[e], p.region[e], p.page[e], lh)
        # the precision the label measures, as far as it is known at i: predictions made at
        # least the label's horizon ago, over a window at least that long
        late = np.zeros((len(s.page), N_EXPERT_FEATURES - 1), np.float64)
        _expert_features(p.ptr[e], useful.astype(np.int64), nxt, lh, max(cfg.window, lh), late)
        out = np.concatenate([out, late[:, :1]], axis=1)
        cnt = np.diff(p.ptr[e])
        u = (
            np.add.reduceat(useful.astype(np.float64), np.minimum(p.ptr[e][:-1], max(len(useful) - 1, 0)))
            if len(useful)
            else np.zeros(len(cnt))
        )
        u = np.where(cnt > 0, u, 0.0)
        ex.append(out.astype(np.float32))
        prec.append((u / np.maximum(cnt, 1)).astype(np.float32))
        pages.append(cnt.astype(np.float32))
    return Table(list(p.names), ev, ex, prec, pages)


# ---- the gate model -------------------------------------------------------------------


def _inputs(t: Table, e: int, experts: Sequence[str]) -> np.ndarray:
    """Rows of (event features, this expert's features, every expert's recent precision, one-hot)."""
    n = len(t.ev)
    recent = np.zeros((n, len(experts)), np.float32)
    for j, name in enumerate(experts):
        if name in t.names:
            recent[:, j] = t.ex[t.names.index(name)][:, 0]
    hot = np.zeros((n, len(experts)), np.float32)
    hot[:, experts.index(t.names[e])] = 1
    return np.concatenate([t.ev, t.ex[e], recent, hot], axis=1)


@dataclass
class GateModel:
    experts: list[str]  # labels (expert_label), in the order of the one-hot
    state: dict
    threshold: dict[str, float] = field(default_factory=dict)  # per capacity spec ("10%"); "*": any
    # pages issued per event at most, as a share of the tier's capacity, per capacity spec
    budget: dict[str, float] = field(default_factory=dict)
    config: GateConfig = field(default_factory=GateConfig)
    # weight of each expert's measured recent precision against the MLP's estimate, per capacity spec
    online: dict[str, float] = field(default_factory=dict)
    # an MLP per capacity spec (a file of ``pagecast train --target gate``); else ``state`` for all
    states: dict[str, dict] = field(default_factory=dict)

    def for_capacity(self, capacity: str | None) -> "GateModel":
        """The gate of one capacity spec: its MLP, τ, budget and α; a capacity it was not
        fitted for takes the first one it was."""
        fitted = list(self.states) or list(self.threshold)
        key = str(capacity) if str(capacity) in fitted or not fitted else fitted[0]
        state = self.states.get(key, self.state)
        pick = lambda d: {key: d[key]} if key in d else dict(d)  # noqa: E731
        out = GateModel(self.experts, state, pick(self.threshold), pick(self.budget), self.config, pick(self.online))
        for d in (out.threshold, out.budget, out.online):
            if key in d:
                d["*"] = d[key]
        return out

    def net(self):
        import torch

        d = N_EVENT_FEATURES + N_EXPERT_FEATURES + 2 * len(self.experts)
        h = self.config.hidden
        m = torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.ReLU(), torch.nn.Linear(h, 1))
        if self.state:
            m.load_state_dict(self.state)
        return m

    def tau(self, capacity: str | None) -> float:
        return self.threshold.get(str(capacity), self.threshold.get("*", 0.3))

    def alpha(self, capacity: str | None) -> float:
        return self.online.get(str(capacity), self.online.get("*", 0.0))

    def limit(self, capacity: str | None, capacity_pages: int) -> int:
        """Pages per event at most: a share of the tier, so a small tier is not flushed."""
        share = self.budget.get(str(capacity), self.budget.get("*", 1 / 16))
        return max(1, int(round(capacity_pages * share)))

    def scores(self, t: Table) -> np.ndarray:
        """(n, experts of t) estimated precision. numpy, not torch: two small matrix
        products, where torch's threads spin-wait on shared cores (0.8 s against ms)."""
        w1, b1 = (np.asarray(self.state[k], np.float32) for k in ("0.weight", "0.bias"))
        w2, b2 = (np.asarray(self.state[k], np.float32) for k in ("2.weight", "2.bias"))
        out = np.zeros((len(t.ev), len(t.names)), np.float32)
        rt = _relabel(t)
        for e, name in enumerate(rt.names):
            if name not in self.experts:
                continue
            h = np.maximum(_inputs(rt, e, self.experts) @ w1.T + b1, 0)
            out[:, e] = 1 / (1 + np.exp(-(h @ w2.T + b2)[:, 0]))
        return out

    def save(self, path: str | Path) -> None:
        import torch

        from pagecast.util.atomic import atomic_output

        with atomic_output(path) as tmp:
            torch.save(
                {
                    "format": GATE_FORMAT,
                    "version": GATE_VERSION,
                    "experts": list(self.experts),
                    "state": self.state,
                    "threshold": dict(self.threshold),
                    "budget": dict(self.budget),
                    "online": dict(self.online),
                    "states": dict(self.states),
                    "config": dict(self.config.__dict__),
                },
                tmp,
            )


def _relabel(t: Table) -> Table:
    return Table([expert_label(n) for n in t.names], t.ev, t.ex, t.precision, t.pages)


def load_gate(path: str | Path) -> GateModel:
    import torch

    if not Path(path).is_file():
        raise PagecastError(f"{path}: no such gate file")
    try:
        d = torch.load(path, weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file gets one line
        raise PagecastError(f"{path}: not a gate file ({type(e).__name__})") from None
    if not isinstance(d, dict) or d.get("format") != GATE_FORMAT:
        raise PagecastError(f"{path}: not a gate file (made by pagecast's sim.gate.fit_gate)")
    if d.get("version") != GATE_VERSION:
        raise PagecastError(f"{path}: a gate file of an earlier version (its features differ); fit it again")
    return GateModel(
        list(d["experts"]),
        d["state"],
        dict(d["threshold"]),
        dict(d.get("budget", {})),
        GateConfig(**d["config"]),
        dict(d.get("online", {})),
        dict(d.get("states", {})),
    )


def fit_gate(tables: Sequence[Table], cfg: GateConfig | None = None) -> GateModel:
    """Fit the MLP on the (event, expert) rows of several runs' tables."""
    import torch

    cfg = cfg or GateConfig()
    experts: list[str] = []
    for t in tables:
        for n in t.names:
            if expert_label(n) not in experts:
                experts.append(expert_label(n))
    xs, ys, ws = [], [], []
    for t in tables:
        rt = _relabel(t)
        for e in range(len(rt.names)):
            keep = rt.pages[e] > 0
            xs.append(_inputs(rt, e, experts)[keep])
            ys.append(rt.precision[e][keep])
            ws.append(rt.pages[e][keep])
    x, y, w = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
    rng = np.random.default_rng(cfg.seed)
    if len(x) > cfg.max_rows:
        pick = rng.choice(len(x), cfg.max_rows, replace=False)
        x, y, w = x[pick], y[pick], w[pick]
    torch.manual_seed(cfg.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny MLP: a second thread only spin-waits on shared cores
    try:
        return _fit(experts, x, y, w, cfg)
    finally:
        torch.set_num_threads(threads)


def _fit(experts: list[str], x: np.ndarray, y: np.ndarray, w: np.ndarray, cfg: GateConfig) -> GateModel:
    import torch

    gm = GateModel(experts, {}, {}, {}, cfg)
    net = gm.net()
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    wt = torch.from_numpy(w / max(float(w.mean()), 1e-9))
    for _ in range(cfg.steps):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(net(xt)[:, 0], yt, weight=wt)
        loss.backward()
        opt.step()
    gm.state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    return gm


# ---- decisions ------------------------------------------------------------------------


@dataclass
class GateResult:
    schedule: Schedule
    choices: dict[str, int]  # events given to each expert (label), and "none"


def decide(
    gm: GateModel, t: Table, p: Predictions, s: Stream, tau: float, limit: int | None = None, alpha: float = 0.0
) -> GateResult:
    """At each event the expert with the largest pages · (p̃ − τ), if positive; its first
    ``limit`` pages (all: None) are issued. p̃ = (1 − α)·p̂ + α·(its measured precision over
    the last label horizon): the MLP's estimate, pulled towards what the expert is doing on
    this run (where the MLP, fitted on other programs, misjudges an expert)."""
    sc = gm.scores(t)
    if alpha:
        measured = np.stack([x[:, 3] for x in t.ex], axis=1) if t.ex else sc
        sc = (1 - alpha) * sc + alpha * measured
    pages = np.stack(t.pages, axis=1) if t.pages else np.zeros((len(s.page), 0), np.float32)
    if limit is not None:
        pages = np.minimum(pages, limit)
    util = pages * (sc - tau)
    util[pages == 0] = -np.inf
    best = np.argmax(util, axis=1) if util.shape[1] else np.zeros(len(s.page), np.int64)
    on = util[np.arange(len(best)), best] > 0 if util.shape[1] else np.zeros(len(s.page), bool)
    trig, reg, pg, score = [], [], [], []
    choices = {expert_label(n): 0 for n in p.names}
    choices[NONE] = int((~on).sum())
    for e, name in enumerate(p.names):
        ev = np.flatnonzero(on & (best == e))
        choices[expert_label(name)] = len(ev)
        if not len(ev):
            continue
        a, b = p.ptr[e][ev], p.ptr[e][ev + 1]
        cnt = b - a if limit is None else np.minimum(b - a, limit)
        rows = np.repeat(a - np.cumsum(np.concatenate([[0], cnt[:-1]])), cnt) + np.arange(cnt.sum())
        trig.append(np.repeat(s.index[ev], cnt))
        reg.append(p.region[e][rows])
        pg.append(p.page[e][rows])
        rank = np.arange(cnt.sum()) - np.repeat(np.cumsum(np.concatenate([[0], cnt[:-1]])), cnt)
        score.append(1.0 / (1.0 + rank))
    if trig:
        tr = np.concatenate(trig)
        sched = Schedule(
            tr, np.zeros(len(tr), np.int64), np.concatenate(reg), np.concatenate(pg), np.concatenate(score)
        )
    else:
        sched = Schedule.empty()
    sched.regions = s.regions
    sched.meta = {"name": "gate", "source": "pagecast.sim.gate", "choices": choices}
    return GateResult(sched, choices)


def gate_schedule(
    gm: GateModel,
    trace: Trace | str | Path,
    *,
    model_schedule: Schedule | None,
    train_run: str | Path | None = None,
    capacity: str | None = None,
    capacity_pages: int | None = None,
    events: np.ndarray | None = None,
) -> GateResult:
    """The gate's schedule on ``trace`` (experts: the classic ones, pagesucc from
    ``train_run``, the model's schedule) for a tier of ``capacity_pages`` (its spec
    ``capacity`` picks τ and the budget); ``events``: the shown events (an access trace's misses)."""
    gm = gm.for_capacity(capacity)
    s = read_stream(trace, events)
    p = expert_predictions(s, [x for x in default_experts(train_run) if expert_label(x) in gm.experts], model_schedule)
    limit = gm.limit(capacity, capacity_pages) if capacity_pages else None
    t = build_table(s, p, gm.config, label_horizon(capacity_pages) if capacity_pages else None, limit)
    return decide(gm, t, p, s, gm.tau(capacity), limit, gm.alpha(capacity))
