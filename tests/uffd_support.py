"""Skip marker for tests that need a working userfaultfd (the pager)."""

from __future__ import annotations

import pytest

from pagecast.errors import PagecastError
from pagecast.pager.runtime import probe


def uffd_ok() -> bool:
    try:
        probe()
        return True
    except PagecastError:
        return False


needs_uffd = pytest.mark.skipif(not uffd_ok(), reason="userfaultfd not usable on this machine")
