"""``pagecast import gem5``: pick the reader for a gem5 output file and attach ``stats.txt``.

A source is a packet trace when it starts with the gzip magic or ``gem5``, holds
binary bytes or is named ``*.trc[.gz]`` / ``*.ptrc[.gz]``; a
``stats.txt`` when its first non-empty line is gem5's Begin Simulation Statistics
separator; otherwise a debug trace of the GPU model. ``stats_only`` writes a trace with
no rows whose metadata holds the statistics summary (a run without a packet trace).
An ``m5out`` directory stands for its packet trace and ``stats.txt`` (``resolve_m5out``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from pagecast.errors import PagecastError
from pagecast.importers import gem5, gem5_gpu_debug, gem5_stats
from pagecast.trace.writer import TraceWriter


def detect(path: str | Path) -> str:
    """``packets``, ``stats`` or ``debug``."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise PagecastError(f"cannot read: {e.strerror}", path=path) from None
    if head[:2] == b"\x1f\x8b" or (head[:4] == gem5.MAGIC and not head.startswith(b"gem5 Simulator")):
        return "packets"  # gem5's console output (and so a debug trace) starts "gem5 Simulator System"
    binary = any(b < 9 for b in head)  # text logs have no control bytes below tab
    if binary or path.name.endswith((".trc", ".trc.gz", ".ptrc", ".ptrc.gz")):
        return "packets"  # the packet reader names what is wrong (magic, gzip)
    if head.lstrip().startswith(gem5_stats.BEGIN.encode()):
        return "stats"
    return "debug"


TRACE_GLOBS = ("*.trc.gz", "*.ptrc.gz", "*.trc", "*.ptrc")


def resolve_m5out(src: str | Path, stats: str | Path | None) -> tuple[Path, Path | None, bool]:
    """A gem5 output directory → (packet trace or stats.txt, stats.txt to attach, stats only).

    A file is returned as it is. In a directory the one packet trace is used (several:
    an error naming them) with the directory's ``stats.txt``; without a trace, the
    ``stats.txt`` alone.
    """
    src = Path(src)
    if not src.is_dir():
        return src, Path(stats) if stats else None, False
    traces = sorted({p for g in TRACE_GLOBS for p in src.glob(g)})
    st = Path(stats) if stats else (src / "stats.txt" if (src / "stats.txt").is_file() else None)
    if len(traces) > 1:
        names = ", ".join(p.name for p in traces)
        raise PagecastError(f"several packet traces ({names}): name the one to import", path=src)
    if traces:
        return traces[0], st, False
    if st is None:
        raise PagecastError("no packet trace (*.trc.gz) and no stats.txt in this directory", path=src)
    return st, None, True


def import_stats_only(src: str | Path, out: str | Path) -> dict[str, Any]:
    summary = gem5_stats.summarize(src)
    with TraceWriter(out, source="import:gem5-stats", meta={"gem5_stats": summary, "time_unit": "ns"}):
        pass
    return {
        "trace": str(out),
        "rows": 0,
        "stats_dumps": len(summary["dumps"]),
        "statistics": sum(d["stats"] for d in summary["dumps"]),
    }


def import_run(
    src: str | Path,
    out: str | Path,
    *,
    stats: str | Path | None = None,
    stats_only: bool = False,
    address: str = "virtual",
    tick_freq: int = 10**12,
    on_bytes: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    src = Path(src)
    kind = detect(src)
    if stats_only:
        return import_stats_only(src, out)
    if kind == "stats":
        raise PagecastError("this is a stats.txt, not a trace: use --stats-only (or --stats with a trace)", path=src)
    summary = gem5_stats.summarize(stats) if stats else None
    if kind == "packets":
        info = gem5.import_trace(src, out, stats=summary, on_bytes=on_bytes)
    else:
        info = gem5_gpu_debug.import_trace(
            src, out, address=address, tick_freq=tick_freq, stats=summary, on_bytes=on_bytes
        )
    info["input"] = "packet trace" if kind == "packets" else f"GPU debug trace ({address} addresses)"
    if summary:
        info["stats_dumps"] = len(summary["dumps"])
    return info
