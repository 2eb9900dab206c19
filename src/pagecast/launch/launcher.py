"""Carry out a ``RunRequest``: pick the backend that serves it, run the program, report.

Backends, chosen from the request alone:

- ``plan``: the native launcher (``pagecast.launch.planned``); it prints its own report;
- ``cuda``: the CUDA injector preloaded into the program (``pagecast.cuda.injector``);
- ``pager``: the program under the userfaultfd pager, files paged with a budget, page
  packs streamed into their files' mappings (``pagecast.pager``); the policy, if any, is
  the pager's;
- ``live``: the live loop (``pagecast.live.loop``): the fault collector, the predictor
  process or the native fast path, ``posix_fadvise`` and the anonymous-memory shim.

Every input is checked before the program starts (one ``PagecastError`` line). Whatever
the backend, the result is one ``RunReport`` (its JSON shape: docs/live.md, "The run
report").
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from pagecast.errors import PagecastError
from pagecast.launch.request import SOURCE_KINDS, RunRequest

Warn = Callable[[str], None]


@dataclass
class RunReport:
    mode: str  # backend that ran the program: live, pager, cuda or plan
    command: list[str]
    source: dict[str, Any]  # {"kind": ..., "spec": the policy / model / schedule / plan, or null}
    returncode: int  # negative: killed by that signal
    exit_status: int  # what `pagecast run` exits with: the program's status, 128+N for signal N
    wall_s: float | None
    trace: str | None = None
    warnings: list[str] = field(default_factory=list)
    live: dict[str, Any] | None = None  # the live loop's summary (pagecast.live.loop.LiveResult)
    pager: dict[str, Any] | None = None  # {"regions": per paged mapping, the pager's counters}
    cuda: dict[str, Any] | None = None  # the CUDA injector's summary
    # plan: the native launcher printed its own report (same top-level keys) already
    reported: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("reported")
        return d


def backend_of(req: RunRequest) -> str:
    kind = req.source.kind
    if kind in ("plan", "cuda"):
        return kind
    if req.backends.pager or req.backends.packs:
        return "pager"
    return "live"


def _source_dict(req: RunRequest) -> dict[str, Any]:
    s = req.source
    spec = {"policy": s.policy, "model": s.model, "schedule": s.schedule, "plan": s.plan}.get(s.kind)
    return {"kind": s.kind, "spec": spec}


def check(req: RunRequest) -> None:
    """The request's own consistency (files are checked by each backend before it starts)."""
    if not req.argv:
        raise PagecastError("no command given (usage: pagecast run [--policy P|--model M|--schedule S] -- CMD ARGS...)")
    if req.source.kind not in SOURCE_KINDS:
        raise PagecastError(f"unknown prediction source {req.source.kind!r} (valid: {', '.join(SOURCE_KINDS)})")
    paged = bool(req.backends.pager or req.backends.packs)
    if req.source.kind == "plan" and (paged or req.output):
        raise PagecastError("--plan chooses each file's strategy itself: drop --pager/--pack/-o")
    if paged and req.source.kind in ("model", "schedule"):
        raise PagecastError("--pager/--pack work with --policy only (not --model, --schedule or --cuda)")


def launch(req: RunRequest, warn: Warn | None = None) -> RunReport:
    """Run the program as ``req`` asks; ``warn`` gets each warning line as it happens."""
    check(req)
    lines: list[str] = []

    def warned(msg: str) -> None:
        lines.append(msg)
        if warn:
            warn(msg)

    backend = {"plan": _plan, "cuda": _cuda, "pager": _pager, "live": _live}[backend_of(req)]
    report = backend(req, warned)
    report.warnings = lines
    return report


def _report(req: RunRequest, mode: str, returncode: int, wall_s: float | None, **kw: Any) -> RunReport:
    from pagecast.live.loop import exit_status

    return RunReport(mode, list(req.argv), _source_dict(req), returncode, exit_status(returncode), wall_s, **kw)


def _plan(req: RunRequest, warn: Warn) -> RunReport:
    from pagecast.launch.planned import run_planned

    status = run_planned(req.source.plan, list(req.argv), as_json=req.json, status=req.plan_status)
    return RunReport("plan", list(req.argv), _source_dict(req), status, status, None, reported=True)


def _cuda(req: RunRequest, warn: Warn) -> RunReport:
    try:
        from pagecast.cuda.injector import run_cuda_summary
    except ImportError as e:
        raise PagecastError(f"CUDA live prefetching is not available in this build ({e})") from None
    t0 = time.monotonic()
    rc, summary = run_cuda_summary(
        list(req.argv),
        schedule=req.source.schedule,
        model=req.source.model,
        out_dir=req.cuda_out_dir,
        json_out=req.json,
    )
    return _report(req, "cuda", int(rc), time.monotonic() - t0, cuda=summary)


def _pager(req: RunRequest, warn: Warn) -> RunReport:
    """The program under the pager; each pack's file is paged (whole, unless a budget is
    given) and its pack streamed in; a stale pack is left out with a warning."""
    try:
        from pagecast.pager.pack import read_pack, usable_packs
        from pagecast.pager.runtime import run_pager
    except ImportError as e:
        raise PagecastError(f"the userfaultfd pager is not available in this build ({e})") from None

    packs = list(req.backends.packs)
    infos = [read_pack(p) for p in packs]  # malformed → one-line error before the program starts
    usable = usable_packs(packs, warn=warn)
    specs = list(req.backends.pager)
    named = {os.path.realpath(p) for p, _ in specs}
    for info in infos:
        if os.path.exists(info.source) and os.path.realpath(info.source) not in named:
            specs.append((info.source, os.path.getsize(info.source)))
            named.add(os.path.realpath(info.source))
    if not specs:
        raise PagecastError(f"the file of page pack {packs[0]} ({infos[0].source}) does not exist")
    t0 = time.monotonic()
    res = run_pager(
        req.argv,
        specs,
        policy=req.source.policy or "none",
        trace_out=req.output,
        packs=[i.path for i in usable],
        stdout=2 if req.json else None,
    )
    for w in res.warnings:
        warn(f"pagecast run: warning: {w}")
    if res.trace_error:
        warn(f"pagecast run: error: {res.trace_error}")
    return _report(
        req,
        "pager",
        res.returncode,
        time.monotonic() - t0,
        trace=str(res.trace) if res.trace else None,
        pager={"regions": res.stats},
    )


def _live(req: RunRequest, warn: Warn) -> RunReport:
    from pagecast.live.loop import LiveConfig, run_live
    from pagecast.live.worker import SourceSpec

    src = req.source
    if src.kind == "schedule":
        from pagecast.live.sources import load_replay

        load_replay(src.schedule)  # malformed → one-line error before the program starts
        spec = SourceSpec("schedule", "replay", src.schedule, lookahead=src.lookahead)
    elif src.kind == "model":
        if not Path(src.model).exists():
            raise PagecastError("no such model file", path=src.model)
        spec = SourceSpec("model", "model", src.model, top_k=src.top_k, throttle=src.throttle)
    elif src.kind == "policy":
        from pagecast.policies.spec import parse_policy_spec

        policy = parse_policy_spec(src.policy)  # unknown name or option → one-line error listing the valid ones
        policy.build()  # a policy that cannot be built (learned without a model) fails before the program starts
        spec = SourceSpec("policy", policy.name, options=policy.options, throttle=src.throttle)
    else:
        spec = SourceSpec()
    t = req.tuning
    cfg = LiveConfig(
        list(req.argv),
        spec,
        Path(req.output) if req.output else None,
        threads=t.threads,
        gap=t.gap,
        poll_ms=t.poll_ms,
        stdout=2 if req.json else None,
        anon=req.backends.anon,
        nice=t.nice,
        fast=req.backends.fast,
    )
    res = run_live(cfg)
    if res.warning:
        warn(f"pagecast run: warning: {res.warning}")
    if res.lost:
        warn(f"pagecast run: warning: {res.lost} fault samples lost")
    if res.trace_error:
        warn(f"pagecast run: error: {res.trace_error}")
    return _report(req, "live", res.returncode, res.wall_s, trace=res.trace, live=res.to_dict())
