"""Data cached before a run under ``--memory`` is charged outside the limit: ``record`` and
``run --plan`` say so in one line, and ``--cold FILE`` makes the limit apply, on a real
program, real files and a real memory cgroup."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cold_support import cold_file_maker, cyclic_scan_and_file
from conftest import require_memcg
from pagecast.plan.format import FileIdentity
from pagecast.plan.memory_format import FileMemoryPlan, MemoryPlan, write_memory_plan
from pagecast.util.cached_outside import cached_bytes, cached_files
from pagecast.util.pagecache import make_cold, resident

MIB = 1 << 20
FILE_MIB = 32
LIMIT = 16 * MIB


def _pagecast(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pagecast", *args], capture_output=True, text=True, timeout=timeout)


def _warm(f: Path) -> None:
    f.read_bytes()
    assert resident(f).all()


@pytest.fixture(scope="module")
def setup():
    require_memcg("memory cgroups need root")
    with cyclic_scan_and_file("cached-outside", FILE_MIB) as made:
        yield made


def test_cached_bytes_counts_exactly_the_pages_read():
    with cold_file_maker("cached-bytes") as make:
        f = make(256)
        assert cached_bytes(f) == 0
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no read-ahead: the pages asked for alone
            for page in (3, 10, 11, 200):
                os.pread(fd, 1, page * mmap.PAGESIZE)
        finally:
            os.close(fd)
        assert cached_bytes(f) == 4 * mmap.PAGESIZE == int(resident(f).sum()) * mmap.PAGESIZE
        assert cached_bytes("/dev/zero") == 0 and cached_bytes(f.parent / "none") == 0


def test_programs_and_libraries_are_not_named():
    # the interpreter's own library is mapped by this process: always cached, never data
    libs = [line.split()[-1] for line in open("/proc/self/maps") if ".so" in line and line.split()[-1].startswith("/")]
    big = [p for p in dict.fromkeys(libs) if os.path.getsize(p) >= 2 * MIB and cached_bytes(p) >= MIB]
    if not big:
        pytest.skip("no library of 2 MiB or more mapped here")
    with cold_file_maker("cached-elf") as make:
        f = make(512)
        _warm(f)
        assert [c.path for c in cached_files([*big, f])] == [str(f)]


def test_record_with_its_data_cached_says_so_and_cold_makes_the_limit_apply(setup, tmp_path):
    prog, f = setup
    _warm(f)
    r = _pagecast(
        "record", "--memory", str(LIMIT), "--json", "-o", str(tmp_path / "a.parquet"), "--", str(prog), str(f), "3"
    )
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    said = [w for w in rep.get("warnings", []) if "charged outside" in w]
    assert len(said) == 1 and "named on the command line" in said[0] and f"--cold {f}" in said[0], rep
    assert r.stderr.count("charged outside") == 1  # said once, before the program started
    assert rep["memory"]["peak_bytes"] < LIMIT // 2 and not rep["memory"]["limit_reached"]  # the file never counted

    _warm(f)
    r = _pagecast("record", "--memory", str(LIMIT), "--json", "--cold", str(f), "-o", str(tmp_path / "b.parquet"),
                  "--", str(prog), str(f), "3")  # fmt: skip
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert not [w for w in rep.get("warnings", []) if "charged outside" in w]
    assert rep["memory"]["refaults"] > 0 and rep["memory"]["limit_reached"]  # under the limit now


def test_record_of_data_not_named_on_the_command_line_is_checked_after(setup, tmp_path):
    prog, f = setup
    _warm(f)
    hidden = ["sh", "-c", 'exec "$PROG" "$DATA" 3']  # the file reaches the program through its environment
    r = subprocess.run([sys.executable, "-m", "pagecast", "record", "--memory", str(LIMIT), "--json", "-o",
                        str(tmp_path / "h.parquet"), "--", *hidden], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PROG=str(prog), DATA=str(f)))  # fmt: skip
    assert r.returncode == 0, r.stderr
    said = [w for w in json.loads(r.stdout).get("warnings", []) if "charged outside" in w]
    assert len(said) == 1 and "shows the program without it" in said[0] and f"--cold {f}" in said[0], said


def test_run_with_a_plan_whose_data_is_cached_warns_before_the_program(setup, tmp_path):
    prog, f = setup
    n = FILE_MIB  # 1 MiB chunks
    fp = FileMemoryPlan(str(f), FileIdentity.of(f), [(0, 4)], [(4, n - 4)], {c: c + 1 for c in range(4, n - 1)})
    plan = tmp_path / "p.plan"
    write_memory_plan(MemoryPlan(LIMIT, MIB, 4 * MIB, 1, "kernel-advice", [fp]), plan)
    _warm(f)
    r = _pagecast("run", "--memory", str(LIMIT), "--plan", str(plan), "--json", "--", str(prog), str(f), "2")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    warned = [i for i, line in enumerate(lines) if "cached already" in line]
    passes = [i for i, line in enumerate(lines) if line.startswith("pass ")]
    assert len(warned) == 1 and passes and warned[0] < passes[0], r.stderr  # before the program's own lines
    rep = json.loads(r.stdout)
    assert "cached already" in rep["warnings"][0] and not rep["memory"]["limit_reached"]

    _warm(f)
    r = _pagecast(
        "run", "--memory", str(LIMIT), "--plan", str(plan), "--json", "--cold", str(f), "--", str(prog), str(f), "2"
    )
    assert r.returncode == 0, r.stderr
    assert "cached already" not in r.stderr
    assert json.loads(r.stdout)["memory"]["read_bytes"] >= 2 * FILE_MIB * MIB * 0.5  # read again, under the limit


@pytest.mark.parametrize("command", ["run", "record"])
def test_cold_with_a_file_that_is_not_there_is_one_line(command, tmp_path):
    r = _pagecast(command, "--cold", str(tmp_path / "none.bin"), "-o" if command == "record" else "--json",
                  *([str(tmp_path / "t.parquet")] if command == "record" else []), "--", "true")  # fmt: skip
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "--cold" in err[0] and "no such file" in err[0] and "Traceback" not in r.stderr


def test_cold_says_which_file_stays_cached(tmp_path):
    with cold_file_maker("cached-mapped") as make:
        f = make(1024)
        holder = subprocess.Popen(
            [sys.executable, "-c",
             "import mmap,sys; h=open(sys.argv[1],'rb'); m=mmap.mmap(h.fileno(),0,prot=mmap.PROT_READ); "
             "s=sum(m[i] for i in range(0,len(m),4096)); print('mapped', flush=True); sys.stdin.read()", str(f)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert holder.stdout.readline().strip() == "mapped"
            r = _pagecast("run", "--cold", str(f), "--", "true")
            assert r.returncode == 0, r.stderr
            assert "stay cached" in r.stderr and str(f) in r.stderr
        finally:
            holder.stdin.close()
            holder.wait(timeout=10)
        time.sleep(0.05)
        make_cold([f])
        r = _pagecast("run", "--cold", str(f), "--", "true")
        assert r.returncode == 0 and "stay cached" not in r.stderr, r.stderr


def test_the_kernel_alone_on_cached_data_says_the_limit_was_never_reached(setup):
    prog, f = setup
    _warm(f)
    r = _pagecast("run", "--memory", str(LIMIT), "--", str(prog), str(f), "2")
    assert r.returncode == 0 and "the limit was never reached" in r.stderr, r.stderr
    assert "named on the command line are cached already" in r.stderr and f"--cold {f}" in r.stderr
    r = _pagecast("run", "--memory", str(LIMIT), "--cold", str(f), "--", str(prog), str(f), "2")
    assert r.returncode == 0 and "never reached" not in r.stderr, r.stderr


def test_cold_writes_a_file_just_written_back_and_drops_it():
    with cold_file_maker("cached-dirty") as make:  # on the checkout's disk: /tmp may be a tmpfs
        f = make(2048)
        f.write_bytes(os.urandom(8 * MIB))  # dirty in the page cache: DONTNEED alone would leave it
        assert cached_bytes(f) == 8 * MIB
        r = _pagecast("run", "--cold", str(f), "--", "true")
        assert r.returncode == 0 and "stay cached" not in r.stderr, r.stderr
        assert cached_bytes(f) == 0
