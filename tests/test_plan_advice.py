"""Per-file read-ahead advice in plans (format version 2): the launcher preloads the advice
shim for the planned files only, and the program's own faults and reads on a cold file
then bring in what they ask for instead of the kernel's read-around (checked with mincore),
with output and exit status unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cold_support import ResidencyWatch
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, checksum, decode_plan, encode_plan, write_plan
from pagecast.util.pagecache import drop_file
from plan_support import pagecast_env

PAGE = 4096
SPARSE = [0, 200, 777, 1500, 1999]  # mmap: pages far apart, each fault is its own read-around
SEQUENTIAL = list(range(8))  # read(): small reads in order, which the kernel's read-ahead ramps up on

# Touches pages argv[3] of argv[1] through mmap and pages argv[4] of argv[2] through
# pread, prints what it read, and exits 3: output and status must be the same with and without a plan.
TOUCH = r"""
import mmap, os, sys, zlib
pages = [int(x) for x in sys.argv[3].split(",")]
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
a = zlib.crc32(b"".join(m[p * 4096 : p * 4096 + 8] for p in pages))
fd2 = os.open(sys.argv[2], os.O_RDONLY)
b = zlib.crc32(b"".join(os.pread(fd2, 8, int(p) * 4096) for p in sys.argv[4].split(",")))
print(a, b)
sys.exit(3)
"""


@pytest.fixture()
def files(tmp_path: Path):
    # on the repository's disk, not tmpfs: a file must be able to be cold
    base = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata"
    base.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    out = []
    for name in ("mapped", "read", "other"):
        p = base / f"advice-{os.getpid()}-{tmp_path.name}-{name}.bin"
        p.write_bytes(rng.integers(0, 256, 2048 * PAGE, dtype=np.uint8).tobytes())
        out.append(p)
    yield out
    for p in out:
        p.unlink(missing_ok=True)


def _run(cmd: list[str], cold: list[Path]) -> tuple[subprocess.CompletedProcess, list[np.ndarray]]:
    for f in cold:
        drop_file(f)
    with ResidencyWatch(*cold) as watch:
        r = subprocess.run(cmd, env=pagecast_env(), capture_output=True)
        return r, [np.nonzero(watch.seen(f))[0] for f in cold]


def _touch_cmd(mapped: Path, read: Path) -> list[str]:
    return [
        sys.executable,
        "-c",
        TOUCH,
        str(mapped),
        str(read),
        ",".join(map(str, SPARSE)),
        ",".join(map(str, SEQUENTIAL)),
    ]


def test_random_advice_reads_only_the_touched_pages_of_planned_files(tmp_path, files):
    mapped, read, other = files
    plan = tmp_path / "p.plan"
    write_plan(
        plan, PlanDoc([FilePlan(str(f), FileIdentity.of(f), "nothing", advice="random") for f in (mapped, read)])
    )
    bare, bare_res = _run(_touch_cmd(mapped, read), [mapped, read])
    planned, plan_res = _run([sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--",
                              *_touch_cmd(mapped, read)], [mapped, read])  # fmt: skip
    assert (planned.returncode, planned.stdout) == (bare.returncode, bare.stdout) == (3, bare.stdout)
    assert planned.stderr == b"", planned.stderr
    # exactly the pages asked for; the kernel's default read-around / read-ahead brings in far more
    assert plan_res[0].tolist() == SPARSE and plan_res[1].tolist() == SEQUENTIAL
    assert len(bare_res[0]) > 4 * len(SPARSE) and len(bare_res[1]) > 4 * len(SEQUENTIAL)

    # restricted to the plan's files: the same program on a file not in the plan keeps the default
    _, (other_res, _) = _run([sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--",
                              *_touch_cmd(other, read)], [other, read])  # fmt: skip
    assert len(other_res) > 4 * len(SPARSE)


def test_advice_skipped_for_a_changed_file_with_one_warning(tmp_path, files):
    mapped, read, _ = files
    plan = tmp_path / "p.plan"
    write_plan(plan, PlanDoc([FilePlan(str(mapped), FileIdentity.of(mapped), "nothing", advice="random")]))
    os.utime(mapped, ns=(1, 1))  # mtime and ctime move: the recorded identity no longer holds
    r, (res, _) = _run([sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--", *_touch_cmd(mapped, read)],
                       [mapped, read])  # fmt: skip
    assert r.returncode == 3
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and str(mapped) in lines[0] and "advice skipped" in lines[0]
    assert len(res) > 4 * len(SPARSE)


def test_version_1_plans_still_read_by_both_readers(tmp_path, files):
    mapped, read, _ = files
    fp = FilePlan(str(mapped), FileIdentity.of(mapped), "warm", [(0, 4), (100, 2)], reason="v1")
    v2 = encode_plan(PlanDoc([fp]))
    # a version 1 plan: no ADVICE field (the one before the range count), its own checksum
    lines = v2.decode().split("\n")[:-2]
    lines[0] = "PAGECAST-PLAN 1"
    f = lines[1].split(" ")
    lines[1] = " ".join(f[:13] + f[14:])
    body = ("\n".join(lines) + "\n").encode()
    v1 = body + f"end 1 {checksum(body):08x}\n".encode()
    back = decode_plan(v1)
    assert back.files[0].advice == "default" and back.files[0].ranges == fp.ranges
    p = tmp_path / "v1.plan"
    p.write_bytes(v1)
    drop_file(mapped)
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--plan", str(p), "--json", "--", "true"], env=pagecast_env(),
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0 and '"plan_error": null' in r.stdout, r.stdout + r.stderr
    assert '"advice": "default"' in r.stdout and '"pages_planned": 6' in r.stdout


def test_advice_for_more_files_than_one_variable_names_still_runs_the_program(tmp_path):
    """9,000 files with advice: the list would pass exec's limit for one string (128 KiB) and
    the program would not start (E2BIG); the launcher names what fits and warns once."""
    files = []
    for i in range(9000):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"x")
        files.append(p)
    plan = tmp_path / "many.plan"
    write_plan(plan, PlanDoc([FilePlan(str(p), FileIdentity.of(p), "nothing", advice="sequential") for p in files]))
    cmd = ["sh", "-c", 'echo ok; printf "%s" "$PAGECAST_ADVICE_FILES" | tr , "\\n" | wc -l']
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--plan", str(plan), "--", *cmd],
                       env=pagecast_env(), capture_output=True, text=True)  # fmt: skip
    named = int(r.stdout.split()[1]) + 1  # wc -l: the last entry has no newline after it
    assert r.returncode == 0 and r.stdout.startswith("ok\n") and 5000 < named < 9000
    assert r.stderr == (f"pagecast run: warning: read-ahead advice for {9000 - named} of the plan's files left to "
                        "the kernel's default (more than one environment variable can name)\n")  # fmt: skip
