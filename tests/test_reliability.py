"""Regression tests of the reliability issue: side files, recover, one-line errors, range checks.

Each test reproduces a failure an adversarial run found in the released code (a
planted symlink followed, a finished trace destroyed by recover, a traceback, a
negative time accepted) and asserts the behaviour that replaced it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest

import pagecast
from pagecast.cli import main as cli_main
from pagecast.errors import PagecastError
from pagecast.importers import ai4mem, champsim, memai
from pagecast.importers.ai4mem_predictions import read_predictions_csv
from pagecast.trace import Region, Schedule, TraceWriter, open_trace, read_schedule, recover_partial, write_schedule
from pagecast.util.atomic import atomic_write_text

HEADER = "Category,EventName,Address,StartTime_ns,EndTime_ns,Duration_ns,Host_Phys_Info,Mapped_File\n"
SRC = Path(pagecast.__file__).resolve().parents[1]  # the pagecast under test, for subprocesses


def _one_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for w in words:
        assert w in err[0], err[0]
    return err[0]


def _trace(path: Path, n: int = 100) -> Path:
    with TraceWriter(path, regions=[Region(0, "r", length=1 << 20)]) as w:
        w.write(t_ns=np.arange(n), region=0, page=np.arange(n) % 50)
    return path


def _journal(path: Path, rows: int = 1000, group: int = 250) -> tuple[Path, Path]:
    w = TraceWriter(path, journal=True, row_group_rows=group, source="test")
    w.add_region(Region(0, "r", length=1 << 20))
    w.write(t_ns=np.arange(rows), region=0, page=np.arange(rows) % 50)
    w.abort()  # as if the recorder died: the journal stays
    return Path(str(path) + ".partial"), Path(str(path) + ".partial.regions")


# ------------------------------------------------------------------ 9: side files and permissions


def test_journal_side_files_never_follow_planted_symlinks(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "t.parquet"
    for side in (".partial", ".partial.regions"):
        link = Path(str(out) + side)
        link.symlink_to(victim)
        with pytest.raises(PagecastError, match="exists already"):
            TraceWriter(out, journal=True)
        assert victim.read_text() == "precious"
        assert link.is_symlink()
        link.unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim"]  # nothing half-created is left


def test_stale_journal_of_a_crash_is_kept_not_overwritten(tmp_path):
    partial, regions = _journal(tmp_path / "t.parquet")
    before = partial.read_bytes()
    with pytest.raises(PagecastError, match=r"t.parquet.partial.regions: exists already.*recover"):
        TraceWriter(tmp_path / "t.parquet", journal=True)
    assert partial.read_bytes() == before and regions.exists()


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_outputs_honour_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        trace = _trace(tmp_path / "t.parquet")
        write_schedule(tmp_path / "s.parquet", Schedule.empty())
        atomic_write_text(tmp_path / "x.txt", "x")
        _journal(tmp_path / "j.parquet")
    finally:
        os.umask(old)
    for p in (
        trace,
        tmp_path / "s.parquet",
        tmp_path / "x.txt",
        tmp_path / "j.parquet.partial",
        tmp_path / "j.parquet.partial.regions",
    ):
        assert p.stat().st_mode & 0o777 == mode, p


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def test_temporary_files_of_a_killed_writer_are_removed_by_the_next_run(tmp_path):
    out = tmp_path / "t.parquet"
    code = textwrap.dedent(f"""
        import os, numpy as np
        from pagecast.trace import TraceWriter
        w = TraceWriter({str(out)!r}, row_group_rows=100)
        w.write(t_ns=np.arange(1000))
        os.kill(os.getpid(), 9)
    """)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == -signal.SIGKILL
    stale = [p.name for p in tmp_path.iterdir()]
    assert len(stale) == 1 and stale[0].startswith(".t.parquet.") and stale[0].endswith(".tmp")
    live = tmp_path / f".t.parquet.{os.getppid()}.abcdefgh.tmp"  # a writer that is still running
    live.write_text("")
    other = tmp_path / f".u.parquet.{_dead_pid()}.abcdefgh.tmp"  # another output's: not ours to judge
    other.write_text("")
    _trace(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, "t.parquet"])
    from pagecast.util.atomic import remove_stale_temps

    assert remove_stale_temps(tmp_path / "u.parquet") == 1 and not other.exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_record_lackey_log_is_private_and_percent_in_names_is_literal(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "lk%p.parquet.lackey.log").symlink_to(victim)  # the old predictable log name
    rc = cli_main(["record", "--lackey", "--json", "-o", "lk%p.parquet", "--", "true"])
    assert rc == 0
    assert victim.read_text() == "precious"
    t = open_trace(tmp_path / "lk%p.parquet")
    assert t.num_rows > 1000 and t.source == "lackey"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lk%p.parquet", "lk%p.parquet.lackey.log", "victim"]


def test_cuda_raw_dir_must_be_private(tmp_path):
    from pagecast.collect.cuda import private_raw_dir

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "t.parquet.cuda").symlink_to(elsewhere)
    with pytest.raises(PagecastError, match="not a private directory"):
        private_raw_dir(tmp_path / "t.parquet")
    raw = private_raw_dir(tmp_path / "u.parquet")
    assert raw.stat().st_mode & 0o777 == 0o700


# -------------------------------------------------------------------------------- 10: recover


def test_recover_refuses_what_is_not_a_journal_and_leaves_it_alone(tmp_path, capsys):
    trace = _trace(tmp_path / "done.parquet")
    csv = tmp_path / "data.csv"
    csv.write_text("a,b\n1,2\n")
    empty = tmp_path / "e.partial"
    empty.write_bytes(b"")
    garbage = tmp_path / "g.partial"
    garbage.write_bytes(os.urandom(3000))
    (tmp_path / "d.partial").mkdir()
    for path, what in [
        (trace, "finished Parquet file"),
        (csv, "not a pagecast journal"),
        (empty, "empty file"),
        (garbage, "not a pagecast journal"),
        (tmp_path / "d.partial", "is a directory"),
    ]:
        before = path.read_bytes() if path.is_file() else None
        assert cli_main(["recover", str(path)]) == 2
        _one_line(capsys, path.name, what)
        if before is not None:
            assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "d.partial",
        "data.csv",
        "done.parquet",
        "e.partial",
        "g.partial",
    ]


def test_recover_never_writes_over_its_input(tmp_path, capsys):
    partial, regions = _journal(tmp_path / "t.parquet")
    before = partial.read_bytes(), regions.read_bytes()
    for out in (partial, regions):
        assert cli_main(["recover", str(partial), "-o", str(out)]) == 2
        _one_line(capsys, "would overwrite the journal")
    assert (partial.read_bytes(), regions.read_bytes()) == before
    renamed = tmp_path / "journal.arrow"
    partial.rename(renamed)
    assert cli_main(["recover", str(renamed)]) == 2  # no .partial suffix: no default output name
    _one_line(capsys, "-o")


def test_recover_reports_what_it_kept(tmp_path, capsys):
    partial, _ = _journal(tmp_path / "t.parquet", rows=1000, group=250)
    assert cli_main(["recover", "--json", str(partial)]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert (rec["rows"], rec["batches"], rec["regions"], rec["truncated"]) == (1000, 4, 1, False)
    # damage the third batch's values: the first two are kept, the report says why it stopped
    import pyarrow.ipc as ipc

    data = bytearray(partial.read_bytes())
    reader = ipc.open_stream(bytes(data))
    sizes = [b.num_rows for b in reader]
    assert sizes == [0] + [250] * 4  # the header batch written when the journal is created, then the rows
    marks = [i for i in range(len(data)) if data.startswith(b"pagecast.crc32", i)]  # one per batch header
    assert len(marks) == 5
    body = (marks[3] + marks[4]) // 2  # between the third row batch's header and the fourth's: its body
    data[body] ^= 0x01
    partial.write_bytes(bytes(data))
    out = tmp_path / "r.parquet"
    assert cli_main(["recover", str(partial), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "recovered 500 rows (2 row groups)" in text and "stopped early, batch 3" in text
    t = open_trace(out)
    assert t.meta["recovered_truncated"] and t.read(["t_ns"])["t_ns"].tolist() == list(range(500))


@pytest.mark.parametrize(
    "bad,what",
    [
        (b"\xff\xfe not utf-8\n", "line 2"),
        (b"[1, 2, 3]\n", "line 2"),
        (b'{"id": "x", "name": 5}\n', "line 2"),
        (b'{"id": 3, "name": "gap"}\n', "region ids"),
    ],
)
def test_damaged_regions_journal_is_one_line(tmp_path, capsys, bad, what):
    partial, regions = _journal(tmp_path / "t.parquet")
    lines = regions.read_bytes().split(b"\n")
    regions.write_bytes(lines[0] + b"\n" + bad + b"\n".join(lines[1:]))
    assert cli_main(["recover", str(partial)]) == 2
    line = _one_line(capsys, "t.parquet.partial.regions")
    assert what in line.replace(":2:", " line 2 ")


def test_torn_last_regions_line_is_dropped(tmp_path):
    partial, regions = _journal(tmp_path / "t.parquet")
    regions.write_bytes(regions.read_bytes() + b'{"id": 1, "na')
    rec = recover_partial(partial)
    assert rec.rows == 1000 and rec.regions == 1


# ------------------------------------------------------------------------ 12/13: bad numbers


@pytest.mark.parametrize(
    "row,what",
    [
        ("KERNEL,k(int),7,0x1,1000,15\xb200,500,1\n", "start,end,duration"),  # a superscript digit
        ("KERNEL,k(int),7,0x1,1000,100000000000000000000,99999999999999999000,1\n", "start,end,duration"),  # 21 digits
        ("UVM,GPU_PAGE_FAULT,0x1000,9223372036854775808,,,X,\n", "StartTime_ns"),  # 2^63
    ],
)
def test_ai4mem_times_out_of_range(tmp_path, row, what):
    src = tmp_path / "u.csv"
    src.write_text(HEADER + row)
    with pytest.raises(PagecastError, match=rf"u.csv:2: .*{what}"):
        ai4mem.import_trace(src, tmp_path / "o.parquet")


def test_champsim_cycle_beyond_int64_is_refused(tmp_path):
    src = tmp_path / "l.txt"
    src.write_text("1, 9999999999999999999, 7f0000001000, 401a00, 0\n2, 5, 7f0000002000, 401a04, 1\n")
    with pytest.raises(PagecastError, match=r"l.txt:1: bad cycle"):
        champsim.import_trace(src, tmp_path / "o.parquet")


@pytest.mark.parametrize("ghz", [0.0, -1.0, float("nan"), float("inf"), 1e-300, 1e9])
def test_cpu_ghz_out_of_range(tmp_path, ghz):
    src = tmp_path / "l.txt"
    src.write_text("1, 100, 7f0000001000, 401a00, 0\n")
    with pytest.raises(PagecastError, match="--cpu-ghz"):
        champsim.import_trace(src, tmp_path / "o.parquet", cpu_ghz=ghz)
    feather.write_feather(
        pa.table({"Timestamp": [1, 2], "Vaddr": [4096, 8192], "Phase": [0, 0], "Instrs": [1, 2]}),
        tmp_path / "m.feather",
    )
    with pytest.raises(PagecastError, match="--cpu-ghz"):
        memai.import_trace(tmp_path / "m.feather", tmp_path / "o.parquet", cpu_ghz=ghz)
    assert not (tmp_path / "o.parquet").exists()


def test_cycles_that_overflow_nanoseconds_are_refused(tmp_path):
    src = tmp_path / "l.txt"
    src.write_text("1, 0, 7f0000001000, 401a00, 0\n2, 9000000000000000000, 7f0000002000, 401a04, 1\n")
    with pytest.raises(PagecastError, match="do not fit"):
        champsim.import_trace(src, tmp_path / "o.parquet", cpu_ghz=0.5)


@pytest.mark.parametrize(
    "row,what",
    [
        ("9223372036854775808,0x1000,0.5", "bad time"),
        ("1,0x1000,nan", "bad score"),
        ("1,0x1000,inf", "bad score"),
        ("1,0x1000,1e39", "bad score"),  # finite as a double, inf as the float32 stored
    ],
)
def test_predictions_out_of_range(tmp_path, row, what):
    src = tmp_path / "p.csv"
    src.write_text("Timestamp_ns,Prefetch_Address,Confidence\n" + row + "\n")
    with pytest.raises(PagecastError, match=rf"p.csv:2: {what}"):
        read_predictions_csv(src)


def test_memai_damaged_record_batch(tmp_path):
    n = 400
    t = pa.table(
        {
            "Timestamp": np.arange(n, dtype=np.int64),
            "Vaddr": np.arange(n, dtype=np.uint64) * 4096,
            "Phase": np.zeros(n, np.int32),
            "Instrs": np.arange(n, dtype=np.int64),
        }
    )
    feather.write_feather(t, tmp_path / "m.feather", chunksize=100, compression="lz4")
    data = bytearray((tmp_path / "m.feather").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "m.feather").write_bytes(bytes(data))
    with pytest.raises(PagecastError, match=r"m.feather: (record batch \d+ is damaged|not a feather)"):
        memai.import_trace(tmp_path / "m.feather", tmp_path / "o.parquet")


def test_champsim_prefetch_with_empty_loads(tmp_path, capsys):
    loads = tmp_path / "loads.txt"
    loads.write_text("1, 100, 7f0000001000, 401a00, 0\n")
    champsim.import_trace(loads, tmp_path / "c.parquet")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "pf.txt").write_text("1 7f0000001000\n")
    assert (
        cli_main(
            [
                "import",
                "champsim-prefetch",
                str(tmp_path / "pf.txt"),
                "--trace",
                str(tmp_path / "c.parquet"),
                "--loads",
                str(tmp_path / "empty.txt"),
                "-o",
                str(tmp_path / "s.parquet"),
            ]
        )
        == 2
    )
    _one_line(capsys, "empty.txt: no load records")


def test_schedules_with_nan_or_inf_scores_are_refused(tmp_path, capsys):
    trace = _trace(tmp_path / "t.parquet")
    for bad in (np.nan, np.inf):
        s = Schedule(
            np.array([0, 1]),
            np.array([0, 1]),
            np.array([0, 0], np.int32),
            np.array([1, 2]),
            np.array([0.5, bad], np.float32),
        )
        write_schedule(tmp_path / "s.parquet", s)
        with pytest.raises(PagecastError, match="score .* is not a finite number"):
            read_schedule(tmp_path / "s.parquet")
        assert cli_main(["eval", str(trace), "--prefetchers", "none", "--schedule", str(tmp_path / "s.parquet")]) == 2
        _one_line(capsys, "s.parquet", "finite")


def test_predict_and_eval_given_a_directory(tmp_path, capsys):
    trace = _trace(tmp_path / "t.parquet")
    d = tmp_path / "dir.pt"
    d.mkdir()
    assert cli_main(["predict", str(d), str(trace), "-o", str(tmp_path / "s.parquet")]) == 2
    _one_line(capsys, "dir.pt: is a directory")
    assert cli_main(["eval", str(trace), "--prefetchers", "none", "--schedule", str(d)]) == 2
    _one_line(capsys, "dir.pt: is a directory")
    assert cli_main(["eval", str(d)]) == 2
    _one_line(capsys, "dir.pt: is a directory")


# ---------------------------------------------------------------------- 13: checksums, 14: wording


def test_trace_page_checksums_catch_a_flipped_bit(tmp_path):
    path = _trace(tmp_path / "t.parquet", n=5000)
    want = open_trace(path).read()
    data = path.read_bytes()
    changed = errors = 0
    for pos in range(4, len(data) // 2, 97):  # through the data pages
        b = bytearray(data)
        b[pos] ^= 0x10
        path.write_bytes(bytes(b))
        try:
            got = open_trace(path).read()
        except PagecastError as e:
            assert "\n" not in str(e)
            errors += 1
            continue
        changed += any(not np.array_equal(got[c], want[c]) for c in want)
    assert changed == 0 and errors > 0


def test_trace_metadata_checksum(tmp_path):
    path = _trace(tmp_path / "t.parquet")
    data = path.read_bytes()
    i = data.rfind(b'"name":"r"')
    path.write_bytes(data[:i] + b'"name":"s"' + data[i + 10 :])  # still valid JSON, another region name
    with pytest.raises(PagecastError, match="checksum mismatch"):
        open_trace(path)


def test_newline_in_a_path_is_escaped(tmp_path, capsys):
    weird = tmp_path / "a\nb.parquet"
    weird.write_text("x")
    assert cli_main(["info", str(weird)]) == 2
    _one_line(capsys, "a\\nb.parquet")


def test_permission_denied_is_worded_so(tmp_path):
    trace = _trace(tmp_path / "t.parquet")
    trace.chmod(0)
    cmd = [sys.executable, "-m", "pagecast", "info", str(trace)]
    if os.geteuid() == 0:  # root reads any file: drop the capabilities that let it
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv to drop CAP_DAC_OVERRIDE")
        caps = "-dac_override,-dac_read_search"
        cmd = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", *cmd]
    proc = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=str(SRC)), capture_output=True, text=True)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert "t.parquet: cannot read trace file: permission denied" in err[0]


def test_a_fifo_is_refused_not_waited_on(tmp_path, capsys):
    fifo = tmp_path / "f.txt"
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes
    assert cli_main(["import", "lackey", str(fifo), "-o", str(tmp_path / "o.parquet")]) == 2
    _one_line(capsys, "f.txt: not a regular file")


def test_journals_from_before_checksums_still_recover(tmp_path):
    import pyarrow.ipc as ipc

    from pagecast.trace.schema import ACCESS_SCHEMA, COLUMNS

    partial = tmp_path / "old.parquet.partial"
    n = 300
    cols = {c: np.zeros(n, dt) for c, dt in COLUMNS.items()}
    cols["t_ns"] = np.arange(n, dtype=np.int64)
    with pa.OSFile(str(partial), "wb") as sink, ipc.new_stream(sink, ACCESS_SCHEMA) as w:
        w.write_batch(pa.record_batch([pa.array(cols[c]) for c in COLUMNS], schema=ACCESS_SCHEMA))  # no CRC metadata
    Path(str(partial) + ".regions").write_text(
        json.dumps({"__meta__": {"source": "old"}}) + "\n" + json.dumps(Region(0, "r", length=4096).to_dict()) + "\n"
    )
    rec = recover_partial(partial)
    t = open_trace(rec.trace)
    assert rec.rows == n and t.meta["source"] == "old" and [r.name for r in t.regions] == ["r"]
    assert t.read(["t_ns"])["t_ns"].tolist() == list(range(n))
