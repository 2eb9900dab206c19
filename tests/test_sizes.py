"""The one size grammar (util/sizes.py) and the parsers built on it."""

from __future__ import annotations

import pytest

from pagecast.errors import PagecastError
from pagecast.util.sizes import format_size, is_size, parse_size


@pytest.mark.parametrize(
    "text, n",
    [
        ("4096", 4096),
        ("0", 0),
        ("4K", 4096),
        ("4k", 4096),
        ("4KiB", 4096),
        ("4kb", 4096),
        ("4KB", 4096),
        ("256M", 256 << 20),
        ("256 MiB", 256 << 20),
        ("1G", 1 << 30),
        ("1.5GiB", 3 << 29),
        ("2T", 2 << 40),
        ("4096B", 4096),
        (" 64K ", 65536),
        (".5K", 512),
        ("1.5K", 1536),
        ("1.0001K", 1024),
        (4096, 4096),
    ],
)
def test_accepted(text, n):
    assert parse_size(text) == n
    assert isinstance(text, int) or is_size(text)


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "is not a size"),
        ("x", "is not a size"),
        ("4Q", "is not a size"),
        ("-1", "is not a size"),
        ("1e3", "is not a size"),
        ("4 K B", "is not a size"),
        ("16p", "is not a size"),
        ("1P", "is not a size"),
        ("1.5", "is not a whole number of bytes"),
        ("2.5B", "is not a whole number of bytes"),
        ("4KK", "is not a size"),
        ("3.", "is not a size"),
    ],
)
def test_refused_in_one_line(text, why):
    with pytest.raises(PagecastError) as e:
        parse_size(text, "budget")
    msg = str(e.value)
    assert msg.startswith(f"budget {text!r} ") and why in msg and "\n" not in msg
    assert not is_size(text)


def test_negative_int_refused():
    with pytest.raises(PagecastError, match="negative"):
        parse_size(-5)


@pytest.mark.parametrize("n", [0, 1, 4095, 4096, 3 << 29, 256 << 20, 5 << 40, (1 << 40) + 1024])
def test_format_round_trip(n):
    assert parse_size(format_size(n)) == n


def test_capacity_uses_the_grammar():
    from pagecast.sim.config import parse_capacity

    assert parse_capacity("4096") == 4096 and parse_capacity("100p") == 100 and parse_capacity("7 pages") == 7
    assert parse_capacity("64MiB") == 16384 and parse_capacity("1.5g") == 393216 and parse_capacity("4096b") == 1
    assert parse_capacity("2t", page_size=1 << 20) == 2 << 20
    with pytest.raises(PagecastError, match="bad capacity"):
        parse_capacity("lots")
    with pytest.raises(PagecastError, match="less than one page"):
        parse_capacity("1K")


def test_pager_budgets_use_the_grammar():
    from pagecast.pager.runtime import parse_budget, parse_specs

    assert parse_budget("16p") == 16 * 4096 and parse_budget("1M") == 1 << 20 and parse_budget("1.5GiB") == 3 << 29
    assert parse_budget("64kb") == 65536 and parse_budget("4096") == 4096
    with pytest.raises(PagecastError, match="is not a size"):
        parse_budget("lots")
    with pytest.raises(PagecastError, match="too large"):
        parse_budget("17000000T")
    assert parse_specs("a.bin:1M,b,c.bin:16p") == [("a.bin", 1 << 20), ("b,c.bin", 16 * 4096)]
    assert parse_specs("w.bin:1.5G") == [("w.bin", 3 << 29)]
