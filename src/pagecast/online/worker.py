"""The predictor process: keeps the model/policy state and issues the prefetches.

It runs in its own process (forked by the daemon) so that whatever happens to it — a
crash, a kill, a hang in model code — never touches the traced program: the daemon sees
its pipe close and carries on recording, unprefetched.

Messages daemon → worker: ("t0", ns), ("regions", [dict]), ("faults", t_seen, t, region,
page, kind), ("end",). Worker → daemon: ("ready", name) or ("error", msg) once, then
("issued", Issued...) as prefetches go out, and ("stats", dict) before exiting.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from pagecast.errors import PagecastError
from pagecast.online.injector import FileInjector
from pagecast.online.sources import PolicySource, ReplaySource, Source
from pagecast.trace.regions import Region

FLUSH_NS = 10_000_000  # send issued records back at least every 10 ms of activity


@dataclass
class SourceSpec:
    """What predicts: a policy name, a model file, or a schedule file (already validated)."""

    kind: str = "none"  # none | policy | model | schedule
    name: str = "none"
    path: str | None = None
    lookahead: int = 8192
    top_k: int = 10
    options: dict | None = None

    def label(self) -> str:
        if self.kind == "schedule":
            return f"replay:{Path(self.path).name}" if self.path else "replay"
        if self.kind == "model":
            return f"model:{Path(self.path).name}" if self.path else "model"
        return self.name


def make_source(spec: SourceSpec) -> Source:
    if spec.kind == "none":
        return Source()
    if spec.kind == "policy":
        from pagecast.policies.base import get_prefetcher

        return PolicySource(get_prefetcher(spec.name, **(spec.options or {})), spec.name)
    if spec.kind == "model":
        try:
            from pagecast.learn.predict import load_predictor
        except ImportError as e:
            raise PagecastError(f"learned models are not available in this build ({e})") from None
        return PolicySource(load_predictor(spec.path, top_k=spec.top_k), spec.label())
    if spec.kind == "schedule":
        from pagecast.online.sources import load_replay

        return ReplaySource(load_replay(spec.path), lookahead=spec.lookahead, name=spec.label())
    raise PagecastError(f"unknown predictor kind {spec.kind!r}")


def worker_main(spec: SourceSpec, conn_in: Connection, conn_out: Connection, threads: int, gap: int) -> None:
    import sys

    sys.setswitchinterval(0.0005)  # hand the GIL over quickly: fault batches must not wait
    try:
        from pagecast.online.injector import _lib

        _lib()
        source = make_source(spec)
    except Exception as e:  # reported to the daemon as one line
        msg = str(e) if isinstance(e, PagecastError) else f"{type(e).__name__}: {e}"
        conn_out.send(("error", msg))
        return
    conn_out.send(("ready", source.name))
    injector: FileInjector | None = None
    predict_ns: list[int] = []
    transit_ns: list[int] = []  # daemon received the batch → this process received it
    faults = 0
    last_flush = time.monotonic_ns()

    def flush(force: bool = False) -> None:
        nonlocal last_flush
        if injector is None:
            return
        now = time.monotonic_ns()
        if force or now - last_flush > FLUSH_NS:
            done = injector.take()
            if done:
                conn_out.send(("issued", done))
            last_flush = now

    try:
        while True:
            if not conn_in.poll(0.005):
                flush()
                continue
            msg = conn_in.recv()
            what = msg[0]
            if what == "t0":
                injector = FileInjector(msg[1], threads=threads, gap=gap)
                pre, paths = source.initial()
                if len(pre):
                    injector.add_paths(paths)
                    injector.submit(pre.region, pre.page, np.zeros(len(pre), np.int64), np.zeros(len(pre), np.int64))
            elif what == "regions":
                regions = [Region.from_dict(d) for d in msg[1]]
                source.set_regions(regions)
                if injector is not None:
                    injector.set_regions(regions)
            elif what == "faults":
                _, t_seen, t, region, page, kind = msg
                faults += len(t)
                c0 = time.monotonic_ns()
                if injector is not None:
                    transit_ns.append(c0 - injector.t0 - t_seen)
                pred = source.on_batch(t, region, page, kind)
                # per batch: prediction time / faults in it (what one fault costs the predictor)
                predict_ns.append((time.monotonic_ns() - c0) // max(1, len(t)))
                if len(pred) and injector is not None:
                    injector.submit(pred.region, pred.page, t[pred.cause], np.full(len(pred), t_seen, np.int64))
                flush()
            elif what == "end":
                break
        if injector is not None:
            injector.close()
            flush(force=True)
        stats = {"faults_seen": faults,
                 "predict_us_per_fault_p50": float(np.percentile(predict_ns, 50) / 1e3) if predict_ns else None,
                 "predict_us_per_fault_p99": float(np.percentile(predict_ns, 99) / 1e3) if predict_ns else None,
                 "pipe_transit_us_p50": float(np.percentile(transit_ns, 50) / 1e3) if transit_ns else None,
                 "pipe_transit_us_p99": float(np.percentile(transit_ns, 99) / 1e3) if transit_ns else None}
        if injector is not None:
            stats.update(skipped_non_file=injector.skipped, fadvise_errors=injector.errors, ranges=injector.ranges,
                         range_pages=injector.range_pages)
        conn_out.send(("stats", stats))
    except (EOFError, BrokenPipeError, OSError):
        pass  # the daemon went away: nothing left to do
    except Exception:
        try:
            conn_out.send(("error", traceback.format_exc().strip().splitlines()[-1]))
        except OSError:
            pass
