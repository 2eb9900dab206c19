"""Bad options and outputs are refused up front, in one line, with nothing created:
negative counts, a missing output directory, a directory given for a file, a read-only
directory or a full disk (an output the program's run cannot write is found before the
program runs, and the program's exit status is never lost), files to page that do not
exist, a model that is not one. Each case failed before: a traceback, a directory
created, an exit status 0, or a temporary file left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pagecast.cli import main as cli_main
from plan_support import pagecast_env


def _one_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


def _nothing_left(d: Path, *keep: str) -> None:
    assert sorted(p.name for p in d.iterdir()) == sorted(keep)


@pytest.mark.parametrize(
    "argv,words",
    [
        (["run", "--threads", "-3", "--", "true"], ["--threads -3", "negative"]),
        (["run", "--poll-ms", "0", "--", "true"], ["--poll-ms 0", "at least 1"]),
        (["simulate", "--capacity", "-5%", "t.parquet"], ["capacity", "-5%"]),
        (["simulate", "--bandwidth", "nan", "t.parquet"], ["--bandwidth nan", "finite"]),
        (["train", "t.parquet", "-o", "m.pt", "--val-fraction", "2"], ["--val-fraction 2.0", "fraction"]),
        (["record", "--ring-pages", "-1", "-o", "t.parquet", "--", "true"], ["--ring-pages -1"]),
        (["heatmap", "t.parquet", "-o", "h.png", "--time-bins", "0"], ["--time-bins 0"]),
        (["run", "--threads", "x", "--", "true"], ["--threads", "invalid int value"]),
        (["pager", "run", "w.bin:1M", "--flush-ms", "-5", "--", "true"], ["--flush-ms -5"]),
        (["train", "t.parquet", "-o", "no/m.pt"], ["no/m.pt", "does not exist"]),
        (["run", "--model", "none.pt", "--", "true"], ["none.pt", "no such file"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0] not in ("--threads",) else None,
)
def test_numeric_options_checked_before_any_work(tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    code = None
    try:
        code = cli_main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    assert code == 2
    _one_line(capsys, *words)
    _nothing_left(tmp_path)


def test_demo_epochs_refused_before_recording(tmp_path, capsys):
    """`demo --epochs -3` used to record for 40 s and then fail with a traceback."""
    t0 = time.monotonic()
    assert cli_main(["demo", "--epochs", "-3", "--out", str(tmp_path / "d")]) == 2
    _one_line(capsys, "--epochs -3")
    assert time.monotonic() - t0 < 30 and not (tmp_path / "d").exists()  # nothing recorded, nothing created


def test_bench_refuses_a_model_that_is_not_one_first(tmp_path, capsys):
    fake = tmp_path / "text.parquet"
    fake.write_text("not a model\n")
    assert cli_main(["bench", "--model", str(fake), "--out", str(tmp_path / "b")]) == 2
    _one_line(capsys, "text.parquet", "not a pagecast model file")
    assert not (tmp_path / "b").exists()
    assert cli_main(["bench", "--out", str(tmp_path / "no" / "b")]) == 2
    _one_line(capsys, "does not exist")
    assert not (tmp_path / "no").exists()


def test_record_into_a_missing_directory_creates_nothing(tmp_path, capsys):
    out = tmp_path / "nonexistent_dir" / "x.parquet"
    assert cli_main(["record", "-o", str(out), "--", "true"]) == 2
    _one_line(capsys, str(out), "does not exist")
    _nothing_left(tmp_path)


def test_record_onto_a_directory_names_it_and_leaves_nothing(tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    assert cli_main(["record", "-o", str(d), "--", "true"]) == 2
    err = _one_line(capsys, str(d), "is a directory")
    assert ".tmp" not in err and ".partial" not in err
    _nothing_left(tmp_path, "d")
    _nothing_left(d)


@pytest.mark.parametrize("what", ["missing", "directory", "empty"])
def test_pager_run_says_when_a_file_was_never_paged(tmp_path, capsys, what):
    """A directory is refused before the program runs; a missing or empty file is allowed
    (the program may create it), and a run that never mapped it says so in one line
    (before: exit 0 and not a word)."""
    f = tmp_path / "w.bin"
    if what == "directory":
        f.mkdir()
    elif what == "empty":
        f.touch()
    marker = tmp_path / "ran"
    code = cli_main(["pager", "run", f"{f}:1M", "--no-strict", "--", "touch", str(marker)])
    if what == "directory":
        assert code == 2 and not marker.exists()
        _one_line(capsys, str(f), "directory")
        return
    assert code == 0 and marker.exists()
    err = [x for x in capsys.readouterr().err.splitlines() if "warning" in x]
    assert len(err) == 1 and str(f) in err[0] and "nothing was paged" in err[0], err


def _without_dac_override(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """As root, a read-only directory is read-only only without CAP_DAC_OVERRIDE."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0:
        if setpriv is None:
            pytest.skip("setpriv is needed to drop CAP_DAC_OVERRIDE as root")
        argv = [setpriv, "--inh-caps=-dac_override", "--bounding-set=-dac_override", *argv]
    return subprocess.run(argv, cwd=cwd, env=pagecast_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("cmd", [["pager", "run", "{data}:64K", "-o", "{out}"], ["run", "-o", "{out}"]])
def test_output_into_read_only_directory_refused_before_the_program_runs(tmp_path, cmd):
    data = tmp_path / "w.bin"
    data.write_bytes(b"\1" * 16 * 4096)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    marker = tmp_path / "ran"
    argv = [a.format(data=data, out=ro / "t.parquet") for a in cmd]
    try:
        r = _without_dac_override(
            [sys.executable, "-m", "pagecast", *argv, "--", "sh", "-c", f"touch {marker}; exit 7"], tmp_path
        )
    finally:
        ro.chmod(0o755)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "t.parquet" in r.stderr, r.stderr
    assert "permission denied" in r.stderr.lower() and not marker.exists()
    assert list(ro.iterdir()) == []


def _in_a_full_tmpfs(script: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``script`` (sh) in a private mount namespace with a 256 KiB tmpfs at ./full."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a private tmpfs needs root and unshare")
    (cwd / "full").mkdir()
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=256k tmpfs full && {script}"],
        cwd=cwd,
        env=pagecast_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


DAMO = Path(__file__).parent / "data" / "damo" / "damon.data.json_compressed"


@pytest.mark.parametrize("room_kib", [0, 8, 40])
def test_full_disk_errors_name_the_file_and_leave_no_temporaries(tmp_path, room_kib):
    """Writers on a full file system (no room at all, or a little): one line naming the
    output (never a temporary), exit status 2, no 0-byte temporary or journal left."""
    py = sys.executable
    script = (
        "dd if=/dev/zero of=full/fill bs=4k 2>/dev/null; rm -f full/fill; "
        f"dd if=/dev/zero of=full/fill bs=1k count=$((256 - {room_kib} - 8)) 2>/dev/null; "
        "dd if=/dev/zero of=full/fill bs=4k oflag=append conv=notrunc 2>/dev/null; "
        * (room_kib == 0)
        + f"{py} -m pagecast import damo {DAMO} -o full/a.parquet 2>>err.txt >/dev/null; echo $? >> codes.txt; "
        f"{py} -m pagecast record -o full/r.parquet --faults-only -- true 2>>err.txt >/dev/null; echo $? >> codes.txt; "
        "ls -a full > left.txt; "
        f"{py} -c 'import sys; from pagecast.trace import open_trace; [open_trace(p).read() for p in sys.argv[1:]]' "
        "full/*.parquet 2>/dev/null && echo readable > readable.txt; true"
    )
    r = _in_a_full_tmpfs(script, tmp_path)
    assert r.returncode == 0, r.stderr
    left = set((tmp_path / "left.txt").read_text().split()) - {".", "..", "fill"}
    codes = (tmp_path / "codes.txt").read_text().split()
    err = (tmp_path / "err.txt").read_text()
    for name, code in zip(["a.parquet", "r.parquet"], codes):
        if name in left:  # it fitted: a whole, readable trace (read inside the namespace)
            assert code == "0" and (tmp_path / "readable.txt").exists(), err
            continue
        assert code == "2", (name, err)
        lines = [x for x in err.splitlines() if name in x]
        assert len(lines) == 1 and "error" in lines[0] and ".tmp" not in lines[0], err
    assert not [x for x in left if x.endswith((".tmp", ".partial", ".regions"))], (left, err)
    assert "Traceback" not in err, err


def test_negative_values_joined_for_the_command_only():
    """`--capacity -5%` reaches the capacity check; the program's own arguments are never touched."""
    from pagecast.cli import build_parser
    from pagecast.cli._validate import join_negative_values

    p = build_parser()
    assert join_negative_values(p, ["simulate", "t.parquet", "--capacity", "-5%"]) == [
        "simulate",
        "t.parquet",
        "--capacity=-5%",
    ]
    for argv in (["record", "-o", "t.parquet", "prog", "--output", "-5k"], ["run", "--", "prog", "--gap", "-1M"]):
        assert join_negative_values(p, argv) == argv
