"""gem5 ``stats.txt`` (one or several dumps) → a readable summary for a trace's metadata.

A dump is the lines between ``---------- Begin Simulation Statistics ----------`` and
``---------- End Simulation Statistics ----------``; each line is ``name value [pct
cum_pct] # description``. Ruby histograms (``name | bucket pct cum | ...``) are skipped.
A value that is not a number (``nan`` and ``inf`` are numbers) stops the import with
the file and line.

The summary keeps, per dump, the simulated time and the statistics that profilers
cannot give, grouped so they are easy to find (both gem5's older snake_case names and
the current camelCase ones):

- ``l1_hits``: per-CU L1 (TCP) hits and misses, Ruby's ``tcp_cntrlN.L1cache.*demand_*``
  and the coalescer's ``gpu_tcp_ld_hits`` / ``gpu_tcp_st_hits``;
- ``coalescing``: TLB coalescers' ``coalescedAccesses`` / ``uncoalescedAccesses``;
- ``lds_bank_conflicts``: ``ldsBankConflictDist`` (``lds_bank_conflicts``) samples, mean and
  total, and ``ldsBankAccesses`` (``lds_bank_access_cnt``);
- ``alu_utilization``: ``vALUUtilization``, ``numALUInstsExecuted`` (``num_alu_insts_executed``),
  ``vALUInsts``, ``sALUInsts``, ``instCyclesVALU``, ``threadCyclesVALU``, ``totalCycles``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from pagecast.errors import PagecastError

BEGIN = "---------- Begin Simulation Statistics ----------"
END_PREFIX = "---------- End Simulation Statistics"

GLOBAL = (
    "simSeconds",
    "sim_seconds",
    "simTicks",
    "sim_ticks",
    "simFreq",
    "sim_freq",
    "simInsts",
    "sim_insts",
    "simOps",
    "sim_ops",
    "hostSeconds",
    "host_seconds",
    "finalTick",
    "final_tick",
)

# group → pattern on the stat's full name (matched with re.search)
GROUPS: dict[str, re.Pattern[str]] = {
    "l1_hits": re.compile(
        r"tcp_cntrl\d+\.(L1cache\.(m_)?demand_(hits|misses|accesses)$"
        r"|coalescer\.gpu_tcp_(ld|st)_hits$)"
    ),
    "coalescing": re.compile(
        r"coalescer\d*\.(coalescedAccesses|uncoalescedAccesses|coalesced_accesses"
        r"|uncoalesced_accesses)$"
    ),
    "lds_bank_conflicts": re.compile(
        r"\.(ldsBankConflictDist|lds_bank_conflicts)::(samples|mean|total)$"
        r"|\.(ldsBankAccesses|lds_bank_access_cnt)$"
    ),
    "alu_utilization": re.compile(
        r"CUs?\d+\.(vALUUtilization|numALUInstsExecuted|num_alu_insts_executed|vALUInsts"
        r"|sALUInsts|instCyclesVALU|threadCyclesVALU|totalCycles|num_total_cycles)$"
    ),
}
MAX_PER_GROUP = 256  # a 120-CU GPU has ~100 stats per group; the summary must stay small


def _number(text: str) -> float | int | None:
    try:
        v = int(text)
    except ValueError:
        v = float(text)  # ValueError propagates: not a number
    if isinstance(v, float) and not math.isfinite(v):
        return None  # nan/inf: JSON has no such value
    return v


def parse_stats(path: str | Path) -> list[dict[str, float | int | None]]:
    """Every dump of ``path`` as {stat name: value} (histogram buckets included)."""
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise PagecastError(f"cannot read: {e.strerror}", path=path) from None
    dumps: list[dict[str, float | int | None]] = []
    cur: dict[str, float | int | None] | None = None
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("----------"):
            if s == BEGIN:
                cur = {}
                dumps.append(cur)
            elif s.startswith(END_PREFIX):
                cur = None
            else:
                raise PagecastError(f"unknown separator line: {s[:60]!r}", path=path, line=no)
            continue
        if cur is None:
            raise PagecastError(
                f"statistic outside a Begin/End Simulation Statistics block: {s[:60]!r}", path=path, line=no
            )
        fields = s.split("#", 1)[0].split()
        if len(fields) < 2:
            raise PagecastError(f"statistic without a value: {s[:60]!r}", path=path, line=no)
        if fields[1] == "|":  # Ruby histogram: buckets only
            continue
        try:
            cur[fields[0]] = _number(fields[1])
        except ValueError:
            raise PagecastError(f"statistic {fields[0]}: non-numeric value {fields[1]!r}", path=path, line=no) from None
    if not dumps:
        raise PagecastError("no 'Begin Simulation Statistics' block: not a gem5 stats.txt", path=path)
    return dumps


def summarize_dump(stats: dict[str, float | int | None]) -> dict[str, Any]:
    out: dict[str, Any] = {"stats": len(stats)}
    for k in GLOBAL:
        if k in stats:
            out[k] = stats[k]
    for group, rx in GROUPS.items():
        sel = {k: v for k, v in stats.items() if rx.search(k)}
        if len(sel) > MAX_PER_GROUP:
            out[f"{group}_omitted"] = len(sel) - MAX_PER_GROUP
            sel = dict(list(sel.items())[:MAX_PER_GROUP])
        out[group] = sel
    return out


def summarize(path: str | Path) -> dict[str, Any]:
    """The summary stored as ``meta["gem5_stats"]``: file name and one entry per dump."""
    dumps = parse_stats(path)
    return {"file": str(path), "dumps": [summarize_dump(d) for d in dumps]}


def format_summary(summary: dict[str, Any]) -> list[str]:
    """Lines for ``pagecast info``."""
    lines = [f"gem5 stats: {summary.get('file', '?')} ({len(summary.get('dumps', []))} dump(s))"]
    for i, d in enumerate(summary.get("dumps", [])):
        head = ", ".join(f"{k}={d[k]}" for k in GLOBAL if k in d)
        lines.append(f"  dump {i}: {d.get('stats', 0)} statistics{': ' + head if head else ''}")
        for group in GROUPS:
            sel = d.get(group) or {}
            if not sel:
                continue
            lines.append(f"    {group}:")
            for k, v in sel.items():
                lines.append(f"      {k} = {'nan' if v is None else v}")
            if d.get(f"{group}_omitted"):
                lines.append(f"      ... {d[f'{group}_omitted']} more")
    return lines
