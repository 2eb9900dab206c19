"""Differential-tracing estimator and the tiered-placement Gymnasium environment."""

from __future__ import annotations

import json
from collections import defaultdict

import gymnasium
import numpy as np
import pyarrow.parquet as pq
import pytest
from gymnasium.utils.env_checker import check_env

from pagecast.cli import main as cli_main
from pagecast.errors import PagecastError
from pagecast.gym import ENV_ID
from pagecast.gym.baselines import hottest_last, make_random, oracle_next, run_episode, to_action
from pagecast.gym.env import EnvConfig, TieredPlacementEnv
from pagecast.gym.estimator import CostModel, WindowConfig, Windows, load_demand
from pagecast.gym.tracegen import HotsetConfig, write_pair
from pagecast.trace import Kind, Region, TraceWriter

SMALL = HotsetConfig(pages=512, accesses=24_000, phase_accesses=6_000, seed=3)
WIN = WindowConfig("accesses", 1_000)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("gym")
    return tuple(str(p) for p in write_pair(SMALL, d / "h.slow.parquet", d / "h.fast.parquet"))


def _raw(path):
    t = pq.read_table(path)
    return {c: t.column(c).to_numpy() for c in ("t_ns", "region", "page", "kind")}


def _reference_estimate(slow, fast, size, fast_pages):
    """Per-access Python reference of the estimator (independent of the vectorised code)."""
    s, f = _raw(slow), _raw(fast)
    n = len(s["t_ns"])
    total = 0.0
    for start in range(0, n, size):
        end = min(start + size, n)
        last = min(end, n - 1)
        td = float(s["t_ns"][last] - s["t_ns"][start])
        th = float(f["t_ns"][last] - f["t_ns"][start])
        nh = sum(1 for i in range(start, end) if (int(s["region"][i]), int(s["page"][i])) in fast_pages)
        total += td - (td - th) * nh / (end - start)
    return total


def test_all_slow_and_all_fast_are_exact(pair):
    w = Windows.from_pair(*pair, WIN)
    s, f = _raw(pair[0]), _raw(pair[1])
    assert w.matched == "exact"
    assert w.n_windows == SMALL.accesses // 1000
    assert w.estimate(np.zeros(w.n_units, bool)) == float(s["t_ns"][-1] - s["t_ns"][0])
    assert w.estimate(np.ones(w.n_units, bool)) == float(f["t_ns"][-1] - f["t_ns"][0])
    per_w = w.estimate_windows(np.ones(w.n_units, bool))
    assert np.array_equal(per_w, w.t_fast)


def test_mixed_placement_interpolates_like_reference(pair):
    w = Windows.from_pair(*pair, WIN)
    mask = w.mask_page_ranges([(0, 100, 300)])
    fast_pages = {(0, p) for p in range(100, 300)}
    est = w.estimate(mask)
    assert w.all_fast_time < est < w.all_slow_time
    assert est == pytest.approx(_reference_estimate(*pair, 1000, fast_pages), rel=1e-12)
    # more fast pages never make it slower (the hot set only gains)
    assert w.estimate(w.mask_page_ranges([(0, 0, 400)])) <= est


def test_window_counts_match_per_access_reference(pair):
    w = Windows.from_pair(*pair, WIN)
    s = _raw(pair[0])
    ref = defaultdict(int)
    for i in range(len(s["page"])):
        ref[(i // 1000, int(s["region"][i]), int(s["page"][i]))] += 1
    region, page = w.unit_keys >> 40, w.unit_keys & ((1 << 40) - 1)
    got = {(int(wi), int(region[u]) - 1, int(page[u])): int(c) for wi, u, c in zip(w.win, w.unit, w.count)}
    assert got == dict(ref)


def test_address_ranges_and_hottest_fraction(pair):
    w = Windows.from_pair(*pair, WIN)
    base = 0x7F0000000000
    by_addr = w.mask_address_ranges([(base + 100 * 4096 + 5, base + 300 * 4096)])
    assert np.array_equal(by_addr, w.mask_page_ranges([(0, 100, 300)]))
    hot = w.mask_hottest(0.25)
    assert hot.sum() == round(0.25 * w.n_units)
    totals = w.unit_totals()
    assert totals[hot].min() >= totals[~hot].max()
    with pytest.raises(PagecastError):
        w.mask_hottest(1.5)


def test_single_trace_cost_model(pair):
    cost = CostModel(slow_ns=100.0, fast_ns=30.0)
    w = Windows.from_single(pair[0], WIN, cost)
    s = _raw(pair[0])
    span = float(s["t_ns"][-1] - s["t_ns"][0])
    mask = w.mask_page_ranges([(0, 0, 256)])
    n_fast = int(np.isin(s["page"], np.arange(256)).sum())
    n = len(s["page"])
    assert w.estimate(np.zeros(w.n_units, bool)) == pytest.approx(span + n * 100.0, rel=1e-12)
    assert w.estimate(mask) == pytest.approx(span + (n - n_fast) * 100.0 + n_fast * 30.0, rel=1e-12)


def _phase_trace(path, n_phases, rows_per_phase=50, fast=False):
    region = Region(0, "buf", "anon", length=64 * 4096)
    with TraceWriter(path, regions=[region]) as tw:
        t = 0
        for k in range(n_phases):
            tw.write(t_ns=t, kind=int(Kind.KERNEL), ip=k)
            pages = (np.arange(rows_per_phase) + 7 * k) % 64
            step = 10 if fast else 30
            tw.write(t_ns=t + 1 + np.arange(rows_per_phase) * step, region=0, page=pages, kind=int(Kind.FAULT_GPU))
            t += 1 + rows_per_phase * step
    return path


def test_phase_windows_and_mismatch(tmp_path):
    s = _phase_trace(tmp_path / "s.parquet", 5)
    f = _phase_trace(tmp_path / "f.parquet", 5, fast=True)
    w = Windows.from_pair(s, f, WindowConfig("phases"))
    assert w.n_windows == 5 and list(w.n) == [50] * 5
    assert len(load_demand(s).markers) == 5
    assert w.estimate(np.ones(w.n_units, bool)) == float(_raw(f)["t_ns"][-1] - _raw(f)["t_ns"][1])
    bad = _phase_trace(tmp_path / "b.parquet", 4, fast=True)
    with pytest.raises(PagecastError, match="phase windows do not match"):
        Windows.from_pair(s, bad, WindowConfig("phases"))


def test_unequal_streams_match_proportionally(tmp_path, pair):
    short = tmp_path / "short.parquet"
    f = _raw(pair[1])
    with TraceWriter(short, regions=[Region(0, "hotset#0", "anon", length=512 * 4096)]) as tw:
        tw.write(t_ns=f["t_ns"][::2], region=0, page=f["page"][::2])
    w = Windows.from_pair(pair[0], short, WIN)
    assert w.matched == "proportional"
    assert w.estimate(np.ones(w.n_units, bool)) == float(f["t_ns"][::2][-1] - f["t_ns"][0])


# -- environment ------------------------------------------------------------------------


def _env(pair, **kw):
    cfg = EnvConfig(**{"n_chunks": 16, "history": 2, "capacity": 0.25, "window": WIN, **kw})
    return TieredPlacementEnv([pair], cfg, render_mode="ansi")


def test_registered_and_env_checker_passes(pair):
    env = gymnasium.make(ENV_ID, traces=[pair], n_chunks=8, window=WIN)
    check_env(env.unwrapped, skip_render_check=False)
    env2 = gymnasium.make(
        "pagecast.gym:pagecast/TieredPlacement-v0", traces=[pair[0]], n_chunks=8, window=WIN, action_mode="delta"
    )
    check_env(env2.unwrapped)
    obs, _ = env.reset(seed=1)
    assert obs.shape == env.observation_space.shape and obs.dtype == np.float32


def test_reset_seed_is_reproducible(tmp_path, pair):
    env = TieredPlacementEnv([pair, pair[0]], EnvConfig(n_chunks=8, window=WIN))
    picks = [env.reset(seed=s)[1]["trace_index"] for s in range(6)]
    assert picks == [env.reset(seed=s)[1]["trace_index"] for s in range(6)]


def test_reward_ranks_better_placement_higher(pair):
    env = _env(pair, migrate_ns_per_byte=0.0)
    env.reset(seed=0)
    counts = env.next_counts()
    order = np.argsort(counts)
    hot, cold = np.zeros(16, bool), np.zeros(16, bool)
    hot[order[-3:]], cold[order[:3]] = True, True
    _, r_hot, *_ = env.step(hot.astype(np.int8))
    env.reset(seed=0)
    _, r_cold, *_ = env.step(cold.astype(np.int8))
    assert r_hot > r_cold
    # all-fast (capacity permitting) beats all-slow, and the sign is negative time
    env = _env(pair, capacity=1.0)
    res_fast = run_episode(env, lambda e, o: np.ones(e.cfg.n_chunks, bool))
    res_slow = run_episode(env, lambda e, o: np.zeros(e.cfg.n_chunks, bool))
    assert res_fast["reward"] > res_slow["reward"]
    assert res_slow["estimated_ns"] == env.ep.t_slow.sum()
    assert res_slow["reward"] == pytest.approx(-env.ep.t_slow.sum() / env.ep.scale)


def test_migration_cost_counts_only_moved_pages(pair):
    env = _env(pair, migrate_ns_per_byte=0.5)
    env.reset(seed=0)
    a = np.zeros(16, np.int8)
    a[[1, 2]] = 1
    _, _, _, _, i1 = env.step(a)
    pages = env.ep.chunk_pages
    assert i1["pages_moved"] == pages[1] + pages[2]
    assert i1["bytes_moved"] == i1["pages_moved"] * 4096
    assert i1["migration_ns"] == i1["bytes_moved"] * 0.5
    _, _, _, _, i2 = env.step(a)  # same placement: nothing moves
    assert i2["pages_moved"] == 0 and i2["migration_ns"] == 0.0
    b = a.copy()
    b[2], b[5] = 0, 1  # demote 2, promote 5
    _, _, _, _, i3 = env.step(b)
    assert i3["pages_moved"] == pages[2] + pages[5]


def test_capacity_is_enforced(pair):
    env = _env(pair)
    env.reset(seed=0)
    a = np.zeros(16, np.int8)
    a[[9, 10]] = 1
    env.step(a)
    _, _, _, _, info = env.step(np.ones(16, np.int8))
    cap = env.ep.capacity_pages
    assert info["fast_pages"] <= cap and info["rejected"] > 0
    assert env.resident[9] and env.resident[10]  # resident chunks keep their place
    assert env.ep.chunk_pages[env.resident].sum() + env.ep.chunk_pages.max() > cap  # filled, not just trimmed
    obs = env._obs()
    assert obs[-3] == pytest.approx(max(cap - info["fast_pages"], 0) / cap)


def test_delta_actions(pair):
    env = _env(pair, action_mode="delta")
    env.reset(seed=0)
    a = np.zeros(16, np.int64)
    a[3] = 1
    env.step(a)
    assert env.resident[3]
    a[3], a[4] = 2, 1
    env.step(a)
    assert not env.resident[3] and env.resident[4]


def test_observation_keeps_counts(pair):
    env = _env(pair)
    env.reset(seed=0)
    env.step(np.zeros(16, np.int8))
    env.step(np.zeros(16, np.int8))
    obs = env._obs()
    c = env.ep.counts
    expect = np.log1p(np.vstack([c[1], c[0]])) / np.log1p(1000)
    assert np.allclose(obs[:32], expect.ravel(), atol=1e-6)


def test_baselines_order_on_moving_hot_set(pair):
    env = _env(pair)
    res = {
        name: run_episode(env, p)["total_ns"]
        for name, p in {
            "slow": lambda e, o: np.zeros(16, bool),
            "random": make_random(0),
            "hot": hottest_last,
            "oracle": oracle_next,
        }.items()
    }
    assert res["oracle"] < res["hot"] < res["slow"]
    assert res["hot"] < res["random"]


def test_render_mentions_all_three_times(pair):
    env = _env(pair)
    env.reset(seed=0)
    env.step(to_action(env, hottest_last(env, None)))
    text = env.render()
    assert "simulated" in text and "all-slow" in text and "all-fast" in text


# -- CLI --------------------------------------------------------------------------------


def test_cli_estimate_json(pair, capsys):
    assert cli_main(["estimate", *pair, "--window", "1000", "--fraction", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["estimated_ns"] == out["all_fast_ns"]
    assert cli_main(["estimate", *pair, "--window", "1000", "--pages", "0:0-0"]) == 2
    assert "empty page range" in capsys.readouterr().err
    assert cli_main(["estimate", pair[0], "--window", "1000"]) == 2


def test_cli_gym_eval_json(pair, capsys):
    assert cli_main(["gym", "eval", ",".join(pair), "--window", "1000", "--chunks", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    pol = {r["policy"]: r for r in out["mean"]}
    assert pol["oracle-next"]["of_oracle_gain"] == 1.0
    assert pol["all-slow"]["speedup_vs_slow"] == 1.0
    assert cli_main(["gym", "eval", "/nonexistent/x.parquet"]) == 2


@pytest.mark.slow
def test_cli_train_writes_agent_that_eval_loads(pair, tmp_path, capsys):
    """Plumbing only (a few hundred PPO steps): learning is measured by the benchmark run."""
    spec = ",".join(pair)
    agent = tmp_path / "agent"
    assert (
        cli_main(
            [
                "gym",
                "train",
                spec,
                "-o",
                str(agent),
                "--timesteps",
                "256",
                "--n-envs",
                "1",
                "--window",
                "1000",
                "--chunks",
                "8",
            ]
        )
        == 0
    )
    assert (agent / "ppo.zip").exists() and (agent / "config.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".agent.")]  # temp dir renamed away
    capsys.readouterr()
    assert cli_main(["gym", "eval", spec, "--agent", str(agent), "--json", "--policies", "all-slow"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["policy"] for r in out["mean"]} == {"all-slow", "ppo", "all-fast bound"}
    assert cli_main(["gym", "eval", spec, "--agent", str(tmp_path)]) == 2


def test_rows_without_region_use_raw_address_pages(tmp_path):
    """Rows outside any region keep page = address >> 12; --addr ranges still select them."""
    rng = np.random.default_rng(5)
    base = 0x5555_0000_0000 >> 12
    pages = base + rng.integers(0, 64, 5000)
    paths = []
    for name, step in (("s", 100), ("f", 40)):
        with TraceWriter(tmp_path / f"{name}.parquet") as tw:
            tw.write(t_ns=np.arange(5000) * step, region=-1, page=pages)
        paths.append(tmp_path / f"{name}.parquet")
    w = Windows.from_pair(*paths, WindowConfig("accesses", 500))
    assert w.n_units == len(np.unique(pages))
    mask = w.mask_address_ranges([((base + 10) << 12, (base + 20) << 12)])
    assert mask.sum() == len(np.unique(pages[(pages >= base + 10) & (pages < base + 20)]))
    share = np.mean((pages >= base + 10) & (pages < base + 20))
    assert w.estimate(mask) == pytest.approx(w.all_slow_time - (w.all_slow_time - w.all_fast_time) * share, rel=1e-2)


def test_phase_windows_from_kernels_metadata(tmp_path):
    """Phases listed in the kernels metadata (how the MemAI importer stores them)."""
    paths = []
    for name, step in (("s", 30), ("f", 10)):
        with TraceWriter(tmp_path / f"{name}.parquet", regions=[Region(0, "r", "anon", length=1 << 20)]) as tw:
            t = np.arange(300, dtype=np.int64) * step
            tw.write(t_ns=t, region=0, page=np.arange(300) % 17)
            for k, first in enumerate((0, 100, 250)):
                tw.add_kernel(f"phase {k}", int(t[first]), int(t[first]) + 1, phase=k)
        paths.append(tmp_path / f"{name}.parquet")
    w = Windows.from_pair(*paths, WindowConfig("phases"))
    assert list(w.n) == [100, 150, 50]
    assert list(w.t_slow) == [3000.0, 4500.0, 49 * 30.0]
    assert list(w.t_fast) == [1000.0, 1500.0, 49 * 10.0]


def test_generator_hot_set_jumps_and_drifts():
    from pagecast.gym.tracegen import generate_accesses

    cfg = HotsetConfig(
        pages=4096, accesses=20_000, hot_fraction=0.05, hot_share=1.0, phase_accesses=10_000, drift=0.05, seed=2
    )
    page, gaps = generate_accesses(cfg)
    assert len(page) == 20_000 and page.min() >= 0 and page.max() < 4096 and (gaps > 0).all()
    hot = int(0.05 * 4096)
    first, last = page[:500], page[9_500:10_000]
    # within a phase the hot set slides by drift * accesses (mod the region), keeping its width
    shift = (np.median(last) - np.median(first)) % 4096
    assert min(abs(shift - 475), abs(shift - (4096 - 475))) < 40
    assert np.ptp(np.sort((first - first.min()) % 4096)[: int(0.9 * 500)]) <= hot


@pytest.mark.parametrize("spread", [64, 1 << 36])
def test_page_numbering_dense_grid_and_sort_fallback(spread):
    from pagecast.gym.estimator import _touched_pages, page_key

    rng = np.random.default_rng(1)
    region = rng.integers(-1, 3, 20_000)
    page = rng.integers(0, spread, 20_000)
    keys, inverse = _touched_pages(region, page)
    assert np.array_equal(keys, np.unique(page_key(region, page)))
    assert np.array_equal(keys[inverse], page_key(region, page))


def test_gym_gen_writes_pairs_with_the_options_given(tmp_path, capsys):
    """Each option reaches the generator: the traces have the accesses and pages asked for,
    and the drawn sequence is the one HotsetConfig gives with those fields and that seed."""
    argv = ["gym", "gen", str(tmp_path), "--seeds", "3", "--accesses", "3000", "--pages", "128", "--hot-share", "0.5"]
    assert cli_main([*argv, "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert [w["seed"] for w in written] == [3]
    slow = pq.read_table(written[0]["slow"]).to_pydict()
    assert len(slow["page"]) == 3000 and max(slow["page"]) < 128
    ref_slow, _ = write_pair(
        HotsetConfig(pages=128, accesses=3000, hot_share=0.5, seed=3),
        tmp_path / "r.slow.parquet",
        tmp_path / "r.fast.parquet",
    )
    assert slow["page"] == pq.read_table(ref_slow).to_pydict()["page"]
