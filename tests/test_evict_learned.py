"""The learned eviction (learn/eviction.py, policies/evict_learned.py): trained on MIN's
decisions in some runs, it plays another run; and the commands that train and use it."""

import subprocess
import sys

import numpy as np
import pytest

from pagecast.errors import PagecastError
from pagecast.learn.eviction import EvictionTrainConfig, dense_ids, min_hits, next_uses, train_eviction
from pagecast.sim import SimConfig, simulate
from sim_helpers import ref_belady, write_trace


def _run(seed: int) -> list[int]:
    """A loop over 30 pages (larger than the capacity: LRU thrashes, MIN keeps a part),
    a hot set, and pages used once, in a different mix per run."""
    rng = np.random.default_rng(seed)
    out: list[int] = []
    for _ in range(60):
        out += list(range(30))
        out += rng.choice([200, 201, 202], 5).tolist()
        out += (1000 + rng.integers(0, 5000, 4)).tolist()
    return out


def test_min_labels_count_what_belady_counts():
    pages = _run(0)[:3000]
    ids, n = dense_ids(np.zeros(len(pages), np.int64), np.asarray(pages))
    hits = min_hits(ids, next_uses(ids, n), n, 20)
    assert len(pages) - int(hits.sum()) == ref_belady(pages, 20)


def test_learned_eviction_beats_lru_on_a_held_out_run(tmp_path):
    runs = [write_trace(tmp_path / f"r{k}.parquet", _run(k)) for k in range(3)]
    model = tmp_path / "ev.pt"
    cfg = EvictionTrainConfig(capacities=(0.3, 0.5), rows_per_case=4000, epochs=4)
    train_eviction(runs[:2], model, cfg)
    cap = 25
    faults = {
        ev: simulate(runs[2], SimConfig(capacity=cap, eviction=ev)).faults
        for ev in ("lru", "min", f"learned:model={model}")
    }
    learned = faults[f"learned:model={model}"]
    assert faults["min"] <= learned < faults["lru"]
    assert learned - faults["min"] < faults["lru"] - learned  # closer to MIN than to LRU


def test_train_and_simulate_commands(tmp_path):
    runs = [write_trace(tmp_path / f"r{k}.parquet", _run(k)[:2000]) for k in range(2)]
    model = tmp_path / "ev.pt"
    py = [sys.executable, "-m", "pagecast"]
    r = subprocess.run([*py, "train", "--target", "eviction", *map(str, runs), "-o", str(model), "--epochs", "1"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert model.exists()
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
