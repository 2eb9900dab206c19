"""The sparse-weights workload (workloads/sparse_weights/): build, weights file, cold cache.

The C program mmaps a weights file and runs "tokens" through L layers reading a sparse,
power-law, layer-correlated set of rows (one row = one 4 KiB page). See the C source for
the access model. Python only builds it, generates the file once, and makes the file
cold between runs.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pagecast.bench.workloads import workloads_dir
from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.util.native import build
from pagecast.util.pagecache import drop_file
from pagecast.util.signals import SignalRelay

PAGE = PAGE_SIZE
ADVICE = ("random", "normal", "sequential", "willneed")
MAGIC = (0x5357504741454353).to_bytes(8, "little")  # the generator's header magic


def binary() -> Path:
    """Compile the workload on first use (cached by source hash)."""
    src = workloads_dir() / "sparse_weights" / "sparse_weights.c"
    if not src.exists():
        raise PagecastError("workload source missing", path=src)
    # -O3, as a model runner is built: its row arithmetic in vector instructions
    return build(
        "sparse_weights", [src], shared=False, cflags=("-O3", "-g", "-Wall", "-Wextra", "-Werror"), ldflags=("-lm",)
    )


def cache_dir() -> Path:
    d = Path(os.environ.get("PAGECAST_CACHE", Path.home() / ".cache" / "pagecast"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@dataclass
class WorkloadConfig:
    """One inference run. ``extra`` passes further workload flags (--hot, --tail, ...)."""

    weights: Path
    prompt: int = 1
    tokens: int = 4
    advice: str = "random"
    extra: list[str] = field(default_factory=list)

    def argv(self) -> list[str]:
        if self.advice not in ADVICE:
            raise PagecastError(f"unknown advice {self.advice!r} (valid: {', '.join(ADVICE)})")
        return [
            str(binary()),
            "run",
            str(self.weights),
            "--prompt",
            str(self.prompt),
            "--tokens",
            str(self.tokens),
            "--advice",
            self.advice,
            "--quiet",
            *self.extra,
        ]


def expected_size(size_mib: int, layers: int = 16, dim: int = 1024) -> int:
    """Bytes of a generated file (mirrors the generator: rows per layer rounded down to 64)."""
    rows = max(64, (size_mib << 20) // (layers * dim * 4)) & ~63
    return PAGE + layers * rows * dim * 4


def ensure_weights(path: Path | None = None, size_mib: int = 1024, seed: int = 1) -> Path:
    """Generate the weights file once; reuse it while its size matches."""
    if path is not None and Path(path).exists():
        # a file the user named: never overwrite it, only check it is a weights file
        with open(path, "rb") as f:
            if f.read(8) != MAGIC:
                raise PagecastError("not a sparse_weights file (bad magic); give a new path to generate one", path=path)
        return Path(path)
    path = Path(path) if path else cache_dir() / f"sparse_weights_{size_mib}m_s{seed}.bin"
    if path.exists() and path.stat().st_size == expected_size(size_mib):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [str(binary()), "gen", str(path), "--size-mib", str(size_mib), "--seed", str(seed)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise PagecastError(f"generating weights failed: {proc.stderr.strip()[:200]}", path=path)
    return path


def drop_cache(path: Path) -> None:
    """Make ``path`` cold. Only effective once no process maps it (callers wait for exit)."""
    drop_file(path)


def warm_cache(path: Path) -> None:
    """Read the whole file into the page cache (the warm-cache reference)."""
    with open(path, "rb", buffering=0) as f:
        while f.read(8 << 20):
            pass


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident_pages(path: Path) -> np.ndarray:
    """Bool array: which pages of the file are in the page cache now (mincore)."""
    size = os.path.getsize(path)
    if size == 0:
        return np.zeros(0, bool)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
    try:
        n = (size + PAGE - 1) // PAGE
        vec = np.zeros(n, np.uint8)
        addr = _mmap_addr(mm)
        if _libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec.ctypes.data_as(ctypes.c_void_p)) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        return (vec & 1).astype(bool)
    finally:
        mm.close()


def _mmap_addr(mm: mmap.mmap) -> int:
    # A read-only mmap cannot lend a writable ctypes buffer; ask numpy for the address.
    return np.frombuffer(mm, np.uint8).ctypes.data


@dataclass
class RunOutcome:
    """What one workload run reported and what it cost."""

    returncode: int
    result: dict
    wall_s: float  # wall time seen from outside (spawn to exit)
    major_faults: int
    minor_faults: int
    bytes_cached: int  # weights bytes in the page cache after the run (everything read in)
    stderr: str = ""


def parse_result(stdout: str) -> dict:
    """The workload's final JSON line."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {}


def run_plain(cfg: WorkloadConfig) -> RunOutcome:
    """Run the workload directly (kernel strategies): wall time, faults from wait4 rusage."""
    t0 = time.perf_counter()
    with SignalRelay() as relay:  # a bench stopped by SIGTERM stops its run too
        proc = subprocess.Popen(cfg.argv(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        relay.attach(proc.pid)
        out = proc.stdout.read()
        err = proc.stderr.read()  # --quiet: a few bytes at most, so reading in turn cannot block
        _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    proc.stderr.close()
    return RunOutcome(
        proc.returncode,
        parse_result(out.decode()),
        wall,
        ru.ru_majflt,
        ru.ru_minflt,
        int(resident_pages(cfg.weights).sum()) * PAGE,
        err.decode(errors="replace"),
    )
