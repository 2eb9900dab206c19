"""Page sets of real programs: every file page a run uses, by mapping and by read-family
calls, whatever read-ahead, fault-around and folio size do. The truth is the program's
own argument list (workloads/pageset_touch.c), a run under MADV_RANDOM, the files
Python opened."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pagecast.bench.workloads import build_workload
from pagecast.cli import main as cli_main
from pagecast.collect.record import record_faults
from pagecast.trace import Kind, open_trace
from pagecast.trace.pageset import file_page_sets
from pagecast.util.pagecache import drop_file
from perf_support import needs_pagesets

pytestmark = [pytest.mark.perf, needs_pagesets]

PAGE = 4096


@pytest.fixture(scope="module")
def touch() -> Path:
    return build_workload("pageset_touch")


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    # on a disk file system (read-ahead, folios), not tmpfs
    base = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata" / f"ps-{os.getpid()}-{tmp_path.name}"
    base.mkdir(parents=True, exist_ok=True)
    yield base
    for p in base.iterdir():
        p.unlink()
    base.rmdir()


def _write(path: Path, pages: int, seed: int) -> Path:
    path.write_bytes(np.random.default_rng(seed).integers(0, 256, pages * PAGE, dtype=np.uint8).tobytes())
    return path


def _first_order(pages: list[int]) -> list[int]:
    seen: set[int] = set()
    return [p for p in pages if not (p in seen or seen.add(p))]


def test_exact_page_sets_mmap_pread_read_fresh(touch, data_dir, tmp_path):
    cold_map = _write(data_dir / "cold_map.bin", 512, 1)
    warm_map = _write(data_dir / "warm_map.bin", 256, 2)
    cold_pread = _write(data_dir / "cold_pread.bin", 300, 3)
    cold_read = _write(data_dir / "cold_read.bin", 200, 4)
    mixed = _write(data_dir / "mixed.bin", 128, 5)
    for f in (cold_map, cold_pread, cold_read, mixed):
        drop_file(f)
    fresh = _write(data_dir / "fresh.bin", 16384, 6)  # 64 MiB just written: large folios in the cache
    warm_map.read_bytes()  # all cached: fault-around maps neighbours without faults
    want = {
        cold_map: [7, 3, 100, 101, 102, 200, 3, 511, 0, 64],
        warm_map: [5, 6, 9, 1, 255, 128, 6],
        fresh: [0, 1, 2, 3, 1000, 5000, 5001, 16383, 777],
        cold_pread: [10, 11, 12, 50, 40, 299, 10],
        cold_read: [0, 1, 2, 3, 150, 199, 2],
        mixed: [3, 4, 60, 5, 90],
    }
    specs = [
        f"mmap:{cold_map}:{','.join(map(str, want[cold_map]))}",
        f"mmap:{warm_map}:{','.join(map(str, want[warm_map]))}",
        f"mmapw:{fresh}:{','.join(map(str, want[fresh]))}",
        f"pread:{cold_pread}:{','.join(map(str, want[cold_pread]))}",
        f"read:{cold_read}:{','.join(map(str, want[cold_read]))}",
        f"read1:{mixed}:3,4,60",
        f"mmap:{mixed}:5,90,3",
    ]
    out = tmp_path / "t.parquet"
    res = record_faults([str(touch), *specs], out)
    assert res.exit_status == 0 and res.lost == 0 and res.warnings == []
    sets = file_page_sets(out)
    for f, pages in want.items():
        assert sets[str(f)].tolist() == _first_order(pages), f.name
    # the row kinds say how each page was first used
    t = open_trace(out)
    cols = t.read(["region", "page", "kind"])
    rid = {r.path: r.id for r in t.regions if r.kind == "file"}

    def rows(f, kind):
        sel = (cols["region"] == rid[str(f)]) & (cols["kind"] == kind)
        return cols["page"][sel].tolist()

    assert rows(cold_pread, Kind.FILE_READ) == _first_order(want[cold_pread])
    assert rows(cold_pread, Kind.FILE_MAPPED) == []
    assert rows(fresh, Kind.FILE_MAPPED) == _first_order(want[fresh])
    assert rows(mixed, Kind.FILE_READ) == [3, 4, 60]
    assert rows(mixed, Kind.FILE_MAPPED) == [5, 90, 3]
    # the fault stream is still there: every first touch of a mapped page is one fault
    f_sel = (cols["region"] == rid[str(cold_map)]) & np.isin(cols["kind"], [Kind.FAULT_MINOR, Kind.FAULT_MAJOR])
    assert cols["page"][f_sel].tolist() == _first_order(want[cold_map])


SQLITE_MAKE = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("create table t(id integer primary key, k integer, v text)")
c.executemany("insert into t(k, v) values (?, ?)", ((i * 7919 % 100003, 'x' * 200) for i in range(30000)))
c.execute("create index tk on t(k)")
c.commit()
"""
SQLITE_QUERY = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("pragma mmap_size=1000000000")  # the database is read through a mapping
n = sum(len(c.execute("select v from t where k = ?", (k,)).fetchall()) for k in range(0, 100003, 997))
n += c.execute("select count(*) from t where id between 10000 and 11000").fetchone()[0]
print(n)
"""


def test_sqlite_mmap_query_every_database_page(data_dir, tmp_path):
    """Default advice, a freshly written (warm, large-folio) database: the recorded page set
    equals what the userfaultfd pager served (every first touch is a missing fault there)."""
    from pagecast.pager.runtime import probe, run_pager

    try:
        probe()
    except Exception as e:  # the pager needs userfaultfd
        pytest.skip(f"pager unavailable: {e}")
    db = data_dir / "q.sqlite"
    subprocess.run([sys.executable, "-c", SQLITE_MAKE, str(db)], check=True)
    cmd = [sys.executable, "-c", SQLITE_QUERY, str(db)]
    ref_run = run_pager(cmd, [(str(db), 1 << 30)], trace_out=tmp_path / "pager.parquet", stdout=subprocess.DEVNULL)
    assert ref_run.returncode == 0
    ref = open_trace(tmp_path / "pager.parquet").read()
    missing = (ref["kind"] == Kind.FAULT) & ((ref["flags"] >> 4) == 0)
    ref_pages = set(ref["page"][missing].tolist())
    res = record_faults(cmd, tmp_path / "t.parquet", stdout=subprocess.DEVNULL)
    assert res.exit_status == 0 and res.lost == 0
    got = file_page_sets(tmp_path / "t.parquet")[str(db)]
    assert len(got) == len(set(got.tolist()))
    assert set(got.tolist()) == ref_pages
    # the fault stream alone (what the kernel faults by default) misses most of them
    record_faults(cmd, tmp_path / "f.parquet", stdout=subprocess.DEVNULL, pageset=False)
    assert len(file_page_sets(tmp_path / "f.parquet")[str(db)]) < len(ref_pages)


def test_python_import_json_reads_its_pyc_files(tmp_path):
    """Every module file `import json` loaded (sys.modules, after a run that wrote the
    caches) is in the page set, whole: CPython reads them with read()."""
    ref = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys; print('\\n'.join(m.__cached__ or m.__file__ for n, m in "
            "sys.modules.items() if n == 'json' or n.startswith('json.')))",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    ref = [os.path.realpath(p) for p in ref if os.path.exists(p)]  # the kernel reports resolved paths
    assert len(ref) >= 3
    res = record_faults([sys.executable, "-c", "import json"], tmp_path / "t.parquet")
    assert res.exit_status == 0 and res.file_pages_read > 0
    sets = file_page_sets(tmp_path / "t.parquet")
    for p in ref:
        pages = -(-os.path.getsize(p) // PAGE)
        assert sorted(sets[p].tolist()) == list(range(pages)), p


def test_static_binary_gets_a_warning_not_a_traceback(tmp_path, capsys):
    src = tmp_path / "st.c"
    src.write_text("int main(void) { return 3; }\n")
    exe = tmp_path / "st"
    if subprocess.run(["cc", "-static", "-o", str(exe), str(src)], capture_output=True).returncode != 0:
        pytest.skip("no static C library to build a static test program")
    out = tmp_path / "t.parquet"
    rc = cli_main(["record", "-o", str(out), "--", str(exe)])
    err = capsys.readouterr().err
    assert rc == 3 and "Traceback" not in err
    warn = [line for line in err.splitlines() if line.startswith("pagecast record: warning:")]
    assert len(warn) == 1 and "st: ran without the page-set shim" in warn[0]
    assert open_trace(out).meta["pageset"]["warnings"] == [warn[0].split("warning: ", 1)[1]]


def test_program_that_exits_at_once(tmp_path, capsys):
    out = tmp_path / "t.parquet"
    rc = cli_main(["record", "--json", "-o", str(out), "--", "true"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["exit_status"] == 0 and res["warnings"] == []
    assert open_trace(out).meta["pageset"]["mapped"] is True


# A fresh machine's state in a private mount namespace of the child (the test's own mounts,
# and the machine's, are untouched): every tracefs and debugfs unmounted, then `pagecast ARGS`.
FRESH_MOUNTS = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
assert libc.unshare(0x20000) == 0, "unshare(CLONE_NEWNS)"
assert libc.mount(b"none", b"/", None, 0x4000 | (1 << 18), None) == 0, "mount --make-rprivate /"
def traced():
    return [m.split()[1] for m in open("/proc/self/mounts").read().splitlines() if m.split()[2] in ("tracefs", "debugfs")]
for target in reversed(traced()):
    libc.umount2(target.encode(), 2)  # MNT_DETACH
assert not traced(), traced()
from pagecast.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _tracefs_mounts() -> list[str]:
    return [ln for ln in Path("/proc/self/mounts").read_text().splitlines() if ln.split()[2] == "tracefs"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a private mount namespace, and mounting tracefs")
def test_records_pread_and_mmap_pages_with_tracefs_unmounted(touch, data_dir, tmp_path):
    """A fresh machine (tracefs not mounted): a program that preads 200 known pages and maps
    300 is recorded exactly, with one line saying tracefs was mounted (privately)."""
    rng = np.random.default_rng(21)
    read_f, mapped_f = _write(data_dir / "r.bin", 1000, 22), _write(data_dir / "m.bin", 600, 23)
    drop_file(read_f)
    read_pages = rng.permutation(1000)[:200].tolist()
    mapped_pages = rng.permutation(600)[:300].tolist()
    specs = [f"pread:{read_f}:{','.join(map(str, read_pages))}", f"mmap:{mapped_f}:{','.join(map(str, mapped_pages))}"]
    out = tmp_path / "t.parquet"
    before = _tracefs_mounts()
    p = subprocess.run(
        [sys.executable, "-c", FRESH_MOUNTS, "record", "--json", "-o", str(out), "--", str(touch), *specs],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr[-800:]
    notes = [ln for ln in p.stderr.splitlines() if "tracefs" in ln]
    assert len(notes) == 1 and "was not mounted" in notes[0] and "private mount namespace" in notes[0]
    assert json.loads(p.stdout)["warnings"] == []
    sets = file_page_sets(out)
    assert sets[str(read_f)].tolist() == read_pages
    assert sets[str(mapped_f)].tolist() == mapped_pages
    assert open_trace(out).meta["sources"] == ["faults", "mapped-pages", "read-pages"]
    assert _tracefs_mounts() == before  # the machine's mounts are as they were


def test_page_sets_refused_in_one_line_when_tracefs_is_out_of_reach(touch, tmp_path, monkeypatch, capsys):
    """Not mounted, and this user may not mount it: `record` refuses page-set mode before
    the program runs, naming the missing piece and the fixes; --faults-only goes on."""
    import pagecast.collect.filemap_tp as filemap_tp
    import pagecast.collect.tracefs as tracefs

    monkeypatch.setattr(tracefs, "mounted_root", lambda: None)
    monkeypatch.setattr(tracefs.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(filemap_tp, "_tracepoints_refused", lambda: "")  # as a user allowed tracepoint samples
    ran, out = tmp_path / "ran", tmp_path / "t.parquet"
    rc = cli_main(["record", "-o", str(out), "--", "touch", str(ran)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "tracefs is not mounted" in err[0] and "sudo mount -t tracefs nodev /sys/kernel/tracing" in err[0]
    assert "--faults-only" in err[0]
    assert not ran.exists() and not out.exists()
    monkeypatch.undo()
    assert cli_main(["record", "--faults-only", "-o", str(out), "--", "touch", str(ran)]) == 0 and ran.exists()


def test_recordings_without_reads_are_flagged_by_their_consumers(touch, data_dir, tmp_path, capsys):
    f = _write(data_dir / "a.bin", 16, 31)
    full, faults = tmp_path / "full.parquet", tmp_path / "faults.parquet"
    assert cli_main(["record", "-o", str(full), "--", str(touch), f"pread:{f}:1,2"]) == 0
    assert cli_main(["record", "--faults-only", "-o", str(faults), "--", str(touch), f"pread:{f}:1,2"]) == 0
    assert open_trace(faults).meta["sources"] == ["faults"]
    capsys.readouterr()
    for argv in (["info"], ["eval", "--policy", "none", "--capacity", "50%"]):
        assert cli_main([*argv, str(full)]) == 0
        assert "read()/pread()" not in capsys.readouterr().err
        assert cli_main([*argv, str(faults)]) == 0
        warned = [ln for ln in capsys.readouterr().err.splitlines() if "read()/pread()" in ln]
        assert len(warned) == 1 and str(faults) in warned[0] and "--faults-only" in warned[0], argv


def test_sources_of_older_recordings_from_their_pageset_metadata():
    from pagecast.trace.sources import missing_reads, sources_of

    base = {"source": "perf", "faults": 10}
    assert sources_of({**base, "pageset": {"mapped": True, "reads": True}}) == ["faults", "mapped-pages", "read-pages"]
    assert sources_of({**base, "pageset": {"mapped": True, "reads": False}}) == ["faults", "mapped-pages"]
    assert sources_of({**base, "pageset": None}) == ["faults"]
    assert "unavailable" in missing_reads({**base, "pageset": {"mapped": True, "reads": False}})
    assert missing_reads({"source": "lackey"}) is None and missing_reads({**base, "sources": ["read-pages"]}) is None


def test_faults_only_records_no_page_set_rows(touch, data_dir, tmp_path, capsys):
    f = _write(data_dir / "a.bin", 64, 7)
    out = tmp_path / "t.parquet"
    rc = cli_main(["record", "--faults-only", "--json", "-o", str(out), "--", str(touch), f"pread:{f}:1,2"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["pageset"] is False and res["file_pages_read"] == 0
    kinds = set(open_trace(out).read(["kind"])["kind"].tolist())
    assert kinds <= {int(Kind.FAULT_MINOR), int(Kind.FAULT_MAJOR)}
    assert open_trace(out).meta["pageset"] is None


def test_info_reports_pages_bytes_fraction_per_file(touch, data_dir, tmp_path, capsys):
    a = _write(data_dir / "a.bin", 40, 8)
    b = _write(data_dir / "b.bin", 10, 9)
    out = tmp_path / "t.parquet"
    res = record_faults([str(touch), f"pread:{a}:0,1,2,3,9,9", f"mmap:{b}:4,5"], out)
    assert res.exit_status == 0
    assert cli_main(["info", "--json", str(out)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["files_source"] == "pageset"
    files = {f["file"]: f for f in info["files"]}
    assert files[str(a)] == {
        "file": str(a),
        "pages_used": 5,
        "bytes_used": 5 * PAGE,
        "file_pages": 40,
        "fraction": 0.125,
        "mapped_pages": 0,
        "read_pages": 5,
    }
    assert files[str(b)]["pages_used"] == 2 and files[str(b)]["fraction"] == 0.2 and files[str(b)]["mapped_pages"] == 2
    assert cli_main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "files: pages used by the run (page-set rows)" in text and str(a) in text


MREMAP_FORK = """
import mmap, os, sys
f = open(sys.argv[1], "r+b")
m = mmap.mmap(f.fileno(), 10 * 4096)
m[3 * 4096]
m.resize(400 * 4096)  # mremap: perf reports no mapping record for the moved range
for p in (50, 60, 399, 2):
    m[p * 4096]
pid = os.fork()  # the child keeps the mapping but not the parent's userfaultfd registration
if pid == 0:
    ro = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    for p in (100, 101, 102):
        ro[p * 4096]
    m[200 * 4096]
    m[201 * 4096]
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_mremap_and_forked_child(data_dir, tmp_path):
    f = _write(data_dir / "r.bin", 400, 10)
    f.read_bytes()  # cached: fault-around would map neighbours of every touch
    res = record_faults([sys.executable, "-c", MREMAP_FORK, str(f)], tmp_path / "t.parquet")
    assert res.exit_status == 0 and res.warnings == []
    got = file_page_sets(tmp_path / "t.parquet")[str(f)].tolist()
    assert got == [3, 50, 60, 399, 2, 100, 101, 102, 200, 201]


def test_cold_sequential_scan_every_page(touch, data_dir, tmp_path):
    """A streaming reader at default advice: read-ahead brings in megabytes per major
    fault; the page set still has every page, in order."""
    f = _write(data_dir / "weights.bin", 16384, 11)
    drop_file(f)
    res = record_faults([str(touch), f"mmap:{f}:0-16383"], tmp_path / "t.parquet")
    assert res.exit_status == 0 and res.lost == 0
    assert file_page_sets(tmp_path / "t.parquet")[str(f)].tolist() == list(range(16384))


def test_shim_keeps_region_identity(touch, data_dir, tmp_path):
    """The shim adds no anonymous mapping of its own (anon regions keep their creation
    order and lengths, the cross-run identity) and a file opened before it is mapped gets
    the base address of its first real mapping."""
    f = _write(data_dir / "id.bin", 8, 12)
    recs = {}
    for ps in (False, True):
        out = tmp_path / f"t{int(ps)}.parquet"
        assert record_faults([str(touch), f"mmap:{f}:1"], out, pageset=ps).exit_status == 0
        t = open_trace(out)
        recs[ps] = t
        assert [r.base for r in t.regions if r.path == str(f)][0] != 0
    key = lambda t: [(r.kind, r.order, r.length) for r in t.regions if r.kind in ("anon", "heap", "stack")]
    assert key(recs[False]) == key(recs[True])


def test_refused_tracepoint_is_a_warning(touch, data_dir, tmp_path, monkeypatch):
    """A tracepoint the kernel refuses (here: an id no tracepoint has) leaves a warning and
    a trace; the mapped page set still comes from the faults under the shim."""
    import pagecast.collect.tracefs as tracefs

    real = tracefs.find_tracepoint

    def bogus(system, name):
        tp, why = real(system, name)
        return (tracefs.Tracepoint(system, name, 0x7FFFFFF0, tp.offsets, tp.sizes), "") if tp else (tp, why)

    monkeypatch.setattr(tracefs, "find_tracepoint", bogus)
    f = _write(data_dir / "w.bin", 64, 13)
    f.read_bytes()
    res = record_faults([str(touch), f"mmap:{f}:1,9,2", f"pread:{f}:30"], tmp_path / "t.parquet")
    assert res.exit_status == 0
    assert len(res.warnings) == 2 and all("not usable" in w for w in res.warnings)
    assert res.file_pages_read == 0
    assert file_page_sets(tmp_path / "t.parquet")[str(f)].tolist() == [1, 9, 2]
    assert open_trace(tmp_path / "t.parquet").meta["pageset"]["reads"] is False


def _fs_type(path: Path) -> str:
    st = os.stat(path)
    want = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if left.split()[2] == want:
            return right.split()[0]
    return ""


UNSEEN_OPEN = """
import ctypes, os, sys
fd = ctypes.CDLL(None, use_errno=True).syscall(257, -100, sys.argv[1].encode(), 0)  # openat, past the shim
os.pread(fd, 4096, 3 * 4096)
os.close(fd)
"""


def test_file_opened_past_the_shim_is_named_by_inode(data_dir, tmp_path):
    """A file opened by a raw system call (as libc does internally) and closed at once is
    named by opening its inode (ext4/xfs, root), not left as `inode MAJ:MIN:INO`."""
    if os.geteuid() != 0 or _fs_type(data_dir) not in ("ext4", "ext3", "ext2", "xfs"):
        pytest.skip("naming by inode needs root and an ext2/3/4 or xfs file system")
    from pagecast.collect.inode_path import path_of_inode

    f = _write(data_dir / "unseen.bin", 8, 14)
    st = os.stat(f)
    assert path_of_inode((os.major(st.st_dev) << 20) | os.minor(st.st_dev), st.st_ino) == str(f)
    res = record_faults([sys.executable, "-c", UNSEEN_OPEN, str(f)], tmp_path / "t.parquet")
    assert res.exit_status == 0
    sets = file_page_sets(tmp_path / "t.parquet")
    assert sets[str(f)].tolist() == [3]
    assert not [k for k in sets if k.startswith("inode ")]


def test_recorder_shim_is_not_part_of_the_run(tmp_path):
    """The page-set shim the recorder preloads is mapped into the program, so its pages
    fault like a library's; neither the page sets nor the planner's file pages name it."""
    from pagecast.collect.faultmon import pageset_shim
    from pagecast.plan.shared_pages import file_pages

    res = record_faults([sys.executable, "-c", "import json"], tmp_path / "t.parquet")
    assert res.exit_status == 0
    shim = os.path.realpath(pageset_shim())
    regions = [r for r in open_trace(tmp_path / "t.parquet").regions if r.path and os.path.realpath(r.path) == shim]
    assert regions and all(r.extra.get("recorder") for r in regions)  # recorded, and marked as the recorder's
    assert shim not in {os.path.realpath(p) for p in file_page_sets(tmp_path / "t.parquet")}
    assert shim not in {os.path.realpath(p) for p in file_pages(tmp_path / "t.parquet")}
    assert os.path.realpath(sys.executable) in {os.path.realpath(p) for p in file_pages(tmp_path / "t.parquet")}


def test_program_using_userfaultfd_on_its_own_memory(data_dir, tmp_path):
    """A program that registers its own memfd mapping (MISSING mode, pages filled by its
    handler thread) and its own file mapping (write-protect tracking) with userfaultfd:
    the shim leaves shared memory alone and gives up a file range the program registers,
    so the program reads what it wrote, as it does bare (before: EBUSY, then zeros)."""
    prog = build_workload("uffd_own")
    f = data_dir / "own.bin"
    f.write_bytes(b"".join(bytes([0x40 + i]) * PAGE for i in range(16)))
    bare = subprocess.run([str(prog), str(f)], capture_output=True, text=True)
    assert bare.returncode == 0 and bare.stdout == "memfd ok\nfile ok\n", bare.stdout
    with open(tmp_path / "out.txt", "wb") as o:
        res = record_faults([str(prog), str(f)], tmp_path / "t.parquet", stdout=o)
    out = (tmp_path / "out.txt").read_text()
    assert res.exit_status == 0 and out == bare.stdout, out
    sets = file_page_sets(tmp_path / "t.parquet")
    assert sets[str(f)].tolist() == list(range(16))  # the pages the program used are still recorded
    assert not any("memfd:" in (p or "") for p in sets)  # shared memory is not a file page set


SHRINK = """
import mmap, os, sys
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
if how == "map":
    m = mmap.mmap(fd, 32 * 4096, prot=mmap.PROT_READ)
    sum(m[i * 4096] for i in range(31, -1, -1))
    m.close()
else:
    for i in range(31, -1, -1):
        os.pread(fd, 100, i * 4096)
if how == "reopen":  # rewritten from scratch: O_TRUNC, then two pages
    os.close(os.open(path, os.O_WRONLY | os.O_TRUNC))
    with open(path, "r+b") as f:
        f.write(b"y" * 2 * 4096)
else:
    os.ftruncate(fd, 10 * 4096)
"""


@pytest.mark.parametrize("how", ["read", "map", "reopen"])
def test_pages_used_then_truncated_away_stay_in_the_page_set(data_dir, tmp_path, how):
    """A program reads (or maps) all 32 pages of a file, then cuts it to 10 pages
    (ftruncate) or rewrites it shorter (O_TRUNC): the page set keeps all 32 pages it used
    (before, the recorder clipped them to the size it found afterwards: 10)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("reads are recorded through tracefs, mounted here in a private mount namespace (root)")
    f = _write(data_dir / f"shrink-{how}.bin", 32, 9)
    drop_file(f)
    out = tmp_path / "t.parquet"
    script = (
        "mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || mount -t tracefs nodev /sys/kernel/debug/tracing; "
        f'"$0" -m pagecast record -o {out} -- "$0" -c "$1" {f} {how}'
    )
    r = subprocess.run(["unshare", "-m", "sh", "-c", script, sys.executable, SHRINK], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "not recorded" not in r.stderr, r.stderr  # tracefs was there: reads are in the trace
    assert file_page_sets(out)[str(f)].tolist() == list(range(31, -1, -1))


def test_planner_file_pages_against_the_page_sets(touch, data_dir, tmp_path):
    """Two readings of one recording, kept apart on purpose: the planner's ``file_pages``
    (every row of a file region but PREFETCH and EVICT, sorted) and ``file_page_sets``
    (page-set rows when there are any, else fault rows, in first-use order). Without
    page-set rows they are the same pages; with them, the data files the program used
    have the same pages, and the planner's may count more (fault rows with no page-set
    row, as in the libraries of a Python run), never fewer."""
    from pagecast.plan.shared_pages import file_pages
    from pagecast.trace.pageset import read_page_sets

    mapped, read = _write(data_dir / "cmp_map.bin", 64, 15), _write(data_dir / "cmp_read.bin", 32, 16)
    specs = [f"mmap:{mapped}:9,3,40,41,0,63", f"pread:{read}:7,2,30", f"mmap:{read}:20,2"]
    for ps in (False, True):
        drop_file(mapped)
        drop_file(read)
        out = tmp_path / f"t{int(ps)}.parquet"
        assert record_faults([str(touch), *specs], out, pageset=ps).exit_status == 0
        sets, planner = file_page_sets(out), file_pages(out)
        assert read_page_sets(out).source == ("pageset" if ps else "faults")
        named = {k: v for k, v in sets.items() if not k.startswith("inode ")}  # the planner names files by path
        assert set(named) <= set(planner)
        for f in (mapped, read):
            assert np.array_equal(np.unique(sets[str(f)]), planner[str(f)]), (ps, f.name)
        for k, pages in named.items():
            assert np.isin(pages, planner[k]).all(), k
            if not ps:
                assert np.array_equal(np.unique(pages), planner[k]), k
        if not ps:
            assert set(named) == set(planner)
    assert file_pages(tmp_path / "t1.parquet")[str(read)].tolist() == [2, 7, 20, 30]
