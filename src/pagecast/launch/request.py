"""What one ``pagecast run`` is asked to do, as data: the program, where predictions come
from, which backends move the pages, and where the report goes.

The command line builds a ``RunRequest`` and hands it to ``pagecast.launch.launcher``;
Python callers can build one directly. Nothing here starts a process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# where the predictions come from
SOURCE_KINDS = ("none", "policy", "model", "schedule", "plan", "cuda")


@dataclass
class PredictionSource:
    """``kind`` and its argument: a policy spec, a model file, a schedule (or earlier trace)
    file, or a plan file; ``none`` records faults without prefetching. ``cuda`` prefetches
    CUDA managed memory from ``schedule`` or ``model`` (exactly one)."""

    kind: str = "none"
    policy: str | None = None
    model: str | None = None
    schedule: str | None = None
    plan: str | None = None
    top_k: int = 10  # model: pages predicted per fault
    lookahead: int = 8192  # schedule replay: pages issued ahead of the program's position
    throttle: bool = True  # policy/model: issue fewer pages per fault while few prefetched pages are used


@dataclass
class Backends:
    """How predicted pages reach the program.

    By default the live loop reads them into the page cache (``posix_fadvise``) and
    anonymous pages through the in-process shim (``anon``). ``pager`` serves files through
    the userfaultfd pager with a memory budget; ``packs`` stream page packs into the
    program's mappings of their files (through the pager).
    """

    anon: bool = True
    pager: list[tuple[str, int]] = field(default_factory=list)  # (file, budget in bytes)
    packs: list[str] = field(default_factory=list)
    fast: bool | None = None  # native fast path: None = wherever it applies, False = never


@dataclass
class LiveTuning:
    """Knobs of the live loop (see ``pagecast.live.loop.LiveConfig``)."""

    threads: int = 2
    gap: int = 4
    poll_ms: int = 5
    nice: int = 10


@dataclass
class RunRequest:
    argv: list[str]
    source: PredictionSource = field(default_factory=PredictionSource)
    backends: Backends = field(default_factory=Backends)
    output: Path | None = None  # trace of faults and PREFETCH rows
    json: bool = False  # the program's stdout goes to stderr, the report to stdout
    tuning: LiveTuning = field(default_factory=LiveTuning)
    cuda_out_dir: Path = Path("pagecast-run")
    plan_status: str | None = None  # plan: the prefetcher's report file
