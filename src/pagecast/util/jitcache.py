"""Where numba keeps compiled kernels: a directory keyed by the sources they come from.

numba's own cache notices when a jitted function's file changes, but not when a function
it calls from another module does: an edited prefetcher would keep running its old
compiled code inside the simulator loop. Keying the cache directory by a hash of every
module with jitted code makes any edit start a fresh cache. Call ``configure()`` before
the first ``@njit(cache=True)`` runs; ``NUMBA_CACHE_DIR`` set by the user wins.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_PACKAGES = ("sim", "policies", "trace")  # trace: the key functions the kernels inline (trace/keys.py)
_done = False


def configure() -> None:
    global _done
    if _done:
        return
    _done = True
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    import numba

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    # constants compiled code captures (MAX_PREFETCH, PAGE_BITS)
    h.update((root / "constants.py").read_bytes())
    for pkg in _PACKAGES:
        for f in sorted((root / pkg).glob("*.py")):
            text = f.read_bytes()
            if b"njit" in text:  # only modules with compiled code matter
                h.update(f.name.encode())
                h.update(text)
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pagecast" / "numba"
    numba.config.CACHE_DIR = str(base / h.hexdigest()[:16])
