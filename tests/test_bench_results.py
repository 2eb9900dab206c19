"""The benchmark harnesses' one row type and table of medians (pagecast.bench.results)."""

from __future__ import annotations

import pytest

from pagecast.bench.results import KINDS, RunRow, headroom, summarise


def _rows(name: str, kind: str, walls: list[float], **extra) -> list[RunRow]:
    return [RunRow(name, kind, i, w, 2**20 * (i + 1), **extra) for i, w in enumerate(walls)]


def test_table_is_medians_listed_by_kind_with_ratios_to_the_baselines():
    rows = [
        *_rows("warm cache", "warm", [0.5, 0.5, 0.5]),
        *_rows("plan", "pagecast", [2.0, 1.0, 1.5]),
        *_rows("oracle", "oracle", [1.0, 1.0, 1.0]),
        *_rows("kernel: random", "kernel", [4.0, 4.0, 4.0]),
        *_rows("kernel: default", "kernel", [3.0, 2.0, 9.0]),
        *_rows("not listed", "pagecast", [0.1]),
    ]
    # listed in this order within a kind: kernel rows first, then pagecast, oracle, warm
    order = ["plan", "warm cache", "kernel: random", "oracle", "kernel: default", "no runs"]
    out = summarise(rows, order)
    assert [x["strategy"] for x in out] == ["kernel: random", "kernel: default", "plan", "oracle", "warm cache"]
    by = {x["strategy"]: x for x in out}
    d = by["kernel: default"]
    assert (d["runs"], d["wall_s"], d["wall_min_s"], d["wall_max_s"]) == (3, 3.0, 2.0, 9.0)
    assert d["mib_read"] == 2.0  # median of 1, 2, 3 MiB
    assert [x["best_kernel"] for x in out] == [False, True, False, False, False]
    assert by["plan"]["vs_best_kernel"] == pytest.approx(2.0)  # 3.0 / 1.5
    assert by["kernel: random"]["vs_best_kernel"] == pytest.approx(0.75)
    assert by["plan"]["vs_warm"] == pytest.approx(3.0)
    # the oracle is 2 s faster than the best kernel: plan took 1.5 s of it
    assert by["plan"]["headroom_captured"] == pytest.approx(0.75)
    assert by["oracle"]["headroom_captured"] == pytest.approx(1.0)


def test_optional_measures_are_summarised_only_where_every_run_has_them():
    rows = [
        *_rows("a", "kernel", [1.0, 2.0, 3.0], major_faults=7, ttft_s=0.25, cached_bytes=3 * 2**20),
        RunRow("b", "pagecast", 0, 1.0, 0, major_faults=5, prefetched=10),
        RunRow("b", "pagecast", 1, 1.0, 0, major_faults=6),  # this run did not count prefetched pages
    ]
    a, b = summarise(rows, ["a", "b"])
    assert (a["major_faults"], a["ttft_s"], a["mib_cached"]) == (7, 0.25, 3.0)
    assert "prefetched" not in a and "tokens_per_s" not in a
    assert b["major_faults"] == 5 and isinstance(b["major_faults"], int)  # median 5.5, whole faults
    assert "prefetched" not in b and "mib_cached" not in b


def test_no_baseline_no_ratio():
    (x,) = summarise(_rows("plan", "pagecast", [1.0]), ["plan"])
    assert x["vs_best_kernel"] is None and x["vs_warm"] is None and x["headroom_captured"] is None
    assert x["best_kernel"] is False


def test_a_row_of_an_unknown_kind_is_refused():
    assert KINDS == ("kernel", "pagecast", "bound", "oracle", "warm")
    with pytest.raises(ValueError, match="roof"):
        RunRow("x", "roof", 0, 1.0, 0)


def test_headroom_share():
    assert headroom(2.0, 1.5, 1.0) == pytest.approx(0.5)
    assert headroom(2.0, 3.0, 1.0) == pytest.approx(-1.0)  # slower than the best kernel strategy
    assert headroom(1.0, 0.5, 1.2) is None  # the oracle is no faster: no headroom to share
    assert headroom(1.0, 0.9, 0.98) is None  # 2 % faster: within the noise, no share worth quoting
    assert headroom(1.0, 0.98, 0.96) == pytest.approx(0.5)


def test_each_case_has_its_own_baselines():
    # rows under a memory limit against the kernel alone under it, not the unlimited kernel
    rows = [
        *_rows("kernel: default", "kernel", [1.0]),
        *_rows("plan", "pagecast", [0.5]),
        *_rows("kernel: under a limit", "kernel", [4.0], case="limit"),
        *_rows("memory plan", "pagecast", [2.0], case="limit"),
    ]
    by = {x["strategy"]: x for x in summarise(rows, [r.strategy for r in rows])}
    assert by["kernel: default"]["best_kernel"] and by["kernel: under a limit"]["best_kernel"]
    assert by["plan"]["vs_best_kernel"] == 2.0 and by["memory plan"]["vs_best_kernel"] == 2.0
    assert by["memory plan"]["case"] == "limit" and by["plan"]["case"] == ""
