"""Shared helpers for the tests that run pagecast's CUDA interposer against the driver
TEST DOUBLE (native/cuda/test_double: host memory, call log; there is no GPU here)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from pagecast.collect import cuda_native as cn
from pagecast.errors import PagecastError
from pagecast.util.native import build

# Builders of the driver test double and of the programs that drive it
# (native/cuda/test_double/): test code, so they live here and not in the package.


def build_cupti_harness(tk: cn.CudaToolkit | None = None) -> Path:
    """The collector's record conversion run on hand-built CUPTI records."""
    tk = tk or cn.find_toolkit()
    if tk.cupti_include is None or tk.cupti_lib is None:
        raise PagecastError(f"the CUDA toolkit at {tk.root} has no CUPTI (cupti.h and libcupti.so)")
    return build(
        "cupti_harness",
        ["cuda/test_double/cupti_harness.c"],
        shared=False,
        include=[tk.include, tk.cupti_include],
        ldflags=(f"-L{tk.cupti_lib}", "-lcupti", f"-Wl,-rpath,{tk.cupti_lib}", "-lpthread"),
    )


def build_test_double(tk: cn.CudaToolkit | None = None) -> Path:
    """libcuda_test_double.so: the driver TEST DOUBLE (host memory, call log)."""
    tk = tk or cn.find_toolkit()
    # -Bsymbolic: the pointers it hands out must be its own functions even when the
    # interposer, preloaded, exports the same names.
    return build(
        "libcuda_test_double",
        ["cuda/test_double/libcuda_test_double.c"],
        cflags=(*cn.WARN, "-fvisibility=hidden"),
        include=[tk.include],
        ldflags=("-Wl,-Bsymbolic", "-lpthread"),
    )


def build_driver_client(tk: cn.CudaToolkit | None = None) -> Path:
    """The test program that finds the driver like static cudart does."""
    tk = tk or cn.find_toolkit()
    return build(
        "cuda_driver_client",
        ["cuda/test_double/driver_client.c"],
        shared=False,
        include=[tk.include],
        ldflags=("-ldl", "-lpthread"),
    )


def build_direct_client(double: Path, tk: cn.CudaToolkit | None = None) -> Path:
    """A test program linked against the driver test double itself (calls by symbol)."""
    tk = tk or cn.find_toolkit()
    return build(
        "cuda_direct_client",
        ["cuda/test_double/direct_client.c"],
        shared=False,
        include=[tk.include],
        ldflags=(str(double), f"-Wl,-rpath,{double.parent}"),
    )


@dataclass
class Libs:
    interposer: Path
    double: Path
    client: Path


def build_libs() -> Libs:
    try:
        tk = cn.find_toolkit()
    except PagecastError as e:
        pytest.skip(f"no CUDA toolkit: {e}")
    return Libs(cn.build_interposer(tk), build_test_double(tk), build_driver_client(tk))


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    out_dir: Path
    log: Path

    def lines(self, prefix: str) -> list[str]:
        return [l for l in self.stdout.splitlines() if l.startswith(prefix + " ")]

    def allocs(self) -> dict[int, tuple[int, int]]:
        out = {}
        for l in self.lines("alloc"):
            _, idx, ptr, size = l.split()
            out[int(idx)] = (int(ptr, 16), int(size))
        return out

    def calls(self, name: str | None = None) -> list[dict[str, str]]:
        """The double's call log, parsed: [{'fn': name, key: value, ...}]."""
        rows = []
        if not self.log.exists():
            return rows
        for line in self.log.read_text().splitlines():
            fn, *kv = line.split()
            if name is None or fn == name:
                rows.append({"fn": fn, **dict(x.split("=", 1) for x in kv)})
        return rows

    def file(self, stem: str) -> Path:
        (p,) = list(self.out_dir.glob(f"{stem}.*.*"))
        return p


def client_env(libs: Libs, tmp: Path, preload: bool = True, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFETCH_", "PREDICTIONS_", "PAGECAST_CUDA"))}
    env.update(
        PAGECAST_CUDA_DRIVER=str(libs.double),
        PAGECAST_TEST_DOUBLE_LOG=str(tmp / "double.log"),
        PAGECAST_CUDA_OUT=str(tmp / "out"),
    )
    if preload:
        env["LD_PRELOAD"] = str(libs.interposer)
    env.update(extra)
    (tmp / "out").mkdir(exist_ok=True)
    return env


def run_client(libs: Libs, tmp: Path, args: list[str], preload: bool = True, **extra: str) -> Run:
    env = client_env(libs, tmp, preload, **extra)
    p = subprocess.run([str(libs.client), *args], env=env, capture_output=True, text=True, timeout=60)
    return Run(p.returncode, p.stdout, p.stderr, tmp / "out", tmp / "double.log")


HEX = re.compile(r"0x[0-9a-f]+")
