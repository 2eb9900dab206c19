"""The memory plan file: what to keep, evict after use and prefetch under a memory limit.

Written by ``pagecast plan --memory``, read by ``pagecast run --memory --plan`` (Python
only: the live controller that applies it is Python). JSON, one object:

    {"format": "pagecast-memory-plan", "version": 1, "limit_bytes": N, "chunk_bytes": N,
     "reserve_bytes": N, "prefetch_chunks": N, "backend": "kernel-advice" | "pager" | "kernel",
     "room_bytes": N,
     "files": [{"path", "identity": {size, mtime_ns, ctime_ns, ino, dev},
                "keep": [[first_chunk, nchunks], ...], "stream": [[first_chunk, nchunks], ...],
                "next": {"chunk": next_chunk, ...}, "predicted": {...},
                "objects": [pages, first_page], "advice": "sequential",
                "advice_span": [first_chunk, nchunks]}],  (the last three optional)
     "validation": {...}, "note": "..."}

Chunks are ``chunk_bytes`` pieces of a file (chunk c is bytes [c*chunk_bytes, (c+1)*chunk_bytes)).
``keep``: held for the whole run; ``stream``: evicted right after use; ``next``: the chunk
usually used after a streamed one (what to prefetch ahead); ``room_bytes``: what the keep
set leaves unlocked for the streamed part (absent in older plans: 0); ``advice``: the read-ahead
advice the program's opens and mappings of the file get (the advice shim); ``advice_span``: the
part of the file its mappings get that advice on, the rest advised random (what the program read
by lookups, not in order). ``backend``: who applies
it by default (``kernel-advice``: the controller beside the program; ``pager``: the userfaultfd
pager, where ``plan --measure`` timed it faster); ``kernel`` means the plan found nothing to
gain over the kernel: the program runs under the limit, untouched.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.plan.format import FileIdentity
from pagecast.util.atomic import atomic_write_text

FORMAT = "pagecast-memory-plan"
VERSION = 1
BACKENDS = ("kernel-advice", "kernel", "pager")
ADVICE = {"sequential": "l"}  # a plan's file advice -> the advice shim's letter (PAGECAST_ADVICE_FILES)
# share of a file's streamed chunks the plan must know a successor of for them to be followed
# from outside (evicted after use, prefetched ahead): below it, paging out from outside
# evicts what the program comes back to (measured: twice the reads on scattered reads)
STREAM_CHAIN = 0.9
# streamed chunks the controller keeps after the program entered them: the one in use and the
# one before (where a second thread still is); an older one is paged out
RECENT_CHUNKS = 2


@dataclass
class FileMemoryPlan:
    path: str
    identity: FileIdentity
    keep: list[tuple[int, int]] = field(default_factory=list)  # (first chunk, chunks)
    stream: list[tuple[int, int]] = field(default_factory=list)
    next: dict[int, int] = field(default_factory=dict)
    predicted: dict[str, int] = field(default_factory=dict)  # bytes read: lru, min, plan
    # (pages, first page): the program reads this file as objects of that many pages from
    # that page on; a miss in one reads the object instead of the read-around window
    objects: tuple[int, int] | None = None
    # the program's opens and mappings of it advised so (``ADVICE``); None: left as they are
    advice: str | None = None
    # (first chunk, chunks): its mappings get ``advice`` on these chunks only, MADV_RANDOM on
    # the rest (the part read by lookups); None: on the whole mapping
    advice_span: tuple[int, int] | None = None

    def keep_chunks(self) -> int:
        return sum(n for _, n in self.keep)

    def followed(self) -> bool:
        """Whether its streamed chunks are followed from outside; else the kernel streams them."""
        chunks = [a + k for a, n in self.stream for k in range(n)]
        return bool(chunks) and sum(1 for c in chunks if c in self.next) >= STREAM_CHAIN * len(chunks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "identity": vars(self.identity),
            "keep": [list(r) for r in self.keep],
            "stream": [list(r) for r in self.stream],
            "next": {str(k): v for k, v in self.next.items()},
            "predicted": self.predicted,
            **({"objects": list(self.objects)} if self.objects else {}),
            **({"advice": self.advice} if self.advice else {}),
            **({"advice_span": list(self.advice_span)} if self.advice_span else {}),
        }


@dataclass
class MemoryPlan:
    limit_bytes: int
    chunk_bytes: int
    reserve_bytes: int
    prefetch_chunks: int
    backend: str = "kernel-advice"
    files: list[FileMemoryPlan] = field(default_factory=list)
    validation: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    # left unlocked for the streamed part: the keep set is cut (plan) and unpinned (live) to
    # leave this much beside the program's own memory
    room_bytes: int = 0

    def keep_bytes(self) -> int:
        return sum(f.keep_chunks() for f in self.files) * self.chunk_bytes

    def followed_bytes(self) -> int:
        return sum(n for f in self.files if f.followed() for _, n in f.stream) * self.chunk_bytes

    def object_files(self) -> list[FileMemoryPlan]:
        return [f for f in self.files if f.objects]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "limit_bytes": self.limit_bytes,
            "chunk_bytes": self.chunk_bytes,
            "reserve_bytes": self.reserve_bytes,
            "prefetch_chunks": self.prefetch_chunks,
            "backend": self.backend,
            "room_bytes": self.room_bytes,
            "files": [f.to_dict() for f in self.files],
            "validation": self.validation,
            "note": self.note,
        }


def write_memory_plan(plan: MemoryPlan, path: str | Path) -> None:
    atomic_write_text(path, json.dumps(plan.to_dict(), indent=1) + "\n")


def is_memory_plan(path: str | Path) -> bool:
    """Whether ``path`` starts like a memory plan (a JSON object naming this format)."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and FORMAT.encode() in head


def _ranges(v: Any, what: str, path: str | Path) -> list[tuple[int, int]]:
    if not isinstance(v, list) or not all(
        isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) and x >= 0 for x in r) for r in v
    ):
        raise PagecastError(f"memory plan: {what} is not a list of [first, count] pairs", path=path)
    return [(int(a), int(b)) for a, b in v]


def _objects(v: Any, path: str | Path) -> tuple[int, int] | None:
    if v is None:
        return None
    if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v) and v[0] > 0 and v[1] >= 0):
        raise PagecastError("memory plan: objects is not [pages, first page]", path=path)
    return (int(v[0]), int(v[1]))


def _advice(v: Any, path: str | Path) -> str | None:
    if v is None or v in ADVICE:
        return v
    raise PagecastError(f"memory plan: advice {v!r} is not one of {', '.join(ADVICE)}", path=path)


def _span(v: Any, advice: Any, path: str | Path) -> tuple[int, int] | None:
    if v is None:
        return None
    if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v) and v[0] >= 0 and v[1] > 0):
        raise PagecastError("memory plan: advice_span is not [first chunk, chunks]", path=path)
    if advice is None:
        raise PagecastError("memory plan: advice_span without an advice", path=path)
    return (int(v[0]), int(v[1]))


def read_memory_plan(path: str | Path) -> MemoryPlan:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PagecastError(f"not a readable memory plan ({e})", path=path) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PagecastError("not a memory plan (pagecast plan --memory writes them)", path=path)
    if doc.get("version") != VERSION:
        raise PagecastError(f"memory plan version {doc.get('version')!r} is not {VERSION}", path=path)
    try:
        files = []
        for f in doc["files"]:
            files.append(
                FileMemoryPlan(
                    path=str(f["path"]),
                    identity=FileIdentity(**{k: int(v) for k, v in f["identity"].items()}),
                    keep=_ranges(f["keep"], "keep", path),
                    stream=_ranges(f["stream"], "stream", path),
                    next={int(k): int(v) for k, v in f.get("next", {}).items()},
                    predicted={str(k): int(v) for k, v in f.get("predicted", {}).items()},
                    objects=_objects(f.get("objects"), path),
                    advice=_advice(f.get("advice"), path),
                    advice_span=_span(f.get("advice_span"), f.get("advice"), path),
                )
            )
        sizes = {k: int(doc[k]) for k in ("limit_bytes", "chunk_bytes", "reserve_bytes", "prefetch_chunks")}
        plan = MemoryPlan(
            backend=str(doc["backend"]),
            files=files,
            validation=dict(doc.get("validation") or {}),
            note=str(doc.get("note") or ""),
            room_bytes=int(doc.get("room_bytes") or 0),
            **sizes,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise PagecastError(f"memory plan: missing or malformed field ({e})", path=path) from None
    if plan.backend not in BACKENDS or plan.chunk_bytes <= 0 or plan.chunk_bytes % PAGE_SIZE:
        raise PagecastError(f"memory plan: bad backend {plan.backend!r} or chunk size {plan.chunk_bytes}", path=path)
    return plan


def _trim_keep(keep: list[tuple[int, int]], drop: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Drop ``drop`` chunks from the end of ``keep``; (kept ranges, dropped ranges)."""
    out, dropped = list(keep), []
    while drop > 0 and out:
        a, n = out.pop()
        k = min(n, drop)
        if n > k:
            out.append((a, n - k))
        dropped.append((a + n - k, k))
        drop -= k
    return out, dropped


def _two_limits(made: int, now: int) -> tuple[str, str]:
    """The two limits, in MiB unless that would print them alike."""
    if made >> 20 != now >> 20:
        return f"{made >> 20} MiB", f"{now >> 20} MiB"
    return f"{made:,}-byte", f"{now:,} bytes"


def for_limit(plan: MemoryPlan, limit: int) -> tuple[MemoryPlan, str | None]:
    """The plan for a run under ``limit`` bytes, and a warning when it was made for another.

    A larger limit keeps the plan (its keep set still fits). A smaller one scales the keep
    set down to what the new limit leaves (the chunks dropped become streamed); a limit
    too small for even the prefetch window falls back to the kernel."""
    if limit == plan.limit_bytes or plan.backend == "kernel":
        return plan, None
    made, now = _two_limits(plan.limit_bytes, limit)
    if limit > plan.limit_bytes:
        return plan, f"the plan was made for a {made} limit, this run has {now}: its keep set is used as it is"
    window = max((plan.prefetch_chunks + 2) * plan.chunk_bytes, plan.room_bytes)
    room = limit - plan.reserve_bytes - window
    if room <= 0:
        kernel = MemoryPlan(limit, plan.chunk_bytes, plan.reserve_bytes, 0, "kernel", note="fallback")
        return kernel, (
            f"the plan was made for a {made} limit; {now} leaves no "
            "room for its prefetch window: the kernel alone runs the program"
        )
    excess = -(-(plan.keep_bytes() - room) // plan.chunk_bytes)
    files = []
    for f in reversed(plan.files):  # the first files the runs used keep their chunks longest
        keep, dropped = _trim_keep(f.keep, max(0, excess))
        excess -= sum(n for _, n in dropped)
        files.append(dataclasses.replace(f, keep=keep, stream=sorted(f.stream + dropped)))
    files.reverse()
    scaled = dataclasses.replace(plan, limit_bytes=limit, files=files)
    if scaled.keep_bytes() == plan.keep_bytes():
        return scaled, f"the plan was made for a {made} limit, this run has {now}: its keep set still fits"
    return scaled, (
        f"the plan was made for a {made} limit, this run has {now}: "
        f"its keep set scaled down to {scaled.keep_bytes() >> 20} MiB"
    )
