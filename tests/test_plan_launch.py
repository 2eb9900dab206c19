"""Planned runs: the plan format (Python and the C launcher agree), the launcher's
transparency (output, stdin, pid, exit status, signals identical to the bare program),
its warnings (corrupt, stale, missing) and the pages it really warms (mincore)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cold_support import ResidencyWatch
from pagecast.errors import PagecastError
from pagecast.launch.binary import launcher_path
from pagecast.plan.format import (
    FileIdentity,
    FilePlan,
    PlanDoc,
    checksum,
    decode_plan,
    encode_plan,
    read_plan,
    write_plan,
)
from pagecast.util.native import build
from pagecast.util.pagecache import drop_file, resident
from plan_support import pagecast_env

PAGE = 4096


def _pagecast(*args: str, **kw) -> subprocess.CompletedProcess:
    """`pagecast ...` as the console entry runs it (main() with sys.argv: the fast path)."""
    return subprocess.run([sys.executable, "-m", "pagecast", *args], env=pagecast_env(), capture_output=True, **kw)


@pytest.fixture()
def disk_file(tmp_path: Path):
    # on the repository's disk, not tmpfs: a file must be able to be cold
    base = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata"
    base.mkdir(parents=True, exist_ok=True)
    p = base / f"plan-{os.getpid()}-{tmp_path.name}.bin"
    p.write_bytes(np.random.default_rng(7).integers(0, 256, 128 * PAGE, dtype=np.uint8).tobytes())
    yield p
    p.unlink(missing_ok=True)


def _plan(tmp_path: Path, files: list[FilePlan], name: str = "p.plan") -> Path:
    out = tmp_path / name
    write_plan(out, PlanDoc(files))
    return out


def _warm(path: Path, ranges: list[tuple[int, int]], **kw) -> FilePlan:
    return FilePlan(str(path), FileIdentity.of(path), "warm", ranges, **kw)


# ---- format -------------------------------------------------------------------------


def test_round_trip_with_awkward_paths_and_texts():
    doc = PlanDoc([
        FilePlan("/data/with space/new\nline%.bin", FileIdentity(10, 2, 3, 4, 5), "warm", [(0, 3), (7, 1)], depth=4,
                 chunk_kib=256, gain_ms=12.5, reason="über 50 % -"),
        FilePlan("-", FileIdentity(1, 1, 1, 1, 1), "pack", arg="/p/x.pack"),
        FilePlan("/x", FileIdentity(1, 1, 1, 1, 1), "per-fault", arg="markov"),
        FilePlan("/y", FileIdentity(0, 0, 0, 0, 0)),
    ])  # fmt: skip
    back = decode_plan(encode_plan(doc))
    assert back == doc
    lines = encode_plan(doc).splitlines()
    assert len(lines) == 1 + 4 + 2 + 1  # header, 4 files, 2 ranges, end: the newline in the path is escaped
    assert [len(line.split(b" ")) for line in lines[1:-1]] == [15, 3, 3, 15, 15, 15]


def test_writer_rejects_overlapping_ranges_and_unknown_strategy(tmp_path):
    with pytest.raises(PagecastError, match="disjoint"):
        encode_plan(PlanDoc([FilePlan("/a", FileIdentity(1, 1, 1, 1, 1), "warm", [(0, 4), (3, 2)])]))
    with pytest.raises(PagecastError, match="unknown strategy"):
        encode_plan(PlanDoc([FilePlan("/a", FileIdentity(1, 1, 1, 1, 1), "teleport")]))
    assert not list(tmp_path.iterdir())


def _corruptions(good: bytes) -> dict[str, bytes]:
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x01
    return {
        "truncated": good[: len(good) * 2 // 3],
        "bad magic": b"PAGECAST-PLAM" + good[13:],
        "wrong version": good.replace(b"PAGECAST-PLAN 3", b"PAGECAST-PLAN 4", 1),
        "garbage": bytes(np.random.default_rng(3).integers(0, 256, 500, dtype=np.uint8)),
        "bit flip": bytes(flipped),
        "empty": b"",
    }


def test_python_reader_refuses_every_corruption_in_one_line(tmp_path, disk_file):
    good = encode_plan(PlanDoc([_warm(disk_file, [(0, 2), (10, 5)])]))
    for what, data in _corruptions(good).items():
        p = tmp_path / "bad.plan"
        p.write_bytes(data)
        with pytest.raises(PagecastError) as e:
            read_plan(p)
        msg = str(e.value)
        assert "\n" not in msg and str(p) in msg, what


# ---- transparency ---------------------------------------------------------------------

PROG = ("import os, sys; data = sys.stdin.read(); print('out', data.upper()); print('err', len(data), file=sys.stderr); "
        "code = int(sys.argv[1]); os.kill(os.getpid(), -code) if code < 0 else sys.exit(code)")  # fmt: skip


@pytest.mark.parametrize("code", [0, 3, -signal.SIGTERM, -signal.SIGKILL])
def test_output_stdin_and_exit_status_identical_with_and_without_plan(tmp_path, disk_file, code):
    plan = _plan(tmp_path, [_warm(disk_file, [(0, 4), (20, 8)])])
    cmd = [sys.executable, "-c", PROG, str(code)]
    bare = subprocess.run(cmd, input=b"hello\n", capture_output=True)
    planned = _pagecast("run", "--plan", str(plan), "--", *cmd, input=b"hello\n")
    assert bare.returncode == code
    assert (planned.returncode, planned.stdout, planned.stderr) == (bare.returncode, bare.stdout, bare.stderr)


def test_signal_dispositions_identical_with_and_without_plan(tmp_path, disk_file):
    # the Python entry ignores SIGPIPE; an ignored signal survives exec unless reset
    plan = _plan(tmp_path, [_warm(disk_file, [(0, 4)])])
    cmd = ["grep", "-E", "^Sig(Ign|Blk|Cgt)", "/proc/self/status"]
    bare = subprocess.run(cmd, capture_output=True)
    planned = _pagecast("run", "--plan", str(plan), "--", *cmd)
    assert planned.stdout == bare.stdout and b"SigIgn" in bare.stdout
    piped = _pagecast("run", "--plan", str(plan), "--", "sh", "-c", "yes | head -n 1")
    assert (piped.returncode, piped.stdout, piped.stderr) == (0, b"y\n", b"")


def test_killed_program_exits_128_plus_n_in_a_shell_and_with_json(tmp_path, disk_file):
    plan = _plan(tmp_path, [_warm(disk_file, [(0, 4)])])
    inner = f"{sys.executable} -m pagecast run --plan {plan} -- sh -c 'kill -9 $$'; echo status=$?"
    shell = subprocess.run(["sh", "-c", inner], env=pagecast_env(), capture_output=True, text=True)
    assert shell.stdout.strip() == "status=137"
    js = _pagecast("run", "--plan", str(plan), "--json", "--", "sh", "-c", "kill -TERM $$")
    rep = json.loads(js.stdout)
    assert js.returncode == 143 and rep["exit_status"] == 143 and rep["returncode"] == -signal.SIGTERM


def test_program_keeps_the_pid_and_has_no_child_of_ours(tmp_path, disk_file):
    plan = _plan(tmp_path, [_warm(disk_file, [(0, 64)])])
    prog = ("import os, time; print(os.getpid()); time.sleep(0.2)\n"
            "try:\n    print(os.waitpid(-1, os.WNOHANG))\nexcept ChildProcessError:\n    print('no children')")  # fmt: skip
    p = subprocess.Popen([sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--", sys.executable, "-c", prog],
                         env=pagecast_env(), stdout=subprocess.PIPE, text=True)  # fmt: skip
    out, _ = p.communicate(timeout=60)
    assert out.split("\n")[:2] == [str(p.pid), "no children"]


def test_json_has_the_documented_shape(tmp_path, disk_file):
    missing = FilePlan(str(tmp_path / "gone.bin"), FileIdentity(1, 1, 1, 1, 1), "warm", [(0, 1)])
    plan = _plan(tmp_path, [_warm(disk_file, [(0, 4), (9, 3)]), missing])
    r = _pagecast(
        "run", "--plan", str(plan), "--json", "--", sys.executable, "-c", "import time; time.sleep(0.3); print('x')"
    )
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and r.stderr.decode().count("\n") == 2  # the program's 'x' (moved to stderr) + one warning
    assert set(rep) == {
        "mode",
        "plan",
        "plan_error",
        "returncode",
        "exit_status",
        "wall_s",
        "prefetch",
        "files",
        "live",
    }
    assert rep["plan_error"] is None and rep["live"] is None
    files = {f["path"]: f for f in rep["files"]}
    assert files[str(disk_file)]["status"] == "warmed" and files[str(disk_file)]["pages_issued"] == 7
    assert files[missing.path]["status"] == "missing"
    assert rep["prefetch"]["pages_issued"] == 7 and rep["prefetch"]["bytes_issued"] == 7 * PAGE


# ---- warnings ---------------------------------------------------------------------------


def test_corrupt_plan_one_warning_and_the_program_runs(tmp_path, disk_file):
    good = encode_plan(PlanDoc([_warm(disk_file, [(0, 2), (10, 5)])]))
    cmd = ["sh", "-c", "echo ran; exit 4"]
    for what, data in _corruptions(good).items():
        p = tmp_path / "bad.plan"
        p.write_bytes(data)
        r = _pagecast("run", "--plan", str(p), "--", *cmd)
        err = r.stderr.decode()
        assert (r.returncode, r.stdout) == (4, b"ran\n"), what
        assert err.count("\n") == 1 and str(p) in err and "running the program without it" in err, (what, err)
    r = _pagecast("run", "--plan", str(tmp_path / "nonexistent.plan"), "--", *cmd)
    assert r.returncode == 4 and r.stderr.decode().count("\n") == 1


def test_stale_file_one_warning_naming_it_and_nothing_warmed(tmp_path, disk_file):
    plan = _plan(tmp_path, [_warm(disk_file, [(0, 32)])])
    with open(disk_file, "r+b") as f:  # same size, new content: mtime/ctime change
        f.write(b"changed")
    drop_file(disk_file)
    status = tmp_path / "status.json"
    r = _pagecast("run", "--plan", str(plan), "--plan-status", str(status), "--", "sh", "-c", "sleep 0.2; echo ran")
    err = r.stderr.decode()
    assert r.returncode == 0 and r.stdout == b"ran\n"
    assert err.count("\n") == 1 and str(disk_file) in err and "changed since it was recorded" in err
    rep = _wait_json(status)
    assert rep["files"][0]["status"] == "stale" and rep["prefetch"]["pages_issued"] == 0
    assert resident(disk_file)[:32].sum() == 0


def test_missing_file_one_warning(tmp_path):
    gone = FilePlan(str(tmp_path / "gone.bin"), FileIdentity(1, 1, 1, 1, 1), "stream")
    r = _pagecast("run", "--plan", str(_plan(tmp_path, [gone])), "--", "echo", "ok")
    assert r.returncode == 0 and r.stdout == b"ok\n"
    assert r.stderr.decode().count("\n") == 1 and "gone.bin: cannot open" in r.stderr.decode()


def test_per_fault_without_python_is_reported_not_silent(tmp_path, disk_file):
    plan = _plan(tmp_path, [FilePlan(str(disk_file), FileIdentity.of(disk_file), "per-fault", arg="markov")])
    r = subprocess.run([launcher_path(), str(plan), "--", "echo", "ok"], capture_output=True, text=True)
    assert r.stdout == "ok\n" and "per-fault needs pagecast's Python live machinery" in r.stderr


# ---- the pages really arrive ----------------------------------------------------------------


def _wait_json(path: Path, timeout: float = 10.0) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists():
            return json.loads(path.read_text())
        time.sleep(0.02)
    raise AssertionError(f"no status file {path}")


def _run_watched(
    tmp_path: Path, plan: Path, f: Path, want: np.ndarray
) -> tuple[subprocess.CompletedProcess, dict, np.ndarray]:
    """``sleep 0.5`` under ``plan`` with ``f`` cold: the result, the launcher's status report
    and the pages of ``f`` seen resident (every page of ``want``, or after 60 s what was)."""
    drop_file(f)
    assert resident(f).sum() == 0
    status = tmp_path / "status.json"
    with ResidencyWatch(f) as watch:
        r = _pagecast("run", "--plan", str(plan), "--plan-status", str(status), "--", "sleep", "0.5")
        rep = _wait_json(status)
        return r, rep, watch.seen(f, want)


@pytest.mark.parametrize("depth", [1, 3])
def test_warm_reads_exactly_the_planned_pages_of_a_cold_file(tmp_path, disk_file, depth):
    ranges = [(3, 5), (40, 1), (64, 20)]
    plan = _plan(tmp_path, [_warm(disk_file, ranges, depth=depth, chunk_kib=16)])
    want = np.zeros(128, bool)
    for a, n in ranges:
        want[a : a + n] = True
    r, rep, got = _run_watched(tmp_path, plan, disk_file, want)
    assert r.returncode == 0
    assert rep["files"][0]["status"] == "warmed" and rep["prefetch"]["pages_issued"] == want.sum()
    assert rep["prefetch"]["requests"] == sum(-(-n // 4) for _, n in ranges)  # 16 KiB chunks
    np.testing.assert_array_equal(got, want)


def test_stream_whole_file(tmp_path, disk_file):
    plan = _plan(tmp_path, [FilePlan(str(disk_file), FileIdentity.of(disk_file), "stream")])
    r, rep, got = _run_watched(tmp_path, plan, disk_file, np.ones(128, bool))
    assert r.returncode == 0 and rep["files"][0]["status"] == "warmed" and rep["files"][0]["pages_issued"] == 128
    assert got.all(), f"pages never seen resident: {np.flatnonzero(~got).tolist()}"


def test_stream_variant_reads_the_whole_file_in_window_requests(tmp_path, disk_file):
    """``predicted+stream`` (kernel_plans.with_stream) through the real launcher: the whole
    file, in requests of the WILLNEED window (here 64 KiB: 16 pages), beside the program."""
    from pagecast.plan.kernel_plans import with_stream

    doc = with_stream(PlanDoc([FilePlan(str(disk_file), FileIdentity.of(disk_file))]), window_kb=lambda dev: 64)
    plan = tmp_path / "s.plan"
    write_plan(plan, doc)
    r, rep, got = _run_watched(tmp_path, plan, disk_file, np.ones(128, bool))
    assert r.returncode == 0 and rep["files"][0]["status"] == "warmed"
    assert rep["prefetch"]["pages_issued"] == 128 and rep["prefetch"]["requests"] == 8
    assert got.all(), f"pages never seen resident: {np.flatnonzero(~got).tolist()}"


def test_stream_reads_by_sendfile_without_copying(tmp_path, disk_file):
    """A ``stream`` file through the real launcher: every request one ``sendfile`` to
    /dev/null (the kernel's sequential read-ahead, nothing copied into the prefetcher), no
    pread of the data; every page lands resident."""
    import shutil

    if shutil.which("strace") is None:
        pytest.skip("needs strace to see the prefetcher's system calls")
    plan = _plan(tmp_path, [FilePlan(str(disk_file), FileIdentity.of(disk_file), "stream", depth=1, chunk_kib=64)])
    drop_file(disk_file)
    log, status = tmp_path / "strace.log", tmp_path / "status.json"
    with ResidencyWatch(disk_file) as watch:
        r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=sendfile,pread64", "-o", str(log), launcher_path(),
                            "--status", str(status), str(plan), "--", "sleep", "0.5"])  # fmt: skip
        rep = _wait_json(status)
        got = watch.seen(disk_file, np.ones(128, bool))
    assert r.returncode == 0 and rep["files"][0]["status"] == "warmed" and rep["prefetch"]["requests"] == 8
    calls = log.read_text().splitlines()
    # a call strace sees interrupted by another thread's is split over two lines; its result is on the second
    sends = [c for c in calls if "sendfile" in c and c.endswith("= 65536")]
    assert len(sends) == 8, calls  # 8 requests of 64 KiB, each one sendfile
    assert not [c for c in calls if "pread64" in c and c.endswith("= 65536")]  # no copy of the data
    assert got.all(), f"pages never seen resident: {np.flatnonzero(~got).tolist()}"


def test_prefetcher_stops_when_the_program_exits(tmp_path, disk_file):
    # 4096 scattered one-page *reads* (stream, one thread) of a cold 64 MiB file each wait
    # for the disk, so together they take far longer than `true` lives. (WILLNEED only
    # queues its reads: 8192 of those once finished before `true` exited on a busy machine.)
    with open(disk_file, "wb") as f:
        f.write(bytes(64 << 20))
    ident = FileIdentity.of(disk_file)
    plan = _plan(tmp_path, [FilePlan(str(disk_file), ident, "stream", [(i * 4, 1) for i in range(4096)], depth=1,
                                     chunk_kib=4)])  # fmt: skip
    drop_file(disk_file)
    status = tmp_path / "status.json"
    r = subprocess.run([launcher_path(), "--status", str(status), str(plan), "--", "true"])
    rep = _wait_json(status)
    assert r.returncode == 0 and rep["prefetch"]["stopped"] == "program-exited"
    assert rep["files"][0]["status"] == "stopped" and rep["prefetch"]["pages_issued"] < 8192


# ---- start-up path --------------------------------------------------------------------------


def test_run_plan_fast_path_imports_no_heavy_module(tmp_path, disk_file):
    launcher_path()  # built and stamped: a first build may import what it likes
    plan = _plan(tmp_path, [_warm(disk_file, [(0, 1)])])
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "pagecast", "run", "--plan", str(plan), "--", "true"],
                       env=pagecast_env(), capture_output=True, text=True)  # fmt: skip
    imported = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert r.returncode == 0 and "pagecast.launch.command" in imported
    heavy = {m for m in imported if m.split(".")[0] in {"numpy", "torch", "pyarrow", "numba", "argparse", "pathlib"}}
    assert heavy == set()


def test_cli_main_with_argv_runs_the_plan_as_a_child(tmp_path, disk_file, capfd):
    from pagecast.cli import main

    plan = _plan(tmp_path, [_warm(disk_file, [(0, 2)])])
    assert main(["run", "--plan", str(plan), "--", "sh", "-c", "echo via-main; exit 6"]) == 6
    assert capfd.readouterr().out == "via-main\n"


def test_without_a_compiler_the_program_runs_unplanned(tmp_path, disk_file):
    plan = _plan(tmp_path, [_warm(disk_file, [(0, 2)])])
    env = {**pagecast_env(), "CC": "no-such-cc", "PAGECAST_BUILD_DIR": str(tmp_path / "empty-build")}
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--", "sh", "-c", "echo ran; exit 7"],
                       env=env, capture_output=True, text=True)  # fmt: skip
    assert (r.returncode, r.stdout) == (7, "ran\n")
    assert r.stderr.count("\n") == 1 and "native launcher is not available" in r.stderr


def test_program_not_found_127_like_a_shell(tmp_path, disk_file):
    plan = _plan(tmp_path, [_warm(disk_file, [(0, 2)])])
    r = _pagecast("run", "--plan", str(plan), "--", "/no/such/program")
    assert r.returncode == 127 and r.stderr.decode().count("\n") == 1 and b"/no/such/program" in r.stderr


def test_plan_show_json_and_table(tmp_path, disk_file, capsys):
    from pagecast.cli import main

    plan = _plan(tmp_path, [_warm(disk_file, [(0, 2), (5, 3)], reason="why not")])
    assert main(["plan", "--show", str(plan), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["files"][0]["ranges"] == [[0, 2], [5, 3]] and view["files"][0]["pages"] == 5
    assert main(["plan", "--show", str(plan)]) == 0
    assert "why not" in capsys.readouterr().out
    (tmp_path / "bad.plan").write_text("nope")
    assert main(["plan", "--show", str(tmp_path / "bad.plan")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad magic" in err


def test_console_entry_takes_the_fast_path_before_the_cli_and_prints_the_launcher(tmp_path, disk_file):
    # the `pagecast` command pip installs (pyproject.toml script-files), run by this interpreter
    script = Path(__file__).resolve().parents[1] / "bin" / "pagecast"
    entry = script.read_text()
    plan = _plan(tmp_path, [_warm(disk_file, [(0, 1)])])
    r = subprocess.run([sys.executable, "-X", "importtime", str(script), "run", "--plan", str(plan), "--", "sh", "-c",
                        "echo ok; exit 9"], env=pagecast_env(), capture_output=True, text=True)  # fmt: skip
    imported = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert (r.returncode, r.stdout) == (9, "ok\n")
    base = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"], env=pagecast_env(), capture_output=True, text=True
    )
    at_startup = {
        line.rsplit("|", 1)[1].strip() for line in base.stderr.splitlines() if line.startswith("import time:")
    }
    assert "pagecast.launch.command" in imported
    # beyond what the interpreter's start-up (site, .pth files) imports anyway; pip's generated scripts import re
    assert not (imported - at_startup) & {"pagecast.cli", "re", "argparse", "pathlib"}
    r = subprocess.run(
        [sys.executable, "-c", entry, "launcher-path"], env=pagecast_env(), capture_output=True, text=True
    )
    assert (r.returncode, r.stdout) == (0, launcher_path() + "\n")
    # the printed launcher runs a plan with no Python in front
    r = subprocess.run(
        [r.stdout.strip(), str(plan), "--", "sh", "-c", "echo direct; exit 4"], capture_output=True, text=True
    )
    assert (r.returncode, r.stdout, r.stderr) == (4, "direct\n", "")
    r = subprocess.run(
        [sys.executable, "-c", entry, "launcher-path", "--json"], env=pagecast_env(), capture_output=True, text=True
    )
    assert json.loads(r.stdout) == {"launcher": launcher_path(), "advice_shim": launcher_path() + "-advice.so"}


def _edited_plan(tmp_path: Path, f: Path, strategy: str, arg: str, gain: str = "1.000") -> Path:
    """A one-file plan with ARG and GAIN_MS written as given (re-sealed: a valid checksum)."""
    body = encode_plan(PlanDoc([FilePlan(str(f), FileIdentity.of(f), strategy, arg="x")])).decode()
    first, rec = body.split("\n")[:2]
    fields = rec.split(" ")
    fields[10], fields[11] = gain, arg or "-"
    text = (first + "\n" + " ".join(fields) + "\n").encode()
    p = tmp_path / f"{strategy}.plan"
    p.write_bytes(text + f"end 1 {checksum(text):08x}\n".encode())
    return p


@pytest.mark.parametrize(
    "strategy,arg,gain,warning,as_json",
    [
        ("per-fault", "nosuch", "1.000", "unknown prefetcher 'nosuch'", False),
        ("per-fault", "nosuch", "1.000", "unknown prefetcher 'nosuch'", True),
        ("per-fault", "markov:bogus=1", "1.000", "markov has no option 'bogus'", False),
        ("per-fault", "", "1.000", "strategy per-fault needs an argument", False),
        ("pack", "", "1.000", "strategy pack needs an argument", True),
        ("per-fault", "markov", "fast", "bad gain 'fast'", False),
        ("pack", "no-such.pack", "1.000", "no-such.pack", False),
        ("per-fault", "stride:degree=4", "1.000", None, False),
    ],
)
def test_a_plan_pagecast_cannot_fully_use_costs_one_warning_and_the_program_runs(
    tmp_path, disk_file, strategy, arg, gain, warning, as_json
):
    plan = _edited_plan(tmp_path, disk_file, strategy, arg, gain)
    opts = ["--json"] if as_json else []
    r = _pagecast("run", "--plan", str(plan), *opts, "--", "sh", "-c", "echo ran; exit 3", timeout=120)
    err = r.stderr.decode()
    assert r.returncode == 3, err
    if as_json:  # the program's stdout goes to stderr, the report to stdout
        assert json.loads(r.stdout)["exit_status"] == 3 and "ran\n" in err
    else:
        assert r.stdout == b"ran\n"
    ours = [ln for ln in err.splitlines() if ln.startswith("pagecast")]
    if warning is None:
        assert ours == []
    else:
        assert len(ours) == 1 and warning in ours[0] and "warning" in ours[0], err


def test_a_fifo_in_place_of_a_plan_or_a_planned_file_never_blocks(tmp_path, disk_file):
    # the plan itself: both readers refuse it at once (the launcher then runs the program without it)
    fifo = tmp_path / "fifo.plan"
    os.mkfifo(fifo)
    r = subprocess.run([launcher_path(), str(fifo), "--", "echo", "ran"], capture_output=True, timeout=30)
    assert r.returncode == 0 and r.stdout == b"ran\n" and b"not a regular file" in r.stderr
    with pytest.raises(PagecastError, match="not a regular file"):
        read_plan(fifo)
    # a pack handed over to Python: one warning, the program runs
    pack_plan = _edited_plan(tmp_path, disk_file, "pack", str(fifo))
    r = _pagecast("run", "--plan", str(pack_plan), "--", "sh", "-c", "echo ran; exit 3", timeout=60)
    assert r.returncode == 3 and r.stdout == b"ran\n", r.stderr
    assert r.stderr.decode().count("\n") == 1 and "not a regular file" in r.stderr.decode()
    # a planned file swapped for a FIFO after the launcher's stat, before the prefetcher opens it
    swap = build("swap_after_stat", [Path(__file__).parent / "swap_after_stat.c"], ldflags=["-ldl"])
    plan = _plan(tmp_path, [_warm(disk_file, [(0, 8)])])
    env = pagecast_env(LD_PRELOAD=str(swap), SWAP_AFTER_STAT=str(disk_file))
    # the installed launcher is linked statically where it can be, and a preload reaches only
    # a dynamically linked one: the same sources, linked dynamically, for this part
    from pagecast.launch.binary import SOURCES

    dynamic = build("pagecast-launch-dynamic", list(SOURCES), shared=False, ldflags=["-pthread"])
    p = subprocess.Popen([str(dynamic), "--wait", str(plan), "--", "sleep", "1"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, start_new_session=True)  # fmt: skip
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise AssertionError("the prefetcher hung on the FIFO") from None
    assert stat.S_ISFIFO(os.lstat(disk_file).st_mode)  # the swap happened
    rep = json.loads(out)
    assert p.returncode == 0 and rep["returncode"] == 0
    (f,) = rep["files"]
    assert f["status"] == "missing" and "not a regular file" in f["detail"], f
