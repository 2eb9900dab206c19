"""The learned eviction (learn/eviction.py, policies/evict_learned.py): trained on MIN's
decisions in some runs, it plays another run; and the commands that train and use it."""

import subprocess
import sys
from collections import OrderedDict

import numpy as np
import pytest

from pagecast.errors import PagecastError
from pagecast.learn.eviction import EvictionTrainConfig, dense_ids, min_hits, next_uses, train_eviction
from pagecast.sim import SimConfig, simulate
from pagecast.trace.regions import Region
from sim_helpers import ref_belady, ref_lru, write_trace


def _run(seed: int, blocks: int = 300) -> list[int]:
    """A hot set of 20 pages, each back every 30 accesses, between pages of a scan used
    twice 90 accesses apart: at a capacity of 25 LRU lets the scan push the hot set out,
    MIN keeps the hot set. The hot order differs per run."""
    rng = np.random.default_rng(seed)
    hot = rng.permutation(20)
    out: list[int] = []
    for k in range(blocks):
        out += [int(hot[(4 * k + j) % 20]) for j in range(4)]
        out += [1000 + k, 1000 + k - 15] if k >= 15 else [1000 + k, 5000 + k]
    return out


def test_min_labels_count_what_belady_counts():
    pages = _run(0)[:3000]
    ids, n = dense_ids(np.zeros(len(pages), np.int64), np.asarray(pages))
    hits = min_hits(ids, next_uses(ids, n), n, 20)
    assert len(pages) - int(hits.sum()) == ref_belady(pages, 20)


def test_learned_eviction_beats_lru_on_a_held_out_run(tmp_path):
    runs = [write_trace(tmp_path / f"r{k}.parquet", _run(k)) for k in range(3)]
    model = tmp_path / "ev.pt"
    cfg = EvictionTrainConfig(capacities=(0.05, 0.1), rows_per_case=4000, epochs=4)
    train_eviction(runs[:2], model, cfg)
    cap = 25
    faults = {
        ev: simulate(runs[2], SimConfig(capacity=cap, eviction=ev)).faults
        for ev in ("lru", "min", f"learned:model={model}")
    }
    learned = faults[f"learned:model={model}"]
    assert faults["min"] <= learned < faults["lru"]
    assert learned - faults["min"] < faults["lru"] - learned  # closer to MIN than to LRU


def _moe_faults(seed: int, tokens: int = 40) -> list[int]:
    """The page faults of a mixture-of-experts reader behind a page cache: 4 layers of 8
    experts of 16 pages, 2 experts read whole per layer and token, routed by a bias every
    run shares and a preference of the run's own; the reads pass an LRU page cache of
    160 pages and only its misses are recorded, as a recording under a memory limit
    holds only the faults. Which experts fault again differs from run to run."""
    layers, experts, pages, k, cached = 4, 8, 16, 2, 160
    prior = np.random.default_rng(0).dirichlet(np.full(experts, 0.4), layers)
    rng = np.random.default_rng(seed)
    pref = rng.dirichlet(np.full(experts, 0.4), layers)
    cache: OrderedDict = OrderedDict()
    out: list[int] = []
    for _ in range(tokens):
        for layer in range(layers):
            for e in rng.choice(experts, k, replace=False, p=0.5 * prior[layer] + 0.5 * pref[layer]):
                for j in range(pages):
                    page = (layer * experts + int(e)) * pages + j
                    if page in cache:
                        cache.move_to_end(page)
                        continue
                    out.append(page)
                    cache[page] = True
                    if len(cache) > cached:
                        cache.popitem(last=False)
    return out


def test_in_run_features_close_the_gap_on_a_mixture_of_experts_reader(tmp_path):
    # held-out run: other experts fault again than in training, so the MIN table is no help;
    # what carries is in-run (progress, first sight, the chunk's visits and LRFU score).
    # Without those features the model equalled LRU at 75 % (gap share 0.00, 0.00, 0.17 on
    # three seeds of this stream); with them 0.32-0.68.
    runs = [write_trace(tmp_path / f"m{s}.parquet", _moe_faults(s)) for s in (1, 2, 3)]
    model = tmp_path / "ev.pt"
    train_eviction(runs[:2], model, EvictionTrainConfig(rows_per_case=4000))
    for frac in ("50%", "75%"):
        f = {
            ev: simulate(runs[2], SimConfig(capacity=frac, eviction=ev)).faults
            for ev in ("lru", "min", f"learned:model={model}")
        }
        learned = f[f"learned:model={model}"]
        assert f["min"] <= learned < f["lru"]
        assert f["lru"] - learned >= 0.25 * (f["lru"] - f["min"]), (frac, f)


def test_train_and_simulate_commands(tmp_path):
    runs = [write_trace(tmp_path / f"r{k}.parquet", _run(k)[:2000]) for k in range(2)]
    model = tmp_path / "ev.pt"
    py = [sys.executable, "-m", "pagecast"]
    r = subprocess.run([*py, "train", "--target", "eviction", *map(str, runs), "-o", str(model), "--epochs", "1",
                        "--eviction-capacities", "0.2,0.4"], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    from pagecast.learn.eviction import EvictionModel

    assert EvictionModel.load(model).info.config.capacities == (0.2, 0.4)
    assert [row[0] for row in EvictionModel.load(model).info.replay] == [0.2, 0.4]
    r = subprocess.run([*py, "train", "--target", "eviction", str(runs[0]), "-o", str(tmp_path / "x.pt"),
                        "--eviction-capacities", "0.2,2"], capture_output=True, text=True)  # fmt: skip
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "--eviction-capacities" in r.stderr
    r = subprocess.run([*py, "simulate", str(runs[1]), "--capacity", "50%", "--eviction", f"learned:model={model}"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "learned" in r.stdout
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a model")
    r = subprocess.run(
        [*py, "simulate", str(runs[1]), "--eviction", f"learned:model={bad}"], capture_output=True, text=True
    )
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "bad.pt" in r.stderr
    with pytest.raises(PagecastError, match="no option"):
        simulate(runs[1], SimConfig(eviction=f"learned:model={model},horizon=3"))


def _loop_run(path, passes: int, swapped: bool, seed: int):
    """A loop over 120 pages of a file with a hot set of 10 heap pages between every 4
    of its pages; at a capacity of 60 LRU faults on every loop page, MIN keeps about half
    the loop. ``swapped``: the heap region gets id 0 and the file id 1 (ids follow the
    order regions appear in; the table must name pages by region identity, not id)."""
    rng = np.random.default_rng(seed)
    hot = rng.permutation(10)
    file_id, heap_id = (1, 0) if swapped else (0, 1)
    regions = sorted(
        [
            Region(file_id, "matrix.bin", kind="file", path="/data/matrix.bin", length=120 * 4096),
            Region(heap_id, "heap", kind="anon", order=0, length=10 * 4096),
        ],
        key=lambda r: r.id,
    )
    reg, page = [], []
    for k in range(passes * 120):
        reg.append(file_id), page.append(k % 120)
        if k % 4 == 3:
            reg.append(heap_id), page.append(int(hot[(k // 4) % 10]))
    write_trace(path, page, regions=regions, region=np.asarray(reg, np.int32))
    return path, [(r != file_id, p) for r, p in zip(reg, page)]


def test_learned_eviction_keeps_part_of_a_loop_across_runs_with_other_region_ids(tmp_path):
    train = [_loop_run(tmp_path / f"r{k}.parquet", 5 + k, False, k)[0] for k in range(2)]
    held, pages = _loop_run(tmp_path / "held.parquet", 6, True, 7)
    model = tmp_path / "ev.pt"
    train_eviction(train, model, EvictionTrainConfig(capacities=(0.4, 0.5, 0.6), rows_per_case=4000, epochs=4))
    cap = 60
    lru, best = ref_lru(pages, cap), ref_belady(pages, cap)
    faults = {
        ev: simulate(held, SimConfig(capacity=cap, eviction=ev)).faults for ev in ("lru", f"learned:model={model}")
    }
    learned = faults[f"learned:model={model}"]
    assert faults["lru"] == lru
    assert best < learned < lru
    assert learned - best < lru - learned  # closer to MIN than to LRU
