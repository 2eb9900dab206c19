"""Shared numbers are defined once (pagecast/constants.py) and every user sees the same value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pagecast
from pagecast import constants as C

SRC = Path(pagecast.__file__).parent


def test_values():
    assert C.PAGE_SIZE == 4096 == 1 << C.PAGE_SHIFT
    assert C.MAX_PREFETCH == 64 and C.PAGE_BITS == 40


def test_users_see_the_same_values():
    from pagecast.collect import faultmon
    from pagecast.plan import format as plan_format
    from pagecast.policies import _numba
    from pagecast.sim import engine
    from pagecast.sim.config import SimConfig
    from pagecast.trace import keys
    from pagecast.trace.regions import Region

    assert engine.MAX_PF == _numba.MAX_PREFETCH == SimConfig().max_prefetch == C.MAX_PREFETCH
    assert faultmon.PAGE_SIZE == plan_format.PAGE_SIZE == Region(0, "r").page_size == C.PAGE_SIZE
    assert keys.PAGE_BITS == C.PAGE_BITS


def test_prefetchers_are_bounded_by_max_prefetch():
    from pagecast.errors import PagecastError
    from pagecast.policies.spec import parse_policy_spec

    parse_policy_spec(f"stride:degree={C.MAX_PREFETCH}").build()
    with pytest.raises(PagecastError, match=f"1..{C.MAX_PREFETCH}"):
        parse_policy_spec(f"stride:degree={C.MAX_PREFETCH + 1}").build()


_REDEFINED = re.compile(
    r"^(?:MAX_PREFETCH|MAX_PF|PAGE_SIZE|PAGE|PAGE_BITS|_PAGE_BITS|KEY_SHIFT)\s*=\s*(?:64|4096|40)\b", re.M
)


def test_no_module_writes_them_again():
    again = [
        f"{p.relative_to(SRC)}:{s.count(chr(10), 0, m.start()) + 1}"
        for p in sorted(SRC.rglob("*.py"))
        if p.name != "constants.py"
        for s in [p.read_text()]
        for m in _REDEFINED.finditer(s)
    ]
    assert again == []
