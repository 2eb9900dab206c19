"""Plan format version 3 (plan-level options) and the launcher's `issue before`: the plan's
warm files issued by the launcher itself, synchronously, before it execs the program.

Checked on real cold files (posix_fadvise DONTNEED on the test's own files) with the real
launcher: the program itself counts the file's resident pages (mincore) from its first
moment, strace shows every request made before the program's exec and no process forked,
and an option this pagecast does not know refuses the plan in both readers while the
program runs as without it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cold_support import cold_file_maker
from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.launch.binary import launcher_path
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, checksum, decode_plan, encode_plan, write_plan
from pagecast.util.native import build
from pagecast.util.pagecache import drop_file, resident
from plan_support import pagecast_env

PAGE = 4096
RANGES = [(0, 5), (20, 3), (64, 70), (200, 1)]  # 79 pages; in 16 KiB chunks: 2 + 1 + 18 + 1 requests
CHUNKS = [(a + k, min(4, n - k)) for a, n in RANGES for k in range(0, n, 4)]

# The program under test: from its first instruction (a C program: no interpreter start-up
# in between) it maps argv[1] (no fault, no read-ahead; by the system call, which a
# preloaded shim does not see) and polls mincore every millisecond, collecting every page
# it ever sees resident: a page nobody touches can be evicted again at any moment (a DAMON
# pageout scheme on the host did, within a second of the read), so the union is what was
# read. WILLNEED only queues the reads, so it polls until the union has at least argv[3]
# pages (at most 20 s: reads can queue behind other jobs' I/O), then until the union has
# not grown for 0.5 s, so pages beyond the plan show too. Prints the pages and LD_PRELOAD
# as JSON; exits with argv[2].
RESIDENT_AT_START_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
int main(int argc, char **argv) {
    if (argc < 4) return 100;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) return 101;
    size_t n = (st.st_size + 4095) / 4096, got = 0;
    /* the system call itself: a preloaded shim (live feedback) must not see this mapping */
    void *m = (void *)syscall(SYS_mmap, NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0L);
    unsigned char *vec = malloc(n), *seen = calloc(n, 1);
    long want = atol(argv[3]);
    double end = now() + 20, since = 0;
    for (int settling = 0;;) {
        mincore(m, st.st_size, vec);
        size_t before = got;
        for (size_t p = 0; p < n; p++)
            if ((vec[p] & 1) && !seen[p]) seen[p] = 1, got++;
        if (!settling && ((long)got >= want || now() > end)) settling = 1, since = now();
        if (settling && got != before) since = now();
        if (settling && now() - since >= 0.5) break;
        usleep(1000);
    }
    printf("{\"resident\": [");
    for (size_t p = 0, k = 0; p < n; p++)
        if (seen[p]) printf("%s%zu", k++ ? ", " : "", p);
    const char *pre = getenv("LD_PRELOAD");
    printf("], \"preload\": \"%s\"}\n", pre ? pre : "");
    return atoi(argv[2]);
}
"""

# Waits (at most 60 s) until pages argv[2:] ("A-B", end exclusive) of argv[1] have all been
# seen resident (each once: see above), so a prefetcher beside it is not stopped by its exit
# before it issued them.
WAIT_FOR = r"""
import ctypes, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
libc = ctypes.CDLL("libc.so.6")
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
addr = libc.mmap(None, size, 1, 1, fd, 0)
vec = (ctypes.c_ubyte * (size // 4096))()
want = {p for r in sys.argv[2:] for p in range(*map(int, r.split("-")))}
end = time.monotonic() + 60
while want and time.monotonic() < end:
    libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec)
    want -= {p for p in want if vec[p] & 1}
    time.sleep(0.002)
"""


def _pagecast(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pagecast", *args], env=pagecast_env(), capture_output=True, **kw)


@pytest.fixture(scope="module")
def resident_at_start(tmp_path_factory) -> str:
    src = tmp_path_factory.mktemp("prog") / "resident_at_start.c"
    src.write_text(RESIDENT_AT_START_C)
    return str(build("resident_at_start", [src], shared=False, cflags=("-O2", "-Wall")))


@pytest.fixture()
def cold_file(tmp_path: Path):
    """Files on the repository's disk (not tmpfs, so they can be cold) of 'pages' pages."""
    with cold_file_maker(f"issue-{tmp_path.name}") as make:
        yield make


def _warm(f: Path, ranges: list[tuple[int, int]], **kw) -> FilePlan:
    return FilePlan(str(f), FileIdentity.of(f), "warm", ranges, **kw)


def _reseal(body_lines: list[str]) -> bytes:
    body = ("\n".join(body_lines) + "\n").encode()
    nfiles = sum(1 for line in body_lines if line.startswith("file "))
    return body + f"end {nfiles} {checksum(body):08x}\n".encode()


def _body(doc: PlanDoc) -> list[str]:
    return encode_plan(doc).decode().split("\n")[:-2]


def _pages(ranges: list[tuple[int, int]]) -> list[int]:
    return [p for a, n in ranges for p in range(a, a + n)]


# ---- format version 3 ---------------------------------------------------------------------


def test_v3_round_trip_with_options():
    files = [FilePlan("/d/a b.bin", FileIdentity(10, 2, 3, 4, 5), "warm", [(0, 3)], reason="x")]
    doc = PlanDoc(files, issue="before", note="measured: 1.08x the best kernel strategy (WILLNEED whole) - 100 %\n")
    data = encode_plan(doc)
    lines = data.decode().split("\n")
    assert lines[:3] == ["PAGECAST-PLAN 3", "opt issue before",
                         "opt note measured:%201.08x%20the%20best%20kernel%20strategy%20(WILLNEED%20whole)%20-%20100%20%25%0A"]  # fmt: skip
    back = decode_plan(data)
    assert back == doc and (back.issue, back.note) == ("before", doc.note)
    view = back.to_dict()
    assert (view["version"], view["issue"], view["note"]) == (3, "before", doc.note)
    # defaults are not written: a plan without options is its version 2 layout under a new number
    plain = encode_plan(PlanDoc(files))
    assert plain.split(b"\n")[1].startswith(b"file ") and decode_plan(plain) == PlanDoc(files)
    assert decode_plan(plain).to_dict()["issue"] == "beside"


def test_checksum_covers_the_option_lines(tmp_path):
    data = encode_plan(PlanDoc([FilePlan("/a", FileIdentity(1, 1, 1, 1, 1), "warm", [(0, 1)])], issue="before"))
    edited = data.replace(b"opt issue before", b"opt issue beside")
    assert len(edited) == len(data) and edited != data
    with pytest.raises(PagecastError, match="checksum mismatch"):
        decode_plan(edited)


def _bad_option_plans(f: Path) -> dict[str, tuple[bytes, str]]:
    """Resealed plans whose options the readers must refuse → (data, what the one line says)."""
    body = _body(PlanDoc([_warm(f, [(0, 4)])]))
    v2 = ["PAGECAST-PLAN 2", *body[1:]]
    return {
        "unknown key": (_reseal([body[0], "opt colour blue", *body[1:]]), "unknown option 'colour'"),
        "unknown issue": (_reseal([body[0], "opt issue after", *body[1:]]), "'after'"),
        "twice": (_reseal([body[0], "opt issue before", "opt issue before", *body[1:]]), "given twice"),
        "no value": (_reseal([body[0], "opt note", *body[1:]]), "opt KEY VALUE"),
        "after a file": (_reseal([*body, "opt issue before"]), "expected a 'file' record"),
        "in a version 2 plan": (_reseal([v2[0], "opt issue before", *v2[1:]]), "expected a 'file' record"),
    }


def test_python_reader_refuses_bad_options_in_one_line_naming_them(tmp_path, cold_file):
    for what, (data, says) in _bad_option_plans(cold_file(8)).items():
        p = tmp_path / "bad.plan"
        p.write_bytes(data)
        with pytest.raises(PagecastError) as e:
            decode_plan(data, p)
        msg = str(e.value)
        assert "\n" not in msg and str(p) in msg and says in msg, (what, msg)
    with pytest.raises(PagecastError, match="unknown issue option 'soon'"):
        encode_plan(PlanDoc([], issue="soon"))


PROG = ("import sys; data = sys.stdin.read(); print('out', data.upper()); print('err', len(data), file=sys.stderr); "
        "sys.exit(3)")  # fmt: skip


def test_launcher_refuses_bad_options_and_the_program_runs_as_without_the_plan(tmp_path, cold_file):
    f = cold_file(8)
    cmd = [sys.executable, "-c", PROG]
    bare = subprocess.run(cmd, input=b"hi\n", capture_output=True)
    for what, (data, says) in _bad_option_plans(f).items():
        p = tmp_path / "bad.plan"
        p.write_bytes(data)
        r = _pagecast("run", "--plan", str(p), "--", *cmd, input=b"hi\n")
        err = r.stderr.decode()
        assert (r.returncode, r.stdout) == (bare.returncode, bare.stdout) == (3, b"out HI\n\n"), what
        assert err.startswith("pagecast run: warning: ") and err.count("\n") == 2, (what, err)  # ours + the program's
        first, rest = err.split("\n", 1)
        assert str(p) in first and says in first and "running the program without it" in first, (what, first)
        assert rest == bare.stderr.decode()
    # the report says why, and nothing was issued
    p = tmp_path / "newer.plan"
    p.write_bytes(_bad_option_plans(f)["unknown key"][0])
    r = _pagecast("run", "--plan", str(p), "--json", "--", "true")
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and "unknown option 'colour'" in rep["plan_error"] and rep["prefetch"] is None


def test_a_version_2_plan_still_reads_in_both_readers(tmp_path, cold_file):
    f = cold_file(64)
    doc = PlanDoc([_warm(f, [(2, 6), (30, 4)], chunk_kib=16)])
    v2 = _reseal(["PAGECAST-PLAN 2", *_body(doc)[1:]])
    assert decode_plan(v2) == doc
    p = tmp_path / "v2.plan"
    p.write_bytes(v2)
    r = _pagecast("run", "--plan", str(p), "--json", "--", sys.executable, "-c", WAIT_FOR, str(f), "2-8", "30-34")
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and rep["plan_error"] is None, r.stderr
    assert rep["prefetch"]["issue"] == "beside" and rep["prefetch"]["before_exec_s"] == 0
    assert rep["files"][0]["pages_issued"] == 10 and rep["prefetch"]["requests"] == 3


# ---- issue before ----------------------------------------------------------------------------


def test_issue_before_leaves_exactly_the_planned_pages_resident_when_the_program_starts(
    tmp_path, cold_file, resident_at_start
):
    f = cold_file(256)
    plan = tmp_path / "before.plan"
    write_plan(plan, PlanDoc([_warm(f, RANGES, chunk_kib=16)], issue="before"))
    assert resident(f).sum() == 0
    cmd = [resident_at_start, str(f), "4", "79"]
    r = _pagecast("run", "--plan", str(plan), "--", *cmd)
    assert (r.returncode, r.stderr) == (4, b"")
    seen = json.loads(r.stdout)
    assert seen == {"resident": _pages(RANGES), "preload": ""}  # no advice shim: no file needed it

    drop_file(f)
    r = _pagecast("run", "--plan", str(plan), "--json", "--", *cmd)
    rep = json.loads(r.stdout)
    assert r.returncode == 4 and json.loads(r.stderr)["resident"] == _pages(RANGES)  # the program's stdout, moved
    fr = rep["files"][0]
    assert (fr["status"], fr["pages_planned"], fr["pages_issued"], fr["feedback"]) == ("warmed", 79, 79, "off")
    pf = rep["prefetch"]
    assert (pf["issue"], pf["pages_issued"], pf["requests"], pf["errors"], pf["stopped"]) == (
        "before",
        79,
        22,
        0,
        "done",
    )
    assert 0 < pf["before_exec_s"] <= pf["elapsed_s"] and rep["wall_s"] >= pf["before_exec_s"]


def _strace_calls(log: Path) -> list[tuple[str, str]]:
    """(pid, call) per system call in an `strace -f` log, a call split by another process's
    ("<unfinished ...>" ... "<... NAME resumed>") put back together."""
    calls: list[tuple[str, str]] = []
    pending: dict[str, int] = {}
    for line in log.read_text().splitlines():
        pid, call = line.split(None, 1)
        if call.startswith("<... ") and pid in pending:
            i = pending.pop(pid)
            calls[i] = (pid, calls[i][1] + call.split(" resumed>", 1)[1])
            continue
        if call.endswith("<unfinished ...>"):
            pending[pid] = len(calls)
            call = call[: -len("<unfinished ...>")].rstrip()
        calls.append((pid, call))
    return calls


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")
def test_issue_before_requests_are_all_made_before_exec_and_nothing_is_forked(tmp_path, cold_file):
    f = cold_file(256)
    plan = tmp_path / "before.plan"
    write_plan(plan, PlanDoc([_warm(f, RANGES, chunk_kib=16)], issue="before"))
    true = shutil.which("true")
    log = tmp_path / "strace.log"
    subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e", "trace=fadvise64,execve,clone,clone3,fork,vfork",
                    launcher_path(), str(plan), "--", true], check=True, env=pagecast_env())  # fmt: skip
    pids, calls = zip(*_strace_calls(log))
    assert len(set(pids)) == 1  # one process throughout
    names = [c.split("(", 1)[0] for c in calls]
    assert names == ["execve", *["fadvise64"] * len(CHUNKS), "execve"] and true in calls[-1]
    # one WILLNEED per 16 KiB of each range, in plan order
    want = [f"{a * PAGE}, {n * PAGE}, POSIX_FADV_WILLNEED) = 0" for a, n in CHUNKS]
    assert [c.split(", ", 1)[1] for c in calls[1:-1]] == want

    # the same plan beside the program: the launcher forks, and issues nothing itself
    write_plan(plan, PlanDoc([_warm(f, RANGES, chunk_kib=16)]))
    subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e", "trace=fadvise64,execve,clone,clone3,fork,vfork",
                    launcher_path(), str(plan), "--", true], check=True, env=pagecast_env())  # fmt: skip
    lines = _strace_calls(log)
    ours = [call.split("(", 1)[0] for pid, call in lines if pid == lines[0][0]]
    assert ours[0] == "execve" and ours[-1] == "execve" and "fadvise64" not in ours
    assert {"clone", "clone3", "fork", "vfork"} & set(ours)


def test_issue_before_issues_a_large_file_whole_where_feedback_would_stop_beside(
    tmp_path, cold_file, resident_at_start
):
    # beside, a file the program never reads keeps at most its first batch (1,024 pages);
    # before the program starts there is no verdict to wait for: every planned page is issued
    f = cold_file(2048)
    reports, seen = {}, {}
    for issue in ("beside", "before"):
        drop_file(f)
        plan = tmp_path / f"{issue}.plan"
        write_plan(plan, PlanDoc([_warm(f, [(0, 1536)], depth=1, chunk_kib=64)], issue=issue))
        expect = "1536" if issue == "before" else "0"  # beside: only as long as its set keeps changing
        r = _pagecast("run", "--plan", str(plan), "--json", "--", resident_at_start, str(f), "0", expect)
        assert r.returncode == 0, r.stderr
        reports[issue], seen[issue] = json.loads(r.stdout)["files"][0], json.loads(r.stderr)["resident"]
    assert reports["beside"]["pages_issued"] <= 1024 and reports["beside"]["feedback"] == "waiting"
    before = reports["before"]
    assert (before["pages_issued"], before["feedback"], before["status"]) == (1536, "off", "warmed")
    assert seen["before"] == list(range(1536))


def test_issue_before_keeps_stream_advice_and_stale_files_on_todays_paths(tmp_path, cold_file, resident_at_start):
    warm, stream, advised, stale = cold_file(64), cold_file(32), cold_file(16), cold_file(16)
    stale_plan = _warm(stale, [(0, 4)])
    os.utime(stale, ns=(1, 1))  # changed since "recording": one warning, nothing issued
    plan = tmp_path / "mixed.plan"
    write_plan(plan, PlanDoc([
        _warm(warm, [(0, 8), (40, 8)], chunk_kib=16),
        FilePlan(str(stream), FileIdentity.of(stream), "stream"),
        FilePlan(str(advised), FileIdentity.of(advised), "nothing", advice="random"),
        stale_plan,
    ], issue="before"))  # fmt: skip
    # the program waits for the stream (so the prefetcher beside it is not stopped by its exit), then looks
    cmd = ["sh", "-c", '"$0" -c "$1" "$3" 0-32 && exec "$2" "$4" 0 16', sys.executable, WAIT_FOR, resident_at_start,
           str(stream), str(warm)]  # fmt: skip
    r = _pagecast("run", "--plan", str(plan), "--json", "--", *cmd)
    rep = json.loads(r.stdout)
    err = r.stderr.decode().split("\n")
    assert r.returncode == 0 and len(err) == 3 and str(stale) in err[0] and "changed since it was recorded" in err[0]
    seen = json.loads(err[1])
    assert seen["resident"] == [*range(8), *range(40, 48)]
    assert seen["preload"].endswith("-advice.so")  # the advice file still needs the shim
    files = {fr["path"]: fr for fr in rep["files"]}
    assert (files[str(warm)]["status"], files[str(warm)]["pages_issued"]) == ("warmed", 16)
    assert (files[str(stream)]["status"], files[str(stream)]["pages_issued"]) == ("warmed", 32)  # by the prefetcher
    assert files[str(advised)]["advice_applied"] is True and files[str(stale)]["status"] == "stale"
    assert rep["prefetch"]["pages_issued"] == 48 and rep["prefetch"]["requests"] == 4 + 1  # 16 KiB, 1 MiB chunks
    assert resident(stale).sum() == 0


def test_issue_before_with_prefetch_only_issues_and_returns(tmp_path, cold_file):
    f = cold_file(64)
    plan = tmp_path / "p.plan"
    write_plan(plan, PlanDoc([_warm(f, [(10, 12)], chunk_kib=4)], issue="before"))
    status = tmp_path / "status.json"
    r = subprocess.run([launcher_path(), "--prefetch-only", "--status", str(status), str(plan)], capture_output=True)
    assert r.returncode == 0 and r.stderr == b""
    rep = json.loads(status.read_text())  # written before it returned: nothing was left to a prefetcher
    assert rep["files"][0]["pages_issued"] == 12 and rep["prefetch"]["requests"] == 12


def test_hostile_ranges_in_an_issue_before_plan_are_clipped_to_the_file(tmp_path, cold_file):
    f = cold_file(16)
    body = _body(PlanDoc([_warm(f, [(0, 1), (14, 9223372036854775000)], chunk_kib=4)], issue="before"))
    body.append("r 9223372036854775806 1")  # past the end of the file
    body[2] = body[2].rsplit(" ", 1)[0] + " 3"
    p = tmp_path / "h.plan"
    p.write_bytes(_reseal(body))
    r = _pagecast("run", "--plan", str(p), "--json", "--", "sh", "-c", "echo ran; exit 6")
    rep = json.loads(r.stdout)
    assert r.returncode == 6 and r.stderr == b"ran\n" and rep["plan_error"] is None
    assert rep["files"][0]["pages_planned"] == 3 and rep["files"][0]["pages_issued"] == 3


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")
def test_issue_before_looks_each_file_up_once_and_checks_it_on_the_open_file(tmp_path, cold_file):
    """`issue before` opens each warm file once and checks its identity with fstat on it: no
    stat() by path first. A file gone, or replaced by a FIFO (which must not block the
    launch), costs one warning and the rest is issued; the program runs."""
    good, gone, fifo = cold_file(16), cold_file(16), cold_file(16)
    doc = PlanDoc([_warm(good, [(0, 4)]), _warm(gone, [(0, 4)]), _warm(fifo, [(0, 4)])], issue="before")
    gone.unlink()
    fifo.unlink()
    os.mkfifo(fifo)
    plan = tmp_path / "p.plan"
    write_plan(plan, doc)
    log = tmp_path / "strace.log"
    r = subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e", "trace=%file,fadvise64",
                        launcher_path(), str(plan), "--", sys.executable, "-c", "print('ran')"],
                       env=pagecast_env(), capture_output=True, timeout=60)  # fmt: skip
    assert r.returncode == 0 and r.stdout == b"ran\n"
    err = r.stderr.decode().strip().splitlines()
    assert err == [
        f"pagecast run: warning: {gone}: cannot open (No such file or directory); warm not done",
        f"pagecast run: warning: {fifo}: cannot open (not a regular file); warm not done",
    ]
    calls = [c for _, c in _strace_calls(log)]
    for f in (good, gone, fifo):
        by_path = [c for c in calls if f'"{f}"' in c]
        assert len(by_path) == 1 and by_path[0].startswith("openat("), by_path  # one lookup, no stat
    assert sum("POSIX_FADV_WILLNEED" in c for c in calls) == 1  # the good file's one range


def test_issue_before_of_many_files_issues_each_once_and_warns_each_bad_one(tmp_path):
    """A plan warming more files than the launcher issues from one thread (it splits them
    between two): every good file is issued exactly once, each stale, missing or non-regular
    file gets one warning line, and the program runs."""
    files = []
    for i in range(1100):
        p = tmp_path / f"f{i:04d}"
        p.write_bytes(bytes([i % 251]) * (2 * PAGE_SIZE))
        files.append(p)
    doc = PlanDoc([_warm(p, [(0, 2)]) for p in files], issue="before")
    stale, gone, fifo = files[7], files[500], files[1099]
    os.utime(stale, ns=(1, 1))
    gone.unlink()
    fifo.unlink()
    os.mkfifo(fifo)
    plan = tmp_path / "many.plan"
    write_plan(plan, doc)
    r = _pagecast("run", "--plan", str(plan), "--json", "--", "sh", "-c", "echo ran")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    warnings = [x for x in r.stderr.decode().splitlines() if "warning" in x]
    assert sorted(w.split(": ")[2] for w in warnings) == sorted(map(str, (stale, gone, fifo)))
    status = {fr["path"]: (fr["status"], fr["pages_issued"]) for fr in rep["files"]}
    bad = {str(stale): "stale", str(gone): "missing", str(fifo): "missing"}
    assert all(status[str(p)] == ((bad[str(p)], 0) if str(p) in bad else ("warmed", 2)) for p in files)
    assert rep["prefetch"]["pages_issued"] == 2 * (len(files) - 3) and rep["prefetch"]["requests"] == len(files) - 3


def test_a_plan_of_more_files_than_the_descriptor_limit_is_prefetched_beside_whole(tmp_path):
    """The prefetcher beside the program closes each file once its requests are done: with
    every descriptor held to the end, a plan of more files than the soft limit allows (1024
    by default; 256 here) reported every file past it missing and prefetched none of them."""
    files = []
    for i in range(600):
        p = tmp_path / f"f{i:04d}"
        p.write_bytes(bytes([i % 251]) * PAGE_SIZE)
        files.append(p)
    plan = tmp_path / "beside.plan"
    write_plan(plan, PlanDoc([_warm(p, [(0, 1)]) for p in files]))  # issue beside (the default)
    status = tmp_path / "status.json"
    r = subprocess.run(
        ["bash", "-c", 'ulimit -n 256 && exec "$0" --prefetch-only --status "$1" "$2"', launcher_path(), status, plan],
        capture_output=True,
    )
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 60
    while not status.exists() and time.monotonic() < deadline:  # the detached prefetcher writes it when done
        time.sleep(0.05)
    rep = json.loads(status.read_text())
    assert rep["prefetch"]["issue"] == "beside"
    assert [f["status"] for f in rep["files"]] == ["warmed"] * len(files)
    assert rep["prefetch"]["pages_issued"] == len(files)
