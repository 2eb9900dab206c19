"""Building the CUDA parts: warnings as errors against the installed CUDA 13 headers,
exported symbols, the CUDA workloads (nvcc), and the no-toolkit error."""

from __future__ import annotations

import subprocess

import pytest

from _cuda_double import build_test_double
from pagecast.collect import cuda_native as cn
from pagecast.errors import PagecastError


@pytest.fixture(scope="module")
def tk():
    try:
        return cn.find_toolkit()
    except PagecastError as e:
        pytest.skip(str(e))


def _symbols(lib, *flags):
    out = subprocess.run(["nm", "-D", *flags, str(lib)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def test_interposer_exports_exactly_the_hooks(tk):
    lib = cn.build_interposer(tk)
    assert _symbols(lib, "--defined-only") == cn.INTERPOSER_EXPORTS
    # it must not depend on libcuda (found at run time) or CUPTI
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "libcuda" not in needed and "libcupti" not in needed


def test_cupti_collector_builds_and_exports_injection_entry(tk):
    try:
        lib = cn.build_cupti_collector(tk)
    except PagecastError as e:
        pytest.skip(str(e))
    assert _symbols(lib, "--defined-only") == {"InitializeInjection"}
    undefined = _symbols(lib, "--undefined-only")
    assert {
        "cuptiActivityConfigureUnifiedMemoryCounter",
        "cuptiActivityEnable",
        "cuptiActivityRegisterCallbacks",
        "cuptiActivityFlushAll",
        "cuptiActivityGetNextRecord",
    } <= undefined


def test_test_double_exports_every_hooked_entry_point(tk):
    lib = build_test_double(tk)
    hooked = cn.INTERPOSER_EXPORTS - {"dlsym", "pagecast_cuda_translate", "pagecast_cuda_flush"}
    assert hooked | {"cuInit", "cuStreamCreate", "cuStreamSynchronize"} <= _symbols(lib, "--defined-only")


def test_missing_toolkit_is_one_clear_error(monkeypatch, tmp_path, capsys):
    from pagecast.cli import main

    monkeypatch.setattr(cn, "_candidates", lambda: [tmp_path])
    with pytest.raises(PagecastError, match="no CUDA toolkit found"):
        cn.find_toolkit()
    assert main(["cuda", "build"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA toolkit found" in err[0] and "CUDA_HOME" in err[0]


def test_record_without_gpu_reports_no_cupti_records(tk, tmp_path, capsys, monkeypatch):
    """With the driver TEST DOUBLE nothing loads the CUPTI collector (the real driver
    does): record_cuda must say so in one line and keep the interposer's files."""
    from _cuda_double import build_libs
    from pagecast.cli import main

    libs = build_libs()
    monkeypatch.setenv("PAGECAST_CUDA_DRIVER", str(libs.double))
    rc = main(
        [
            "cuda",
            "record",
            "-o",
            str(tmp_path / "t.parquet"),
            "--",
            str(libs.client),
            "resolve",
            "gpa2",
            "managed",
            "4096",
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "no CUPTI record stream" in err and len(err.strip().splitlines()) == 1
    assert len(list((tmp_path / "t.parquet.cuda").glob("allocs.*.csv"))) == 1
    assert not (tmp_path / "t.parquet").exists()


@pytest.mark.slow
def test_cuda_workloads_build_with_nvcc(tk):
    if tk.nvcc is None:
        pytest.skip("no nvcc")
    built = cn.build_workloads(tk=tk)
    assert set(built) == {"vector_add", "oversub"}
    for exe in built.values():
        syms = _symbols(exe, "--undefined-only")
        assert "dlsym" in syms  # static cudart finds the driver with dlopen + dlsym: what the interposer hooks
        assert exe.stat().st_mode & 0o111
