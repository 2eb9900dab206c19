"""Whether this machine lets the tests record page faults with perf_event_open."""

from __future__ import annotations

import pytest

from pagecast.collect.faultmon import read_all
from pagecast.errors import PagecastError


def perf_unavailable_reason() -> str | None:
    try:
        read_all(["true"])
    except PagecastError as e:
        return str(e)
    return None


_why = perf_unavailable_reason()
needs_perf = pytest.mark.skipif(_why is not None, reason=f"perf not usable: {_why}")
