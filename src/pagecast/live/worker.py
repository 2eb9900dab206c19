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
from pagecast.live.injector import FileInjector
from pagecast.live.sources import PolicySource, ReplaySource, Source
from pagecast.live.throttle import Throttle
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
    throttle: bool = True  # per-fault predictors: issue fewer pages per fault while few are used (throttle.py)

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
            from pagecast.policies.learned import load_predictor
        except ImportError as e:
            raise PagecastError(f"learned models are not available in this build ({e})") from None
        return PolicySource(load_predictor(spec.path, top_k=spec.top_k), spec.label())
    if spec.kind == "schedule":
        from pagecast.live.sources import load_replay

        return ReplaySource(load_replay(spec.path), lookahead=spec.lookahead, name=spec.label())
    raise PagecastError(f"unknown predictor kind {spec.kind!r}")


def _name_process(name: bytes) -> None:
    """Give the forked process its own name in ps/top (/proc/PID/comm): otherwise it shows
    as a second copy of the daemon, and a user who wants to stop it cannot tell which."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def worker_main(
    spec: SourceSpec, conn_in: Connection, conn_out: Connection, threads: int, gap: int, anon_listener=None
) -> None:
    import sys

    sys.setswitchinterval(0.0005)  # hand the GIL over quickly: fault batches must not wait
    _name_process(b"pagecast-pred")
    try:
        from pagecast.live.injector import _lib

        _lib()
        source = make_source(spec)
        source.warm_up()
    except Exception as e:  # reported to the daemon as one line
        msg = str(e) if isinstance(e, PagecastError) else f"{type(e).__name__}: {e}"
        conn_out.send(("error", msg))
        return
    throttle = Throttle() if spec.throttle and spec.kind in ("policy", "model") else None
    conn_out.send(("ready", source.name))
    worker = _Worker(source, conn_out, throttle, threads, gap, anon_listener)
    try:
        while True:
            if not conn_in.poll(0.005):
                worker.flush()
                continue
            msg = conn_in.recv()
            what = msg[0]
            if what == "t0":
                worker.start(msg[1])
            elif what == "regions":
                worker.set_regions([Region.from_dict(d) for d in msg[1]])
            elif what == "faults":
                worker.on_faults(*msg[1:])
            elif what == "end":
                break
        worker.close()
        conn_out.send(("stats", worker.stats()))
    except (EOFError, BrokenPipeError, OSError):
        pass  # the daemon went away: nothing left to do
    except Exception:
        try:
            conn_out.send(("error", traceback.format_exc().strip().splitlines()[-1]))
        except OSError:
            pass


class _Worker:
    """The source's predictions issued through the injectors, and what that cost."""

    def __init__(
        self, source: Source, conn_out: Connection, throttle: Throttle | None, threads: int, gap: int, anon_listener
    ) -> None:
        self.source, self.conn_out, self.throttle = source, conn_out, throttle
        self.threads, self.gap, self.anon_listener = threads, gap, anon_listener
        self.injector: FileInjector | None = None
        self.anon = None  # AnonInjector when the program was started with the shim
        self.predict_ns: list[int] = []
        self.transit_ns: list[int] = []  # daemon received the batch → this process received it
        self.faults = 0
        self.last_flush = time.monotonic_ns()

    def flush(self, force: bool = False) -> None:
        if self.injector is None:
            return
        now = time.monotonic_ns()
        if force or now - self.last_flush > FLUSH_NS:
            done = self.injector.take() + (self.anon.take() if self.anon is not None else [])
            if done:
                self.conn_out.send(("issued", done))
            self.last_flush = now

    def issue(self, region: np.ndarray, page: np.ndarray, t_f: np.ndarray, t_s: np.ndarray) -> None:
        # anonymous pages go to the shim inside the program; the rest to fadvise
        if self.anon is not None:
            a = self.anon.wants(region)
            if a.any():
                self.anon.submit(region[a], page[a], t_f[a], t_s[a])
                region, page, t_f, t_s = region[~a], page[~a], t_f[~a], t_s[~a]
        self.injector.submit(region, page, t_f, t_s)

    def start(self, t0: int) -> None:
        """The program started at ``t0``: the injectors open, the source's first pages go out."""
        self.injector = FileInjector(t0, threads=self.threads, gap=self.gap)
        if self.anon_listener is not None:
            from pagecast.live.anon import AnonInjector

            self.anon = AnonInjector(self.anon_listener, t0, gap=self.gap)
        pre, paths = self.source.initial()
        if len(pre):
            self.injector.add_paths(paths)
            self.injector.submit(pre.region, pre.page, np.zeros(len(pre), np.int64), np.zeros(len(pre), np.int64))

    def set_regions(self, regions: list[Region]) -> None:
        self.source.set_regions(regions)
        if self.injector is not None:
            self.injector.set_regions(regions)
        if self.anon is not None:
            self.anon.set_regions(regions)
        if self.injector is not None:
            # pages of a region that just appeared go out now, not after the next
            # fault batch has been worked through (that can take many ms)
            pend = self.source.take_pending()
            if len(pend):
                none = np.full(len(pend), -1, np.int64)  # no causing fault: kept out of latencies
                self.issue(pend.region, pend.page, none, none)

    def on_faults(self, t_seen: int, t: np.ndarray, region: np.ndarray, page: np.ndarray, kind: np.ndarray) -> None:
        self.faults += len(t)
        c0 = time.monotonic_ns()
        if self.injector is not None:
            self.transit_ns.append(c0 - self.injector.t0 - t_seen)
        if self.throttle is not None:
            self.throttle.observe(region, page, kind)
        pred = self.source.on_batch(t, region, page, kind)
        if self.throttle is not None:
            pred = self.throttle.limit(pred)
        # per batch: prediction time / faults in it (what one fault costs the predictor)
        self.predict_ns.append((time.monotonic_ns() - c0) // max(1, len(t)))
        if len(pred) and self.injector is not None:
            self.issue(pred.region, pred.page, t[pred.cause], np.full(len(pred), t_seen, np.int64))
        self.flush()

    def close(self) -> None:
        if self.injector is not None:
            self.injector.close()
            if self.anon is not None:
                self.anon.close()
            self.flush(force=True)

    def stats(self) -> dict:
        predict_ns, transit_ns = self.predict_ns, self.transit_ns
        stats = {
            "faults_seen": self.faults,
            "predict_us_per_fault_p50": float(np.percentile(predict_ns, 50) / 1e3) if predict_ns else None,
            "predict_us_per_fault_p99": float(np.percentile(predict_ns, 99) / 1e3) if predict_ns else None,
            "pipe_transit_us_p50": float(np.percentile(transit_ns, 50) / 1e3) if transit_ns else None,
            "pipe_transit_us_p99": float(np.percentile(transit_ns, 99) / 1e3) if transit_ns else None,
        }
        if self.injector is not None:
            stats.update(
                skipped_non_file=self.injector.skipped,
                fadvise_errors=self.injector.errors,
                ranges=self.injector.ranges,
                range_pages=self.injector.range_pages,
            )
        if self.anon is not None:
            stats["anon"] = self.anon.stats()
        if self.throttle is not None:
            stats["throttle"] = self.throttle.stats()
        return stats
