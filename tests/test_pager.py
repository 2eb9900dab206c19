"""The userfaultfd pager on real faults: content, budget, the seed example, prefetch
policies, fault traces and the failure paths (no permission, shrinking file, exit)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pagecast.pager import runtime as pg
from pagecast.trace.reader import open_trace
from pagecast.trace.schema import Kind
from pagecast.util.native import build
from uffd_support import needs_uffd

PS = os.sysconf("SC_PAGESIZE")
SRC = Path(__file__).resolve().parents[1] / "src"


pytestmark = needs_uffd

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident_pages(region: pg.PagedRegion) -> int:
    """Pages the kernel has mapped in the region (independent of the pager's counters)."""
    vec = np.zeros(region.npages, np.uint8)
    assert _libc.mincore(region.address, region.length, vec.ctypes.data) == 0
    return int((vec & 1).sum())


def make_file(path: Path, npages: int, seed: int = 0) -> np.ndarray:
    data = np.random.default_rng(seed).integers(0, 256, npages * PS, dtype=np.uint8)
    data.tofile(path)
    return data


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(SRC) + os.pathsep + e.get("PYTHONPATH", "")
    return e


# ---- content and budget --------------------------------------------------------------


@pytest.mark.parametrize("policy", ["none", "next:8", "stride:4", "sparse:8"])
def test_random_and_monotone_read_write_match_file(tmp_path: Path, policy: str) -> None:
    n, budget = 192, 12
    f = tmp_path / "data.bin"
    ref = make_file(f, n).copy()
    rng = np.random.default_rng(7)
    with pg.open_paged(f, budget * PS, policy) as r:
        a = r.array()
        orders = [rng.permutation(n), np.arange(n), rng.integers(0, n, 300)]
        for order in orders:
            for p in order.tolist():
                lo = p * PS
                if rng.random() < 0.3:  # write a few bytes somewhere in the page
                    o = lo + int(rng.integers(0, PS - 8))
                    val = rng.integers(0, 256, 8, dtype=np.uint8)
                    a[o : o + 8] = val
                    ref[o : o + 8] = val
                assert np.array_equal(a[lo : lo + PS], ref[lo : lo + PS]), f"page {p} differs"
                assert resident_pages(r) <= budget
        st = r.stats()
        assert st.max_resident <= budget
        assert st.evictions > 0 and st.writebacks > 0
    final = r.stats()
    assert final.errors == 0
    back = np.fromfile(f, np.uint8)  # plain file read after unmap
    assert np.array_equal(back, ref)


def test_flush_and_drop_all_keep_writes(tmp_path: Path) -> None:
    f = tmp_path / "d.bin"
    ref = make_file(f, 32).copy()
    r = pg.open_paged(f, 8 * PS)
    a = r.array()
    a[3 * PS] = ref[3 * PS] ^ 0xFF
    ref[3 * PS] ^= 0xFF
    assert r.flush() == 1
    assert np.array_equal(np.fromfile(f, np.uint8), ref)  # msync-like: on disk while mapped
    a[5 * PS + 1] = 42
    ref[5 * PS + 1] = 42
    r.drop_all()
    assert resident_pages(r) == 0
    assert np.array_equal(a, ref)  # faults back in from the written-back file
    r.close()
    assert np.array_equal(np.fromfile(f, np.uint8), ref)


# ---- the seed example under the LD_PRELOAD shim --------------------------------------


def test_seed_llm_serves_exactly_its_faults(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    f = tmp_path / "weight.dat"
    f.touch()
    out = tmp_path / "t.parquet"
    # 2-page budget: the written pages are evicted (written back) while the program runs
    res = pg.run_pager([str(pg.llm_path()), str(f)], [(str(f), 2 * PS)], trace_out=out, stdout=subprocess.PIPE)
    assert res.returncode == 0
    tr = open_trace(out)
    c = tr.read(["kind", "page", "flags"])
    faults = c["page"][c["kind"] == int(Kind.FAULT)].tolist()
    assert faults == [0, 2, 5, 6, 8]
    assert tr.regions[0].path == str(f.resolve()) and tr.meta["source"] == "pager"
    from pagecast.cli import main as cli_main

    assert cli_main(["pager", "stats", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary[0]["faults"] == 5 and summary[0]["write_faults"] == 5 and summary[0]["budget_pages"] == 2
    assert summary[0]["evictions"] == 3 and summary[0]["written_back"] == 3
    assert res.stats[0]["faults"] == 5 and res.stats[0]["close_ok"]
    data = f.read_bytes()
    assert len(data) == 9 * PS
    for p in range(9):
        page = data[p * PS : (p + 1) * PS]
        want = bytes([ord("A") + p]) if p in (0, 2, 5, 6, 8) else b"\0"
        assert page[:1] == want and page[1:] == bytes(PS - 1)


def _passes(pages: np.ndarray) -> list[np.ndarray]:
    """Split a monotone fault stream into passes (a pass restarts when the page drops)."""
    cut = np.flatnonzero(np.diff(pages) < 0) + 1
    return np.split(pages, cut)


def test_sparse_predictor_second_pass_one_fault_per_window(tmp_path: Path) -> None:
    n, depth, budget = 2048, 16, 64
    f = tmp_path / "w.bin"
    make_file(f, n)
    args = [str(pg.llm_path()), "-n", str(n), "-g", "3:100", "-r", "2", "-m", "read", "-q", str(f)]
    touched = None
    counts = {}
    for policy in ("none", f"sparse:{depth}"):
        out = tmp_path / f"{policy[:4]}.parquet"
        res = pg.run_pager(args, [(str(f), budget * PS)], policy=policy, trace_out=out)
        assert res.returncode == 0 and res.stats[0]["max_resident"] <= budget
        c = open_trace(out).read(["kind", "page", "flags"])
        faults = c["page"][(c["kind"] == int(Kind.FAULT)) & ((c["flags"] & 4) == 0)]
        p1, p2 = _passes(faults)
        if touched is None:
            touched = p1
        assert np.array_equal(p1, touched)  # first pass: one fault per page of the set
        counts[policy] = len(p2)
    k = len(touched)
    assert k > 150
    assert counts["none"] >= k - budget  # no prefetch: (almost) every page faults again
    assert counts[f"sparse:{depth}"] <= -(-k // (depth + 1))  # one fault per batch window


def test_sparse_learned_set_persists_across_runs(tmp_path: Path) -> None:
    n, depth = 1024, 8
    f = tmp_path / "w.bin"
    make_file(f, n)
    learn = tmp_path / "learn"
    args = [str(pg.llm_path()), "-n", str(n), "-g", "5:100", "-m", "read", "-q", str(f)]
    first = pg.run_pager(args, [(str(f), 32 * PS)], policy=f"sparse:{depth}", learn_dir=learn)
    second = pg.run_pager(args, [(str(f), 32 * PS)], policy=f"sparse:{depth}", learn_dir=learn)
    k = first.stats[0]["faults"]
    assert first.stats[0]["prefetched"] == 0 and k > 50
    assert second.stats[0]["faults"] <= -(-k // (depth + 1))


def test_stride_and_next_policies_cut_faults(tmp_path: Path) -> None:
    n = 400
    f = tmp_path / "s.bin"
    ref = make_file(f, n)
    with pg.open_paged(f, 64 * PS, "stride:8") as r:
        a = r.array()
        for p in range(0, n, 3):
            assert a[p * PS] == ref[p * PS]
        st = r.stats()
    touched = len(range(0, n, 3))
    assert st.faults <= 2 + -(-touched // 9) + 1
    with pg.open_paged(f, 64 * PS, "next:7") as r:
        assert np.array_equal(r.array()[: n * PS], ref)
        st = r.stats()
    assert st.faults == -(-n // 8) and st.prefetched == n - st.faults


def test_old_and_new_pager_specs_page_alike(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    """The deprecated ``next:7``, its spelling in the one spec grammar and the shorthand with
    an option map the same pages on a real run; only the old name warns, in one line."""
    from pagecast.cli import main as cli_main

    f = tmp_path / "n.bin"
    f.write_bytes(bytes(64 * PS))
    script = f"import mmap,os\nm=mmap.mmap(os.open({str(f)!r},os.O_RDONLY),0,prot=mmap.PROT_READ)\n" + (
        f"s=sum(m[p*{PS}] for p in range(64))\n"
    )
    for spec in ("next:7", "nextline:window=8,before=0", "nextline:7,before=0"):
        argv = ["pager", "run", f"{f}:64p", "--policy", spec, "--json", "--", sys.executable, "-c", script]
        assert cli_main(argv) == 0, spec
        out, err = capfd.readouterr()
        (st,) = json.loads(out)["regions"]
        assert (st["faults"], st["prefetched"]) == (8, 56), spec  # one fault per 8 pages, forward only
        warned = [line for line in err.splitlines() if "warning" in line]
        if spec.startswith("next:"):
            assert warned == [
                "pagecast pager: warning: policy 'next' is deprecated: use nextline:N,before=0 (the same pages p+1..p+N)"
            ]
        else:
            assert warned == [], err


def test_table_policy_from_schedule_and_prefetcher(tmp_path: Path) -> None:
    from pagecast.policies.base import Prefetcher
    from pagecast.trace.schedule import Schedule

    n = 256
    f = tmp_path / "t.bin"
    make_file(f, n)
    order = [0, 40, 80, 120, 160, 200, 240]
    trace = tmp_path / "rec.parquet"
    script = f"import mmap,os\nfd=os.open({str(f)!r},os.O_RDONLY)\nm=mmap.mmap(fd,0,prot=mmap.PROT_READ)\n" + "".join(
        f"m[{p * PS}]\n" for p in order
    )
    res = pg.run_pager([sys.executable, "-c", script], [(str(f), 16 * PS)], trace_out=trace)
    assert res.returncode == 0 and res.stats[0]["faults"] == len(order)
    tr = open_trace(trace)
    # a schedule naming, at each demand event, the next page of the recorded order
    s = Schedule(
        np.arange(len(order) - 1),
        np.zeros(len(order) - 1),
        np.zeros(len(order) - 1),
        order[1:],
        np.ones(len(order) - 1),
    )
    table = pg.table_from_schedule(s, tr, 0, n)
    assert table.lookup(0).tolist() == [40] and table.lookup(200).tolist() == [240]

    class Jump40(Prefetcher):  # any pagecast predictor, run offline
        def observe(self, t_ns, region, page, hit):
            return [(region, page + 40), (region, page + 80)]

    # the same through the CLI, from a schedule file
    from pagecast.cli import main as cli_main
    from pagecast.trace.schedule import write_schedule

    write_schedule(tmp_path / "s.parquet", s)
    assert (
        cli_main(
            [
                "pager",
                "table",
                "--trace",
                str(trace),
                "--schedule",
                str(tmp_path / "s.parquet"),
                "-o",
                str(tmp_path / "c.bin"),
            ]
        )
        == 0
    )
    from_cli = pg.read_table(tmp_path / "c.bin", n)
    assert np.array_equal(from_cli.offsets, table.offsets) and np.array_equal(from_cli.pages, table.pages)

    t2 = pg.table_from_prefetcher(Jump40(), tr, 0, n)
    assert t2.lookup(0).tolist() == [40, 80]
    tab = pg.write_table(tmp_path / "tab.bin", t2, f)
    again = pg.run_pager([sys.executable, "-c", script], [(str(f), 16 * PS)], policy=f"table:{tab}")
    assert again.returncode == 0 and again.stats[0]["faults"] == 3  # 0, 120, 240


# ---- fault logs ----------------------------------------------------------------------


def test_fault_log_survives_a_killed_program(tmp_path: Path) -> None:
    f = tmp_path / "k.bin"
    make_file(f, 16)
    script = (
        f"import mmap,os,signal\nfd=os.open({str(f)!r},os.O_RDWR)\nm=mmap.mmap(fd,0)\n"
        + "".join(f"m[{p * PS}]\n" for p in (1, 3, 7))
        + "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = tmp_path / "k.parquet"
    res = pg.run_pager([sys.executable, "-c", script], [(str(f), 8 * PS)], trace_out=out)
    assert res.returncode == -signal.SIGKILL
    c = open_trace(out).read(["kind", "page"])
    assert c["page"][c["kind"] == int(Kind.FAULT)].tolist() == [1, 3, 7]


def test_torn_log_record_is_dropped(tmp_path: Path) -> None:
    f = tmp_path / "l.bin"
    make_file(f, 8)
    log = tmp_path / "x.pglog"
    with pg.open_paged(f, 4 * PS, "next:1", log=log) as r:
        r.array()[0]
    with open(log, "ab") as fh:
        fh.write(b"\x01" * 10)  # a crash in the middle of a record
    lg = pg.read_fault_log(log)
    assert lg.records["kind"].tolist() == [int(Kind.FAULT), int(Kind.PREFETCH)]
    assert lg.records["page"].tolist() == [0, 1]


# ---- failure paths -------------------------------------------------------------------


def _no_uffd() -> Path:
    return build("no_uffd", ["pager/no_uffd.c"], shared=False)


def test_no_userfaultfd_permission_is_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "weight.dat"
    f.touch()
    cmd = [
        str(_no_uffd()),
        sys.executable,
        "-m",
        "pagecast",
        "pager",
        "run",
        f"{f}:64K",
        "--",
        str(pg.llm_path()),
        str(f),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env())
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "userfaultfd not permitted" in lines[0]
    # the shim alone, not strict: one warning, then the program runs on a kernel mapping
    e = pg.pager_env([(str(f), 1 << 16)], "none", strict=False, base_env=env())
    p = subprocess.run([str(_no_uffd()), str(pg.llm_path()), str(f)], capture_output=True, text=True, env=e)
    assert p.returncode == 0 and "userfaultfd not permitted" in p.stderr and "using an ordinary mapping" in p.stderr
    assert p.stdout.count("Accessed page") == 5 and f.read_bytes()[5 * PS : 5 * PS + 1] == b"F"
    # strict: mmap fails with the reason, nothing is silently unpaged
    e["PAGECAST_PAGER_STRICT"] = "1"
    p = subprocess.run([str(_no_uffd()), str(pg.llm_path()), str(f)], capture_output=True, text=True, env=e)
    assert p.returncode != 0 and "mmap" in p.stderr and "not permitted" in p.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to an unprivileged user")
def test_unprivileged_user_runs_in_user_mode_only() -> None:
    if Path("/proc/sys/vm/unprivileged_userfaultfd").read_text().strip() != "0":
        pytest.skip("unprivileged userfaultfd is enabled: nothing to test")
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv to run the program as an unprivileged user")
    with tempfile.TemporaryDirectory(dir="/tmp") as td:  # pytest's tmp_path is private to root
        _unprivileged_run(Path(td))


def _unprivileged_run(tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    # the program and the shim are staged beside the data: the build directory lies inside the
    # clone, which the unprivileged user may not reach (a clone in a mode-0700 directory), and
    # the loader silently skips an LD_PRELOAD library it cannot open
    staged = {}
    for name, built in (("llm", pg.llm_path()), ("pager_shim.so", pg.shim_path())):
        staged[name] = tmp_path / name
        shutil.copyfile(built, staged[name])
        staged[name].chmod(0o755)
    f = tmp_path / "weight.dat"
    f.touch()
    f.chmod(0o666)
    sd = tmp_path / "st"
    sd.mkdir(mode=0o777)
    sd.chmod(0o777)
    e = pg.pager_env([(str(f), 1 << 16)], "none", stats_dir=sd, base_env=env())
    e["LD_PRELOAD"] = e["LD_PRELOAD"].replace(str(pg.shim_path()), str(staged["pager_shim.so"]))
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(staged["llm"]), str(f)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=e)
    assert p.returncode == 0, p.stderr
    stats = list(sd.glob("*.json"))
    assert stats, f"the pager wrote no statistics (shim not loaded?): {p.stderr[-400:]}"
    st = json.loads(stats[0].read_text())
    assert st["faults"] == 5 and st["close_ok"]


def test_file_shrinking_under_the_region(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    n = 64
    f = tmp_path / "s.bin"
    ref = make_file(f, n).copy()
    r = pg.open_paged(f, 16 * PS, sigbus_past_eof=False)
    a = r.array()
    a[50 * PS] = 1  # dirty, resident, soon past the end
    a[10 * PS] = 2  # dirty, stays inside
    ref[10 * PS] = 2
    os.truncate(f, 32 * PS)
    assert not a[40 * PS : 41 * PS].any()  # past the new end: zeros, counted, reported
    st = r.close()
    assert st.eof_faults == 1 and st.writeback_skipped_eof == 1
    assert f.stat().st_size == 32 * PS  # the truncation is not undone
    assert np.array_equal(np.fromfile(f, np.uint8), ref[: 32 * PS])
    err = capfd.readouterr().err
    assert "past the end of the file" in err and "shrank" in err


def test_shim_sigbus_on_shrunk_file_like_the_kernel(tmp_path: Path) -> None:
    f = tmp_path / "s.bin"
    make_file(f, 16)
    script = f"import mmap,os\nfd=os.open({str(f)!r},os.O_RDWR)\nm=mmap.mmap(fd,0)\nos.truncate({str(f)!r},{4 * PS})\nm[{9 * PS}]\n"
    kernel = subprocess.run([sys.executable, "-c", script], capture_output=True)
    make_file(f, 16)
    e = pg.pager_env([(str(f), 4 * PS)], "none", base_env=env())
    paged = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=e)
    assert kernel.returncode == paged.returncode == -signal.SIGBUS
    assert "past the end of the file" in paged.stderr


@pytest.mark.parametrize(
    "ending", ["sys.exit(0)", "os._exit(0)", "pass", "os.kill(os.getpid(), signal.SIGTERM)", "os.abort()"]
)
def test_program_exiting_with_region_mapped_writes_back(tmp_path: Path, ending: str) -> None:
    n = 40
    f = tmp_path / "x.bin"
    ref = make_file(f, n).copy()
    script = textwrap.dedent(f"""
        import mmap, os, signal, sys
        fd = os.open({str(f)!r}, os.O_RDWR)
        m = mmap.mmap(fd, 0)
        for p in range(0, {n}, 3):
            m[p * {PS} + 5] = (p * 7) % 256
        {ending}
    """)
    for p in range(0, n, 3):
        ref[p * PS + 5] = (p * 7) % 256
    e = pg.pager_env([(str(f), 4 * PS)], "next:2", base_env=env())
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=e)
    want = {"SIGTERM": -signal.SIGTERM, "abort": -signal.SIGABRT}
    assert p.returncode == next((v for k, v in want.items() if k in ending), 0), p.stderr
    assert np.array_equal(np.fromfile(f, np.uint8), ref)


def test_cli_bad_input_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from pagecast.cli import main as cli_main

    (tmp_path / "ok.bin").write_bytes(b"x" * PS)
    cases = [
        "nofile",
        f"{tmp_path}/nodir/missing:1M",
        f"{tmp_path}/ok.bin:abc",
        f"{tmp_path}/ok.bin:1M --policy bogus",
        f"{tmp_path}/ok.bin:1M",
    ]
    for case in cases:
        spec, *opts = case.split()
        argv = ["pager", "run", spec, *opts] + (["--", "true"] if case != cases[-1] else [])
        assert cli_main(argv) == 2, case
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("pagecast pager: error:"), err


def test_private_mappings_never_lose_changes(tmp_path: Path) -> None:
    f = tmp_path / "p.bin"
    ref = make_file(f, 8).copy()
    # read-only private mapping: paged (the shim refuses a later mprotect(PROT_WRITE) on it)
    script = textwrap.dedent(f"""
        import mmap, os
        fd = os.open({str(f)!r}, os.O_RDONLY)
        m = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        print(m[3 * {PS}])
    """)
    out = tmp_path / "p.parquet"
    res = pg.run_pager([sys.executable, "-c", script], [(str(f), 2 * PS)], trace_out=out, stdout=subprocess.PIPE)
    assert res.returncode == 0
    c = open_trace(out).read(["kind", "page"])
    assert c["page"][c["kind"] == int(Kind.FAULT)].tolist() == [3]
    # writable private mapping: left to the kernel, with a note; private writes stay private
    script = textwrap.dedent(f"""
        import mmap, os
        fd = os.open({str(f)!r}, os.O_RDONLY)
        m = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        for p in range(8):
            m[p * {PS}] = 0
        assert all(m[p * {PS}] == 0 for p in range(8))
    """)
    e = pg.pager_env([(str(f), 2 * PS)], "none", base_env=env())
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=e)
    assert p.returncode == 0 and "left to the kernel" in p.stderr
    assert np.array_equal(np.fromfile(f, np.uint8), ref)
    # in-process region without write-back: the numpy view is read-only
    with pg.open_paged(f, 2 * PS, writeback=False) as r:
        a = r.array()
        assert not a.flags.writeable and a[5 * PS] == ref[5 * PS]


@pytest.mark.parametrize("policy", ["none", "next:3"])
def test_concurrent_writers_under_eviction_lose_nothing(tmp_path: Path, policy: str) -> None:
    """4 threads write shared pages at random under an 8-page budget: concurrent faults,
    writes racing write-backs, late faults. Every count must reach memory and the file."""
    n, threads = 128, 4
    f = tmp_path / "st.bin"
    init = np.zeros((n, PS // 8), np.uint64)
    init[:, 0] = np.arange(n)
    init.tofile(f)
    prog = build(
        "pager_stress",
        [Path(__file__).resolve().parents[1] / "workloads/pager_stress/stress.c"],
        shared=False,
        ldflags=["-pthread"],
    )
    exp = tmp_path / "expect.bin"
    res = pg.run_pager(
        [str(prog), str(f), str(n), str(threads), "2000", "3", str(exp)],
        [(str(f), 8 * PS)],
        policy=policy,
        stdout=subprocess.PIPE,
    )
    assert res.returncode == 0
    st = res.stats[0]
    assert st["max_resident"] <= 8 and st["errors"] == 0 and st["wp_faults"] > 0 and st["writebacks"] > 0
    back = np.fromfile(f, np.uint64).reshape(n, PS // 8)
    expect = np.fromfile(exp, np.uint64).reshape(n, threads)
    assert np.array_equal(back[:, 0], np.arange(n))
    assert np.array_equal(back[:, 1 : 1 + threads], expect) and expect.sum() > 4000


def test_periodic_write_back_bounds_sigkill_loss(tmp_path: Path) -> None:
    """SIGKILL runs no handler: only data already written back survives. The shim writes
    dirty pages back every PAGECAST_PAGER_FLUSH_MS; with it off the writes are lost."""
    n = 16
    script = textwrap.dedent(f"""
        import mmap, os, signal, time
        fd = os.open(os.environ["F"], os.O_RDWR)
        m = mmap.mmap(fd, 0)
        for p in range({n}):
            m[p * {PS}] = 0xAB
        time.sleep(0.6)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    for flush_ms, survives in ((100, True), (0, False)):
        f = tmp_path / f"k{flush_ms}.bin"
        f.write_bytes(bytes(n * PS))
        e = pg.pager_env([(str(f), n * PS)], "none", base_env={**env(), "F": str(f)}, flush_ms=flush_ms)
        p = subprocess.run([sys.executable, "-c", script], env=e, capture_output=True)
        assert p.returncode == -signal.SIGKILL
        data = np.fromfile(f, np.uint8).reshape(n, PS)[:, 0]
        assert (data == 0xAB).all() if survives else (data == 0).all()
