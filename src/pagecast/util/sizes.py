"""One grammar for sizes in bytes on the command line: ``4096``, ``4K``, ``4KiB``, ``4kb``,
``256M``, ``1G``, ``1.5GiB``, ``2T``.

Units are binary whatever the spelling (K = KB = KiB = 1024 bytes), as the kernel and
every tool here count memory; case and blanks do not matter. A fraction is allowed with
a unit and rounds down to whole bytes (``1.5K`` = 1536). Anything else is a one-line
PagecastError.
"""

from __future__ import annotations

import re
from decimal import Decimal

from pagecast.errors import PagecastError

# no P: commands that take pages write them ``16p`` (pager budgets, simulator capacities)
UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*(?:([kmgt])(?:i?b)?|b)?\s*", re.IGNORECASE)
EXAMPLES = "e.g. 4096, 4K, 4KiB, 256M, 1G, 1.5GiB"


def is_size(text: str) -> bool:
    """Whether ``text`` is a size in this grammar."""
    m = _SIZE.fullmatch(str(text))
    return bool(m) and ("." not in m.group(1) or bool(m.group(2)))


def parse_size(text: str | int, what: str = "size") -> int:
    """Bytes from ``text``; ``what`` names the value in the error (``budget``, ``capacity``)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise PagecastError(f"{what} {text} is negative")
        return text
    m = _SIZE.fullmatch(str(text))
    if not m:
        raise PagecastError(f"{what} {text!r} is not a size ({EXAMPLES})")
    num, unit = m.group(1), (m.group(2) or "").lower()
    if "." in num and not unit:
        raise PagecastError(f"{what} {text!r} is not a whole number of bytes ({EXAMPLES})")
    return int(Decimal(num) * UNITS[unit])


def format_size(n: int) -> str:
    """``n`` bytes in the largest unit that divides it (``parse_size`` reads it back)."""
    for unit in ("T", "G", "M", "K"):
        step = UNITS[unit.lower()]
        if n and n % step == 0:
            return f"{n // step}{unit}iB"
    return str(n)
