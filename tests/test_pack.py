"""Page packs: a learned cold start streamed into the userfaultfd pager.

Truths used: the bytes of the source file (pack contents compared page by page), the C
checksum (called through ctypes) against the Python one, the sparse-weights program's own
result line (its checksum depends on every row it read: identical = the right bytes were
served), and the pager's own counters (faults served from the file, pages the loader
mapped). All runs are real programs under the LD_PRELOAD shim on real userfaultfd faults.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import pytest

from pagecast.bench import sparse_weights as wl
from pagecast.cli import main as cli_main
from pagecast.errors import PagecastError
from pagecast.live.sources import schedule_from_trace
from pagecast.pager.pack import BLOCK_PAGES, build_pack, pack_sum, pages_from_schedule, read_pack, usable_packs
from pagecast.pager.runtime import _lib, run_pager
from pagecast.trace import Kind, open_trace
from uffd_support import needs_uffd

SMALL = ["--hot", "96", "--pool", "128", "--tail", "2", "--ctx", "8"]  # ~1.2k pages of a 32 MiB file


pytestmark = needs_uffd


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    return wl.ensure_weights(tmp_path_factory.mktemp("pack") / "w.bin", size_mib=32)


def _argv(w: Path, prompt: int = 1) -> list[str]:
    return wl.WorkloadConfig(w, prompt=prompt, tokens=2, advice="random", extra=SMALL).argv()


def _run(w: Path, packs=(), trace=None, prompt: int = 1, **kw):
    wl.drop_cache(w)
    for p in packs:
        wl.drop_cache(p)
    r, wfd = os.pipe()
    er, ew = os.pipe()
    res = run_pager(
        _argv(w, prompt), [(str(w), w.stat().st_size)], packs=packs, trace_out=trace, stdout=wfd, stderr=ew, **kw
    )
    os.close(wfd)
    os.close(ew)
    with os.fdopen(r) as f:
        out = f.read()
    with os.fdopen(er) as f:
        err = f.read()
    assert res.returncode == 0, err
    assert len(res.stats) == 1
    return res.stats[0], wl.parse_result(out), err


def _same(a: dict, b: dict) -> bool:
    """The program's result line without its timings: rows read, bytes, checksum."""
    t = {"ttft_s", "wall_s", "tokens_per_s"}
    return {k: v for k, v in a.items() if k not in t} == {k: v for k, v in b.items() if k not in t} and "checksum" in a


@pytest.fixture(scope="module")
def recorded(weights, tmp_path_factory):
    """Run 1 under the pager without a pack: its trace, counters and result."""
    d = tmp_path_factory.mktemp("rec")
    st, out, _ = _run(weights, trace=d / "run1.parquet")
    pages = pages_from_schedule(schedule_from_trace(str(d / "run1.parquet")), weights)
    return d / "run1.parquet", st, out, pages


def test_checksum_matches_c_and_pack_holds_the_source_pages(tmp_path):
    rng = np.random.default_rng(3)
    src = tmp_path / "src.bin"
    data = rng.integers(0, 256, 300 * 4096 + 1000, dtype=np.uint8)  # partial last page
    src.write_bytes(data.tobytes())
    words = rng.integers(0, 2**63, 5000, dtype=np.int64).view(np.uint64)
    lib = _lib()
    lib.pgr_pack_sum.restype = ctypes.c_uint64
    lib.pgr_pack_sum.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    assert pack_sum(words) == lib.pgr_pack_sum(words.ctypes.data, len(words))
    order = np.array([7, 3, 300, 3, 250, 0, 299, 400, 7], np.int64)  # duplicates and a page past the end
    info = build_pack(src, order, tmp_path / "p.pack")
    assert info.pages.tolist() == [7, 3, 300, 250, 0, 299]
    raw = np.frombuffer((tmp_path / "p.pack").read_bytes(), np.uint8)
    padded = np.concatenate([data, np.zeros(301 * 4096 - len(data), np.uint8)])
    for i, p in enumerate(info.pages):
        got = raw[info.data_offset + i * 4096 : info.data_offset + (i + 1) * 4096]
        assert np.array_equal(got, padded[p * 4096 : (p + 1) * 4096]), p
    assert read_pack(tmp_path / "p.pack").stale_reason() is None


def test_pack_from_one_run_serves_the_next_with_fewer_faults(weights, recorded, tmp_path):
    _, st1, out1, pages = recorded
    assert st1["faults"] == len(pages)  # run 1: every page it used was a fault
    info = build_pack(weights, pages, tmp_path / "w.pack")
    st2, out2, err = _run(weights, packs=[info.path])
    assert _same(out2, out1)  # same rows, same arithmetic: the same JSON line
    assert st2["pack_state"] == 2 and "pack" not in err
    assert st2["pack_pages"] == len(pages)
    assert st2["pack_installed"] + st2["pack_skipped"] == len(pages)
    assert st2["faults"] < st1["faults"] / 4, (st2["faults"], st1["faults"])
    assert st2["pack_bytes_read"] >= len(pages) * 4096
    # another prompt: pages the pack lacks are faulted in from the file, output still exact
    _, want, _ = _run(weights, prompt=5)
    st3, got, _ = _run(weights, packs=[info.path], prompt=5)
    assert _same(got, want) and st3["faults"] > 0 and st3["pack_state"] == 2


def test_stale_pack_is_refused_with_a_warning_and_the_run_works(weights, recorded, tmp_path, capfd):
    _, _, _, pages = recorded
    src = tmp_path / "copy.bin"
    src.write_bytes(weights.read_bytes())
    info = build_pack(src, pages, tmp_path / "c.pack")
    with open(src, "r+b") as f:  # change one weight the program reads
        f.seek(int(pages[len(pages) // 2]) * 4096 + 16)
        f.write(b"\x7f\x7f\x7f\x3f")
    msgs: list[str] = []
    assert usable_packs([info.path], warn=msgs.append) == [] and "stale" in msgs[0] and str(info.path) in msgs[0]
    _, want, _ = _run(src)
    st, got, err = _run(src, packs=[info.path])  # the shim checks too, even if Python did not
    assert _same(got, want) and st["pack_state"] == 0 and st["pack_installed"] == 0
    lines = [x for x in err.splitlines() if "stale" in x]
    assert len(lines) == 1 and str(info.path) in lines[0]
    capfd.readouterr()
    rc = cli_main(["run", "--pack", str(info.path), "--", *_argv(src)])
    cap = capfd.readouterr()
    assert rc == 0 and wl.parse_result(cap.out)["checksum"] == want["checksum"]
    assert "stale" in cap.err


def test_truncated_or_malformed_pack_one_line_error(weights, recorded, tmp_path, capfd):
    _, _, _, pages = recorded
    good = build_pack(weights, pages, tmp_path / "g.pack")
    blob = good.path.read_bytes()
    cases = {"trunc.pack": blob[: len(blob) - 100], "short.pack": blob[:100], "index.pack": bytearray(blob)}
    cases["index.pack"][4096 + 8] ^= 0xFF  # a page number in the index
    for name, content in cases.items():
        p = tmp_path / name
        p.write_bytes(bytes(content))
        with pytest.raises(PagecastError, match=str(p)):
            read_pack(p)
        capfd.readouterr()
        assert cli_main(["run", "--pack", str(p), "--", "true"]) == 2
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(p) in err[0], err
        # handed to the shim directly, it is refused with one line and the program runs unpacked
        st, out, e = _run(weights, packs=[p])
        assert st["pack_state"] == 0 and out["checksum"] == recorded[2]["checksum"]
        assert len([x for x in e.splitlines() if str(p) in x]) == 1


def test_loader_stopping_midrun_hands_over_to_the_pager(weights, recorded, tmp_path):
    _, _, out1, pages = recorded
    info = build_pack(weights, pages, tmp_path / "w.pack")
    # the loader dies after 100 pages (test hook): the rest fault in from the file
    st, out, err = _run(weights, packs=[info.path], pack_stop_after=100)
    assert _same(out, out1) and st["pack_state"] == 3 and st["pack_installed"] == 100
    assert st["faults"] >= len(pages) - 100 - st["pack_skipped"] - st["pack_deferred"]
    assert "stopped early" in err
    # a corrupted data block: the loader stops before mapping any of its pages
    blob = bytearray(info.path.read_bytes())
    blob[info.data_offset + 2 * BLOCK_PAGES * 4096 + 123] ^= 0x55
    bad = tmp_path / "bad.pack"
    bad.write_bytes(bytes(blob))
    st, out, err = _run(weights, packs=[bad], trace=tmp_path / "bad.parquet")
    assert _same(out, out1) and st["pack_state"] == 3
    assert "checksum" in err and str(bad) in err
    t = open_trace(tmp_path / "bad.parquet").read(["kind", "page"])
    mapped = set(t["page"][t["kind"] == int(Kind.PREFETCH)].tolist())
    # (with four threads the one that finds the bad block may stop the others before they
    # map anything: how many pages came before is a race; the one-thread run below is exact)
    assert len(mapped) == st["pack_installed"]
    assert not mapped & set(info.pages[2 * BLOCK_PAGES : 3 * BLOCK_PAGES].tolist())  # none of the bad block
    # one loader thread: it stops at the bad block, so at most the two blocks before it were mapped
    st, out, _ = _run(weights, packs=[bad], env=dict(os.environ, PAGECAST_PAGER_PACK_THREADS="1"))
    assert _same(out, out1) and st["pack_state"] == 3
    assert 0 < st["pack_installed"] + st["pack_skipped"] <= 2 * BLOCK_PAGES


def test_pager_pack_cli_builds_from_a_trace(weights, recorded, tmp_path, capfd):
    trace, _, _, pages = recorded
    out = tmp_path / "cli.pack"
    assert cli_main(["pager", "pack", str(trace), "-o", str(out), "--json"]) == 0
    info = read_pack(out)
    assert Path(info.source) == weights.resolve() and info.pages.tolist() == pages.tolist()
    # one run cannot give pages touched by two
    assert cli_main(["pager", "pack", str(trace), "-o", str(tmp_path / "x.pack"), "--min-runs", "2"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--min-runs must be between 1 and the number of runs (1)" in err[0]
    assert not (tmp_path / "x.pack").exists()


def test_pack_larger_than_the_budget_stops_at_the_budget(weights, recorded, tmp_path):
    _, _, out1, pages = recorded
    info = build_pack(weights, pages, tmp_path / "w.pack")
    wl.drop_cache(weights)
    r, wfd = os.pipe()
    er, ew = os.pipe()
    res = run_pager(_argv(weights), [(str(weights), 300 * 4096)], packs=[info.path], stdout=wfd, stderr=ew)
    os.close(wfd)
    os.close(ew)
    out, err = os.fdopen(r).read(), os.fdopen(er).read()
    st = res.stats[0]
    assert res.returncode == 0 and _same(wl.parse_result(out), out1)
    # the loader never evicts: it maps at most the budget, then the pager pages as usual
    assert st["pack_state"] == 3 and 0 < st["pack_installed"] <= 300 and st["max_resident"] <= 300
    assert "budget full" in err and st["evictions"] > 0
