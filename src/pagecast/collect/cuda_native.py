"""Find the CUDA toolkit and build pagecast's CUDA libraries (``native/cuda/``).

Everything is compiled with the system C compiler against the toolkit's headers, with
warnings as errors. The interposer and the test double need only ``cuda.h``; the CUPTI
collector also needs ``cupti.h`` and ``libcupti.so``. No GPU and no ``libcuda.so`` are
needed to build: the interposer finds the driver at run time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pagecast.errors import PagecastError
from pagecast.util.native import build, build_dir, native_dir

WARN = ("-O2", "-g", "-Wall", "-Wextra", "-Werror")
INTERPOSER_SOURCES = ("cuda/interpose.c", "cuda/alloc_table.c", "cuda/iolog.c", "cuda/injector.c")

# Every symbol the interposer must export (checked by tests with nm -D).
INTERPOSER_EXPORTS = frozenset(
    """dlsym cuGetProcAddress cuGetProcAddress_v2 cuMemAllocManaged cuMemAlloc_v2 cuMemFree_v2
    cuLaunchKernel cuLaunchKernel_ptsz cuMemcpy cuMemcpy_ptds cuMemcpyAsync cuMemcpyAsync_ptsz
    cuMemcpyHtoD_v2 cuMemcpyHtoD_v2_ptds cuMemcpyDtoH_v2 cuMemcpyDtoH_v2_ptds cuMemcpyDtoD_v2
    cuMemcpyDtoD_v2_ptds cuMemcpyHtoDAsync_v2 cuMemcpyHtoDAsync_v2_ptsz cuMemcpyDtoHAsync_v2
    cuMemcpyDtoHAsync_v2_ptsz cuMemcpyDtoDAsync_v2 cuMemcpyDtoDAsync_v2_ptsz cuMemPrefetchAsync
    cuMemPrefetchAsync_ptsz cuMemPrefetchAsync_v2 cuMemPrefetchAsync_v2_ptsz cuLaunchKernelEx cuLaunchKernelEx_ptsz
    cuMemAllocAsync cuMemAllocAsync_ptsz cuMemFreeAsync cuMemFreeAsync_ptsz pagecast_cuda_translate
    pagecast_cuda_flush""".split()
)


@dataclass(frozen=True)
class CudaToolkit:
    root: Path
    include: Path
    cupti_include: Path | None
    cupti_lib: Path | None
    nvcc: Path | None


def _candidates() -> list[Path]:
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    roots += ["/usr/local/cuda", "/opt/cuda", "/usr"]
    return [Path(r) for r in roots if r]


def find_toolkit() -> CudaToolkit:
    """The first toolkit with ``include/cuda.h``; raise a PagecastError naming where we looked."""
    looked = []
    for root in _candidates():
        inc = root / "include"
        looked.append(str(inc))
        if not (inc / "cuda.h").exists():
            continue
        cupti_inc = cupti_lib = None
        for ci, cl in (
            (inc, root / "lib64"),
            (inc, root / "lib"),
            (root / "extras/CUPTI/include", root / "extras/CUPTI/lib64"),
        ):
            if (ci / "cupti.h").exists() and any(cl.glob("libcupti.so*")):
                cupti_inc, cupti_lib = ci, cl
                break
        nvcc = root / "bin" / "nvcc"
        return CudaToolkit(
            root,
            inc,
            cupti_inc,
            cupti_lib,
            nvcc if nvcc.exists() else (Path(shutil.which("nvcc")) if shutil.which("nvcc") else None),
        )
    raise PagecastError(
        "no CUDA toolkit found (no cuda.h in "
        + ", ".join(dict.fromkeys(looked))
        + "): install the CUDA toolkit or set CUDA_HOME"
    )


def build_interposer(tk: CudaToolkit | None = None) -> Path:
    """libpagecast_cuda.so: the LD_PRELOAD interposer + prefetch injector."""
    tk = tk or find_toolkit()
    return build(
        "libpagecast_cuda",
        INTERPOSER_SOURCES,
        cflags=(*WARN, "-fvisibility=hidden"),
        include=[tk.include],
        ldflags=("-ldl", "-lpthread", "-lm"),
    )


def build_cupti_collector(tk: CudaToolkit | None = None) -> Path:
    """libpagecast_cupti.so, loaded by the driver through CUDA_INJECTION64_PATH."""
    tk = tk or find_toolkit()
    if tk.cupti_include is None or tk.cupti_lib is None:
        raise PagecastError(
            f"the CUDA toolkit at {tk.root} has no CUPTI (cupti.h and libcupti.so): install the CUPTI component"
        )
    return build(
        "libpagecast_cupti",
        ["cuda/cupti_collector.c"],
        cflags=(*WARN, "-fvisibility=hidden"),
        include=[tk.include, tk.cupti_include],
        ldflags=(f"-L{tk.cupti_lib}", "-lcupti", f"-Wl,-rpath,{tk.cupti_lib}", "-lpthread"),
    )


WORKLOADS = {"vector_add": "vector_add.cu", "oversub": "oversub.cu"}


def workloads_dir() -> Path:
    return native_dir().parent / "workloads" / "cuda"


def build_workloads(out_dir: Path | None = None, tk: CudaToolkit | None = None) -> dict[str, Path]:
    """Compile the CUDA test programs with nvcc (static cudart, nvcc's default)."""
    tk = tk or find_toolkit()
    if tk.nvcc is None:
        raise PagecastError(f"nvcc not found in {tk.root}/bin or PATH: the CUDA workloads need the CUDA compiler")
    out_dir = Path(out_dir) if out_dir else build_dir() / "cuda-workloads"
    out_dir.mkdir(parents=True, exist_ok=True)
    built = {}
    for name, src in WORKLOADS.items():
        source = workloads_dir() / src
        out = out_dir / name
        newest_input = max(p.stat().st_mtime for p in [source, *workloads_dir().glob("*.cuh")])
        if out.exists() and out.stat().st_mtime >= newest_input:
            built[name] = out
            continue
        private = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=out_dir))  # nvcc follows links at its output
        try:
            tmp = private / name
            proc = subprocess.run(
                [str(tk.nvcc), "-O2", "-Werror", "all-warnings", "-o", str(tmp), str(source)],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                first = (proc.stderr.strip().splitlines() or ["(no output)"])[0]
                raise PagecastError(f"nvcc failed: {first}", path=source)
            os.replace(tmp, out)
        finally:
            shutil.rmtree(private, ignore_errors=True)
        built[name] = out
    return built
