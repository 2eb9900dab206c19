"""Shared helpers for the tests that run pagecast's CUDA interposer against the driver
TEST DOUBLE (native/cuda/test_double: host memory, call log; there is no GPU here)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Libs:
    interposer: Path
    double: Path
    client: Path


def build_libs() -> Libs:
    from pagecast.collect import cuda_native as cn
    from pagecast.errors import PagecastError

    try:
        tk = cn.find_toolkit()
    except PagecastError as e:
        pytest.skip(f"no CUDA toolkit: {e}")
    return Libs(cn.build_interposer(tk), cn.build_test_double(tk), cn.build_driver_client(tk))


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
    env.update(PAGECAST_CUDA_DRIVER=str(libs.double), PAGECAST_TEST_DOUBLE_LOG=str(tmp / "double.log"),
               PAGECAST_CUDA_OUT=str(tmp / "out"))
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
