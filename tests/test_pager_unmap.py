"""munmap of a paged region with the length the program gave mmap: a full unmap, as the
kernel counts it (lengths round up to whole pages), not a "partial munmap" warning; a
real partial munmap warns once and leaves the rest of the region served."""

from __future__ import annotations

import subprocess
import sys

from pagecast.pager.runtime import run_pager
from uffd_support import needs_uffd

pytestmark = needs_uffd

PRELUDE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
fd = os.open(sys.argv[1], os.O_RDONLY)
"""
UNMAP = (
    PRELUDE
    + """
length, unmap = int(sys.argv[2]), int(sys.argv[3])
p = libc.mmap(None, length, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
assert p not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
total = sum(ctypes.c_ubyte.from_address(p + off).value for off in range(0, length, 4096))
print(total, libc.munmap(p, unmap))
"""
)


def _run(tmp_path, length: int, unmap: int) -> str:
    data = tmp_path / "w.bin"
    data.write_bytes(b"\x01" * 3 * 4096)
    err = tmp_path / "err.txt"
    with open(err, "w") as e, open(tmp_path / "out.txt", "w") as o:
        res = run_pager([sys.executable, "-c", UNMAP, str(data), str(length), str(unmap)], [(str(data), 1 << 20)],
                        stdout=o, stderr=e)  # fmt: skip
    assert res.returncode == 0, err.read_text()
    pages = -(-length // 4096)
    assert (tmp_path / "out.txt").read_text().split() == [str(pages), "0"]
    return err.read_text()


def test_full_munmap_of_an_unaligned_length_is_not_partial(tmp_path):
    assert "partial munmap" not in _run(tmp_path, 10000, 10000)


def test_partial_munmap_still_warns(tmp_path):
    assert "partial munmap" in _run(tmp_path, 3 * 4096, 4096)


# unmap the first page, then read the others (llama.cpp drops the fragments of its weights
# file no tensor uses, then computes from the rest)
UNMAP_THEN_READ = (
    PRELUDE
    + """
p = libc.mmap(None, 3 * 4096, 1, 1, fd, 0)
print(libc.munmap(p, 4096), libc.munmap(p + 2 * 4096, 4096))
print(sum(ctypes.c_ubyte.from_address(p + 4096 + off).value for off in range(0, 4096, 512)))
"""
)


def test_partial_munmap_leaves_the_rest_served(tmp_path):
    data = tmp_path / "w.bin"
    data.write_bytes(b"\x02" * 3 * 4096)
    err = tmp_path / "err.txt"
    with open(err, "w") as e, open(tmp_path / "out.txt", "w") as o:
        res = run_pager([sys.executable, "-c", UNMAP_THEN_READ, str(data)], [(str(data), 1 << 20)], stdout=o, stderr=e)
    assert res.returncode == 0, err.read_text()
    assert (tmp_path / "out.txt").read_text().split() == ["0", "0", "16"]  # 8 bytes of 2 from the middle page
    assert err.read_text().count("partial munmap") == 1  # once per region


def test_bare_python_runs_the_script(tmp_path):
    """The script itself, without the pager (the reference)."""
    data = tmp_path / "w.bin"
    data.write_bytes(b"\x01" * 3 * 4096)
    r = subprocess.run([sys.executable, "-c", UNMAP, str(data), "10000", "10000"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.split() == ["3", "0"], r.stderr
