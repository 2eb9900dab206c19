"""The pager's guarantees at the edges (docs/pager.md, "Guarantees and limits"): fork,
mremap, other writers, every terminating signal, malformed binary inputs (plus a seeded
fuzz of tables and packs through the C loader), exit statuses, files the program creates,
budgets and paths the shim cannot encode.

Every case is a real C program (workloads/pager_stress/cases.c) under the LD_PRELOAD shim
on real userfaultfd faults; where the kernel has an answer (a plain MAP_SHARED mapping),
the same program run without the shim is the reference.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pagecast.cli import main as cli_main
from pagecast.errors import PagecastError
from pagecast.pager import runtime as pg
from pagecast.pager.pack import build_pack
from pagecast.util.native import build
from uffd_support import needs_uffd

PS = os.sysconf("SC_PAGESIZE")
ROOT = Path(__file__).resolve().parents[1]


pytestmark = needs_uffd


@pytest.fixture(scope="module")
def cases() -> str:
    return str(build("pager_cases", [ROOT / "workloads/pager_stress/cases.c"], shared=False))


def pattern(npages: int, lo: int, hi: int) -> np.ndarray:
    """The bytes cases.c writes at [lo, hi) of every page."""
    p = np.arange(npages)[:, None]
    o = np.arange(lo, hi)[None, :]
    return ((p * 31 + o * 7 + 1) & 0xFF).astype(np.uint8)


def make_file(path: Path, npages: int, seed: int = 0) -> np.ndarray:
    data = np.random.default_rng(seed).integers(0, 256, (npages, PS), dtype=np.uint8)
    data.tofile(path)
    return data


def shim_env(f: Path, budget_pages: int, policy: str = "none", table: Path | None = None, **kw) -> dict:
    """The shim's environment; ``table``: policy table with this file handed to the shim
    as is (pager_env would refuse a malformed one before the program starts)."""
    kw.setdefault("flush_ms", 0)  # only the path under test writes back
    e = pg.pager_env([(str(f), budget_pages * PS)], policy, base_env=dict(os.environ), **kw)
    if table is not None:
        e["PAGECAST_PAGER_POLICY"] = "table"
        e["PAGECAST_PAGER_TABLE"] = pg.encode_list([table])
    return e


def pager_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("pagecast")]


# ---- fork ------------------------------------------------------------------------------


def test_forked_children_exit_cleanly_and_never_write_back(cases: str, tmp_path: Path) -> None:
    n, forks = 64, 20
    f = tmp_path / "f.bin"
    ref = make_file(f, n)
    ref[:, :128] = pattern(n, 0, 128)
    sd = tmp_path / "st"
    sd.mkdir()
    e = shim_env(f, 4, stats_dir=sd)
    p = subprocess.run([cases, "fork", str(f), str(n), str(forks)], env=e, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert pager_lines(p.stderr) == []  # no "write-back at close failed" from a child
    rows = [json.loads(x.read_text()) for x in sd.glob("*.json")]
    assert len(rows) == 1 and rows[0]["close_ok"] and rows[0]["errors"] == 0  # the parent's region only
    assert np.array_equal(np.fromfile(f, np.uint8).reshape(n, PS), ref)


def test_in_process_region_outlives_a_forked_child_closing_it(tmp_path: Path) -> None:
    """A Python program forks with a PagedRegion open; the child's copy of the object is
    closed (as its garbage collector would): the parent's handler keeps serving faults and
    the file gets exactly the parent's writes."""
    n = 32
    f = tmp_path / "p.bin"
    ref = make_file(f, n).reshape(-1)
    script = f"""
import os, numpy as np
from pagecast.pager import runtime as pg
r = pg.open_paged({str(f)!r}, 4 * {PS})
a = r.array()
a[::{PS}] = 7
pid = os.fork()
if pid == 0:
    r.close()
    os._exit(0)
_, st = os.waitpid(pid, 0)
a[5::{PS}] = 9
assert (a[::{PS}] == 7).all() and (a[5::{PS}] == 9).all()
r.close()
print(st)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stdout.strip() == "0", p.stderr
    ref[::PS] = 7
    ref[5::PS] = 9
    assert np.array_equal(np.fromfile(f, np.uint8), ref)


# ---- mremap ----------------------------------------------------------------------------


def test_mremap_of_a_paged_region_is_refused_before_anything_is_lost(cases: str, tmp_path: Path) -> None:
    n = 16
    f = tmp_path / "m.bin"
    ref = make_file(f, n)
    ref[:, :128] = pattern(n, 0, 128)
    p = subprocess.run(
        [cases, "mremap", str(f), str(n)], env=shim_env(f, 4), capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == "mremap refused: Invalid argument"
    lines = pager_lines(p.stderr)
    assert len(lines) == 1 and "mremap" in lines[0] and str(f) in lines[0]
    assert np.array_equal(np.fromfile(f, np.uint8).reshape(n, PS), ref)


def test_map_fixed_over_a_paged_region_is_refused(cases: str, tmp_path: Path) -> None:
    n = 8
    f = tmp_path / "x.bin"
    ref = make_file(f, n)
    ref[:, :128] = pattern(n, 0, 128)
    p = subprocess.run([cases, "fixed", str(f), str(n)], env=shim_env(f, 4), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout == "MAP_FIXED refused: Invalid argument\n", p.stdout + p.stderr
    lines = pager_lines(p.stderr)
    assert len(lines) == 1 and "MAP_FIXED" in lines[0]
    assert np.array_equal(np.fromfile(f, np.uint8).reshape(n, PS), ref)


# ---- other writers ---------------------------------------------------------------------


def _writer_run(cases: str, f: Path, n: int, env: dict | None) -> None:
    """cases writer, with another process writing bytes [2048, 2112) of every page while
    the program has dirty pages resident."""
    proc = subprocess.Popen([cases, "writer", str(f), str(n)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "ready"
        fd = os.open(f, os.O_WRONLY)
        for p in range(n):
            os.pwrite(fd, bytes([0xB0]) * 64, p * PS + 2048)
        os.close(fd)
        out, err = proc.communicate("go\n", timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err


def test_another_writers_bytes_survive_write_back(cases: str, tmp_path: Path) -> None:
    n = 16
    f, k = tmp_path / "w.bin", tmp_path / "k.bin"
    make_file(f, n)
    make_file(k, n)
    _writer_run(cases, k, n, None)  # the kernel: one page cache, every byte lands
    _writer_run(cases, f, n, shim_env(f, 4))
    want = np.fromfile(k, np.uint8).reshape(n, PS)
    assert (want[:, 2048:2112] == 0xB0).all() and np.array_equal(want[:, :128], pattern(n, 0, 128))
    assert np.array_equal(np.fromfile(f, np.uint8).reshape(n, PS), want)


def test_without_write_protect_only_read_only_mappings_are_paged(cases: str, tmp_path: Path) -> None:
    """As on a kernel without userfaultfd WP (PAGECAST_PAGER_NO_WP=1): nothing would stop a
    thread writing a page between its write-back and its drop, so a writable shared mapping
    is refused (strict) or left to the kernel (not strict); read-only ones are paged."""
    n = 8
    f = tmp_path / "n.bin"
    ref = make_file(f, n)
    e = {**shim_env(f, 4), "PAGECAST_PAGER_NO_WP": "1"}
    p = subprocess.run([cases, "fork", str(f), str(n), "0"], env=e, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "write-protect is unavailable" in p.stderr and "mmap" in p.stderr
    assert np.array_equal(np.fromfile(f, np.uint8).reshape(n, PS), ref)
    p = subprocess.run(
        [cases, "fork", str(f), str(n), "0"],
        env={**e, "PAGECAST_PAGER_STRICT": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = pager_lines(p.stderr)
    assert p.returncode == 0 and len(lines) == 1 and "ordinary mapping" in lines[0]
    ref[:, 64:128] = pattern(n, 64, 128)
    assert np.array_equal(np.fromfile(f, np.uint8).reshape(n, PS), ref)
    sd = tmp_path / "st"
    sd.mkdir()
    kernel = subprocess.run([cases, "read", str(f), str(n), "3"], capture_output=True, text=True, timeout=60)
    p = subprocess.run([cases, "read", str(f), str(n), "3"], env={**shim_env(f, 4, stats_dir=sd), "PAGECAST_PAGER_NO_WP": "1"},
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0 and p.stdout == kernel.stdout
    st = json.loads(next(sd.glob("*.json")).read_text())
    assert st["wp_enabled"] == 0 and st["faults"] == n


def test_second_writable_mapping_of_a_paged_file_is_refused(cases: str, tmp_path: Path) -> None:
    n = 8
    f = tmp_path / "t.bin"
    ref = make_file(f, n)
    ref[:, :128] = pattern(n, 0, 128)
    p = subprocess.run(
        [cases, "twomaps", str(f), str(n)], env=shim_env(f, 4), capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("second mapping refused")
    lines = pager_lines(p.stderr)
    assert len(lines) == 1 and "already mapped" in lines[0]
    assert np.array_equal(np.fromfile(f, np.uint8).reshape(n, PS), ref)


def test_two_read_only_mappings_are_fine_until_one_becomes_writable(cases: str, tmp_path: Path) -> None:
    n = 8
    f = tmp_path / "t.bin"
    ref = make_file(f, n)
    kernel = subprocess.run([cases, "readtwice", str(f), str(n)], capture_output=True, text=True, timeout=60)
    assert kernel.stdout == "both mapped, same bytes\nmprotect done\n"
    p = subprocess.run(
        [cases, "readtwice", str(f), str(n)], env=shim_env(f, 4), capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0 and p.stdout == "both mapped, same bytes\nmprotect refused: Permission denied\n", p.stdout
    lines = pager_lines(p.stderr)
    assert len(lines) == 1 and "PROT_WRITE refused" in lines[0]
    assert np.array_equal(np.fromfile(f, np.uint8).reshape(n, PS), ref)


def test_read_only_descriptor_cannot_be_mapped_writable_shared(cases: str, tmp_path: Path) -> None:
    n = 4
    f = tmp_path / "r.bin"
    ref = make_file(f, n)
    kernel = subprocess.run([cases, "rdonly", str(f), str(n)], capture_output=True, text=True, timeout=60)
    paged = subprocess.run(
        [cases, "rdonly", str(f), str(n)], env=shim_env(f, 2), capture_output=True, text=True, timeout=60
    )
    assert kernel.stdout == paged.stdout == "refused: Permission denied\n"
    assert np.array_equal(np.fromfile(f, np.uint8).reshape(n, PS), ref)


# ---- signals ---------------------------------------------------------------------------


TERMINATING = [signal.SIGPIPE, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF,
               signal.SIGXCPU, signal.SIGSYS, signal.SIGTRAP, signal.SIGIO, signal.SIGPWR, signal.SIGSTKFLT,
               signal.SIGRTMIN + 3, signal.SIGRTMAX]  # fmt: skip


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"SIG{int(sig)}"


@pytest.mark.parametrize("sig", TERMINATING, ids=_signame)
def test_every_terminating_signal_writes_back_first(cases: str, tmp_path: Path, sig: int) -> None:
    n = 16
    f, k = tmp_path / "s.bin", tmp_path / "k.bin"
    make_file(f, n)
    make_file(k, n)
    argv = [cases, "signal", None, str(n), str(int(sig))]
    kernel = subprocess.run([*argv[:2], str(k), *argv[3:]], capture_output=True, timeout=60)
    paged = subprocess.run([*argv[:2], str(f), *argv[3:]], env=shim_env(f, 4), capture_output=True, timeout=60)
    assert kernel.returncode == paged.returncode == -sig
    want = np.fromfile(k, np.uint8).reshape(n, PS)
    assert np.array_equal(want[:, :128], pattern(n, 0, 128))
    assert np.array_equal(np.fromfile(f, np.uint8).reshape(n, PS), want)


def test_exit_status_of_a_signalled_program_is_128_plus_n(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    f = tmp_path / "e.bin"
    make_file(f, 4)
    kill = ["sh", "-c", "kill -USR1 $$"]
    assert cli_main(["pager", "run", f"{f}:16K", "--", *kill]) == 128 + signal.SIGUSR1
    assert cli_main(["run", "--pager", f"{f}:16K", "--", *kill]) == 128 + signal.SIGUSR1
    assert cli_main(["pager", "run", f"{f}:16K", "--", "sh", "-c", "exit 7"]) == 7
    capsys.readouterr()


# ---- files the program creates, budgets, paths -----------------------------------------


def test_a_file_the_program_creates_is_paged(tmp_path: Path) -> None:
    f = tmp_path / "new" / "weight.dat"
    f.parent.mkdir()
    res = pg.run_pager([str(pg.llm_path()), str(f)], [(str(f), 2 * PS)], stdout=subprocess.PIPE)
    assert res.returncode == 0 and len(res.stats) == 1
    assert res.stats[0]["faults"] == 5 and res.stats[0]["evictions"] == 3 and res.stats[0]["close_ok"]
    data = f.read_bytes()
    assert [data[p * PS] for p in (0, 2, 5, 6, 8)] == [ord("A") + p for p in (0, 2, 5, 6, 8)]
    with pytest.raises(PagecastError, match="no such directory"):
        pg.pager_env([(str(tmp_path / "nodir" / "x.bin"), PS)], "none")


@pytest.mark.parametrize("budget", [str(2**64), f"{2**52}p", f"{2**54}G"])
def test_budget_beyond_64_bits_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, budget: str) -> None:
    f = tmp_path / "b.bin"
    make_file(f, 2)
    runs = [["pager", "run", f"{f}:{budget}"]] + (
        [["run", "--pager", f"{f}:{budget}"]] if not budget.endswith("p") else []
    )
    for argv in runs:
        assert cli_main([*argv, "--", "true"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "budget" in err[0], err


def test_strict_shim_never_runs_unpaged_on_an_entry_it_cannot_parse(cases: str, tmp_path: Path) -> None:
    n = 4
    f = tmp_path / "b.bin"
    ref = make_file(f, n)
    e = shim_env(f, 2)
    e["PAGECAST_PAGER"] = f"{f}:{2**64}"  # as set by hand: the CLI refuses it before
    p = subprocess.run([cases, "fork", str(f), str(n), "0"], env=e, capture_output=True, text=True, timeout=60)
    lines = pager_lines(p.stderr)
    assert p.returncode == 2 and p.stdout == "" and len(lines) == 1 and "strict" in lines[0]
    assert np.array_equal(np.fromfile(f, np.uint8).reshape(n, PS), ref)  # the program never ran
    p = subprocess.run([cases, "fork", str(f), str(n), "0"], env={**e, "PAGECAST_PAGER_STRICT": "0"}, capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0 and len(pager_lines(p.stderr)) == 1  # not strict: warned, ran on the kernel


def test_paths_with_commas_are_paged(cases: str, tmp_path: Path) -> None:
    d = tmp_path / "a,b"
    d.mkdir()
    f = d / "c,d.bin"
    ref = make_file(f, 16)
    ref[:, 64:128] = pattern(16, 64, 128)  # "fork" with no fork writes only these
    assert pg.parse_specs(f"{f}:8K") == [(str(f), 8192)]
    assert pg.parse_specs(f"{f}:8K,{tmp_path}/x:2p") == [(str(f), 8192), (f"{tmp_path}/x", 2 * PS)]
    tab = pg.write_table(d / "t,1.tab", pg.PrefetchTable.from_pairs(16, np.arange(15), np.arange(1, 16)), f)
    sd = tmp_path / "st"
    sd.mkdir()
    e = shim_env(f, 4, policy=f"table:{tab}", stats_dir=sd)
    p = subprocess.run([cases, "fork", str(f), "16", "0"], env=e, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and pager_lines(p.stderr) == [], p.stderr
    assert np.array_equal(np.fromfile(f, np.uint8).reshape(16, PS), ref)
    st = json.loads(next(sd.glob("*.json")).read_text())
    assert st["path"] == str(f) and st["prefetched"] > 0  # paged, and the table (comma in its name) loaded


# ---- malformed binary inputs -----------------------------------------------------------


def _table_bytes(npages: int, offsets: list[int], pages: list[int], file: Path) -> bytes:
    return (pg.TABLE_MAGIC + np.uint64(npages).tobytes() + np.asarray(offsets, "<u8").tobytes()
            + np.asarray(pages, "<i8").tobytes() + str(file.resolve()).encode() + b"\0")  # fmt: skip


def test_crafted_tables_refused_in_one_line_never_crash(
    cases: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    n = 16
    f = tmp_path / "d.bin"
    make_file(f, n)
    ok_off = list(range(n)) + [n - 1]  # page p -> p + 1
    crafted = {
        "offset past the pages": _table_bytes(n, [0, 0, 1 << 40, (1 << 40) + 4] + [1] * (n - 3), [1], f),
        "decreasing offsets": _table_bytes(n, [0, 5, 2] + [5] * (n - 2), list(range(1, 6)), f),
        "first offset not 0": _table_bytes(n, [3] * (n + 1), [], f),
        "huge page count": pg.TABLE_MAGIC + np.uint64(1 << 39).tobytes() + b"\0" * 64,
        "truncated": _table_bytes(n, ok_off, list(range(1, n)), f)[:100],
        "no path": _table_bytes(n, ok_off, list(range(1, n)), f)[: 16 + 8 * (n + 1) + 8 * (n - 1)],
    }
    kernel = subprocess.run([cases, "read", str(f), str(n), "5"], capture_output=True, text=True, timeout=60)
    for name, raw in crafted.items():
        t = tmp_path / "bad.tab"
        t.write_bytes(raw)
        p = subprocess.run([cases, "read", str(f), str(n), "5"], env=shim_env(f, 4, table=t), capture_output=True,
                           text=True, timeout=60)  # fmt: skip
        assert p.returncode == 0, (name, p.returncode, p.stderr)
        assert p.stdout == kernel.stdout, name  # served from the file, without the table
        lines = pager_lines(p.stderr)
        assert len(lines) == 1 and str(t) in lines[0], (name, p.stderr)
        with pytest.raises(PagecastError) as ei:
            pg.read_table(t)
        assert str(t) in str(ei.value)
        assert cli_main(["pager", "run", f"{f}:16K", "--policy", f"table:{t}", "--", "true"]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(t) in err[0], (name, err)


FUZZ_CASES = 250  # per input kind; the seed fixes every mutation


def _mutate(raw: bytes, rng: np.random.Generator, fields: list[int]) -> bytes:
    b = bytearray(raw)
    how = rng.integers(0, 6)
    if how == 0:  # flip a few bytes anywhere
        for i in rng.integers(0, len(b), rng.integers(1, 9)):
            b[i] ^= int(rng.integers(1, 256))
    elif how == 1:  # an extreme value in a header field
        at = int(rng.choice(fields))
        extremes = [0, 1, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, int(rng.integers(0, 2**63))]
        v = extremes[int(rng.integers(0, len(extremes)))]
        b[at : at + 8] = v.to_bytes(8, "little")
    elif how == 2:  # truncate
        del b[int(rng.integers(0, len(b))) :]
    elif how == 3:  # pad
        b += bytes(rng.integers(0, 256, int(rng.integers(1, 5000)), dtype=np.uint8))
    elif how == 4:  # two neighbouring words moved by the same large amount (a CSR window far away)
        at = int(rng.choice(fields))
        d = int(rng.integers(1, 2**62))
        for w in (at, at + 8):
            if w + 8 <= len(b):
                b[w : w + 8] = ((int.from_bytes(b[w : w + 8], "little") + d) % 2**64).to_bytes(8, "little")
    else:  # a random 8-byte word somewhere
        at = int(rng.integers(0, max(1, len(b) - 8)))
        b[at : at + 8] = rng.integers(0, 256, 8, dtype=np.uint8).tobytes()
    return bytes(b)


def test_fuzz_tables_and_packs_through_the_c_loader(cases: str, tmp_path: Path) -> None:
    """Seeded mutations of a valid table and a valid pack, each fed to a real program under
    the shim: the target never dies of a signal or hangs, prints the kernel's bytes, and
    the pager says at most one line about the input (which names it)."""
    n = 48
    f = tmp_path / "z.bin"
    make_file(f, n)
    order = [str(f), str(n), "7"]
    kernel = subprocess.run([cases, "read", *order], capture_output=True, text=True, timeout=60).stdout
    table = pg.write_table(
        tmp_path / "ok.tab", pg.PrefetchTable.from_pairs(n, np.arange(n), (np.arange(n) * 7 + 7) % n), f
    ).read_bytes()
    pack = build_pack(f, (np.arange(n) * 7) % n, tmp_path / "ok.pack", block_pages=8).path.read_bytes()
    tab_fields = [8] + [16 + 8 * i for i in (0, 1, n // 2, n - 1, n)]
    pack_fields = [8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 4096, 4104]
    rng = np.random.default_rng(20261123)
    refused = {"table": 0, "pack": 0}
    for kind, raw, fields in (("table", table, tab_fields), ("pack", pack, pack_fields)):
        for i in range(FUZZ_CASES):
            bad = tmp_path / f"fuzz.{kind}"
            bad.write_bytes(_mutate(raw, rng, fields))
            kw = {"table": bad} if kind == "table" else {"packs": [bad]}
            p = subprocess.run(
                [cases, "read", *order], env=shim_env(f, 8, **kw), capture_output=True, text=True, timeout=30
            )
            what = f"{kind} case {i}: rc {p.returncode}, {p.stderr!r}"
            assert p.returncode == 0, what
            assert p.stdout == kernel, what
            lines = pager_lines(p.stderr)
            assert len(lines) <= 1 and all(str(bad) in ln for ln in lines), what
            refused[kind] += len(lines)
    # nearly every mutation must be caught (the rest only change which pages are prefetched)
    assert min(refused.values()) >= FUZZ_CASES * 9 // 10, refused


# ---- SIGKILL and torn pages ----------------------------------------------------------------


def whole(counters: np.ndarray) -> bool:
    """A page's GEN_SLOTS counters as cases.c `gens` can leave them at any instant: g in the
    first k, g + 1 in the others (it writes the last counter first)."""
    c = [int(x) for x in counters]
    return all(b in (c[0], c[0] + 1) for b in c) and c == sorted(c)


def test_kill_9_under_periodic_write_back_leaves_every_page_whole(cases: str, tmp_path: Path) -> None:
    """A page's write-back is one pwrite: a SIGKILL (which ends the handler thread with the
    program) lands before or after it, so the file holds each page as the program's memory
    held it at one instant, never half of one write-back and half of an older one."""
    n, slots, trials = 32, 4, 100
    f = tmp_path / "g.bin"
    rng = np.random.default_rng(20261127)
    torn = []
    for t in range(trials):
        f.write_bytes(bytes(n * PS))
        env = shim_env(f, 16, flush_ms=1)  # half the pages fit: evictions write back too
        p = subprocess.Popen([cases, "gens", str(f), str(n)], env=env, stderr=subprocess.PIPE)
        try:
            p.wait(timeout=float(rng.uniform(0.01, 0.05)))
        except subprocess.TimeoutExpired:
            p.kill()
        p.wait()
        assert p.returncode == -signal.SIGKILL, p.stderr.read()
        p.stderr.close()
        words = np.fromfile(f, np.uint64).reshape(n, slots, PS // 8 // slots)[:, :, 0]
        torn += [(t, page, words[page].tolist()) for page in range(n) if not whole(words[page])]
    assert not torn, torn[:5]


# ---- a file that shrinks or loses its name -------------------------------------------------


@pytest.mark.parametrize("budget", [32, 8])
def test_truncate_makes_pages_past_the_end_sigbus_like_the_kernel(cases: str, tmp_path: Path, budget: int) -> None:
    n = 32
    f = tmp_path / "s.bin"
    make_file(f, n)
    kernel = subprocess.run([cases, "shrink", str(f), str(n)], capture_output=True, text=True, timeout=60)
    want = f.read_bytes()
    assert kernel.returncode == 0 and "11:SIGBUS" in kernel.stdout and "10:data" in kernel.stdout
    make_file(f, n)
    p = subprocess.run(
        [cases, "shrink", str(f), str(n)], env=shim_env(f, budget), capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout == kernel.stdout  # pages 11-31 raise SIGBUS, page 10 reads zeros past the new end
    assert f.read_bytes() == want  # what the program wrote before the end, nothing past it


def test_second_mapping_of_an_unlinked_paged_file_is_refused(cases: str, tmp_path: Path) -> None:
    n = 8
    f = tmp_path / "t.bin"
    make_file(f, n)
    kernel = subprocess.run([cases, "twomaps", str(f), str(n), "1"], capture_output=True, text=True, timeout=60)
    assert kernel.stdout == "coherent\n"
    make_file(f, n)
    p = subprocess.run(
        [cases, "twomaps", str(f), str(n), "1"], env=shim_env(f, 4), capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0 and p.stdout.startswith("second mapping refused"), p.stdout + p.stderr
    lines = pager_lines(p.stderr)
    assert len(lines) == 1 and "already mapped" in lines[0]


def test_truncate_by_another_process_is_seen_at_the_next_periodic_write_back(cases: str, tmp_path: Path) -> None:
    n = 32
    f = tmp_path / "s.bin"
    make_file(f, n)
    kernel = subprocess.run([cases, "shrink", str(f), str(n)], capture_output=True, text=True, timeout=60)
    make_file(f, n)
    p = subprocess.Popen([cases, "shrink", str(f), str(n), "1"], env=shim_env(f, n, flush_ms=10),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert p.stdout.readline() == "ready\n"
    os.truncate(f, 10 * PS + 100)  # not through the shim: the handler's periodic check sees it
    time.sleep(1.0)  # a hundred periods
    out, err = p.communicate("go\n", timeout=60)
    assert p.returncode == 0, err
    assert out == kernel.stdout  # pages 11-31 were resident: now SIGBUS, as on a kernel mapping
