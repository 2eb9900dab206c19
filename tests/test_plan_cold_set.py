"""What ``plan --measure`` makes cold before every run: the files the recordings used and
opened, the program and its libraries, and every file under a directory its arguments name
(files the recordings never saw); and what it cannot know, said in the result."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from pagecast.collect.record import record_faults
from pagecast.plan.cold_set import cold_set, program_files
from pagecast.plan.measure import recordings_of
from pagecast.util.pagecache import make_cold, resident
from perf_support import needs_pagesets


@pytest.fixture()
def tree() -> Path:
    # on the repository's disk: tmpfs pages cannot be dropped
    base = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata" / f"coldset-{os.getpid()}"
    (base / "sub").mkdir(parents=True, exist_ok=True)
    for i in range(3):
        (base / f"a{i}.txt").write_text("alpha\n" * 2000)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_program_files_are_the_binary_its_loader_and_libraries():
    grep = shutil.which("grep")
    if grep is None:
        pytest.skip("no grep")
    files = program_files(["grep", "x"], "/")
    assert files[0] == os.path.realpath(grep)
    assert any(os.path.basename(f).startswith("libc.so") for f in files)
    assert any(os.path.basename(f).startswith("ld-linux") for f in files)
    assert all(os.path.isfile(f) for f in files)


def test_program_files_of_a_script_name_its_interpreter(tmp_path):
    py = os.path.realpath(sys.executable)  # a binary: a shim script on PATH has no libc of its own
    s = tmp_path / "s.py"
    s.write_text(f"#!{py}\nprint(1)\n")
    files = program_files([str(s)], "/")
    assert files[:2] == [str(s), py] and any("libc.so" in f for f in files)


@needs_pagesets
def test_cold_set_walks_argv_directories_and_cold_means_not_resident(tree, tmp_path):
    out = tmp_path / "grep.parquet"
    cwd = os.getcwd()
    os.chdir(tree.parent)
    try:
        res = record_faults(["grep", "-r", "omega", tree.name], out)
    finally:
        os.chdir(cwd)
    assert res.exit_status == 1  # no match
    # files the recording never saw: written after it, in a subdirectory
    later = [tree / "sub" / f"b{i}.txt" for i in range(5)]
    for p in later:
        p.write_text("beta\n" * 3000)
    recs = recordings_of([out])
    cs = cold_set(recs, [])
    want = {str(p) for p in [*tree.glob("*.txt"), *later]}
    assert want <= set(cs.files)
    assert cs.walked == {tree.name: 8}
    assert os.path.realpath(shutil.which("grep")) in cs.files
    assert cs.unknown == [] and "8 files" in cs.note()
    for p in later:
        p.read_bytes()
    make_cold(cs.files, sync=True)
    assert not any(resident(p).any() for p in later)


def test_a_shell_command_says_what_cannot_be_known():
    from pagecast.plan.cold_set import ColdSet, unknown_of

    why = unknown_of(["sh", "-c", "cat notes.txt"])
    assert len(why) == 1 and "`sh`" in why[0]
    assert unknown_of(["grep", "-r", "x", "."]) == []
    assert "; not known: files `sh` runs" in ColdSet(unknown=why).note()
