"""Inference: batched schedules for whole traces, and the runners the per-fault prefetcher
(``pagecast.policies.learned``) steps the model with.

Both follow the context rule of ``pagecast.learn.models`` (the prediction at event i sees
events ``context_start(i)`` … i), so the live predictor emits the same pages as the
schedule computed offline for the same stream (up to float rounding among near-equal
scores).

Backends: ``numba`` (one-layer LSTMs: the compiled kernels of learn/fast_step.py, per
fault and batched; the default for them, fastest measured in
benchmarks/inference_latency.py), ``onnx`` (onnxruntime; the default for other models),
``onnx-int8`` (the same graph with int8 weights), ``torchscript`` and ``eager`` (plain
PyTorch, the baseline). ``auto`` picks. The model is exported once per process and cached.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from pagecast.errors import PagecastError
from pagecast.learn.dataset import (
    DemandStream,
    decode_pages,
    encode_inputs,
    read_demand,
    read_demand_events,
)
from pagecast.learn.models import LastScorer, LSTMStep, SeqScorer
from pagecast.learn.pagetable import PageTable, mix_block, page_keys
from pagecast.learn.train import LoadedModel, load_model
from pagecast.trace.reader import Trace
from pagecast.trace.regions import Region
from pagecast.trace.schedule import Schedule

BACKENDS = ("onnx", "onnx-int8", "torchscript", "eager")  # graph backends, any model
STEP_BACKENDS = BACKENDS + ("numba",)  # numba: one-layer LSTMs only (learn/fast_step.py)
DEFAULT_BACKEND = "onnx"  # for models the numba kernels do not cover


def _numba_ok(lm: LoadedModel) -> bool:
    return lm.config.kind == "lstm" and lm.config.layers == 1


def resolve_backend(lm: LoadedModel, backend: str) -> str:
    if backend == "auto":
        return "numba" if _numba_ok(lm) else DEFAULT_BACKEND
    if backend not in STEP_BACKENDS:
        raise PagecastError(f"unknown inference backend {backend!r} (valid: auto, {', '.join(STEP_BACKENDS)})")
    if backend == "numba" and not _numba_ok(lm):
        raise PagecastError("the numba backend runs one-layer LSTM models only; use onnx")
    return backend


def lstm_kernel(lm: LoadedModel, k: int):
    """The model in the flat layout of the compiled numba kernels (cached per model and k)."""
    key = ("kernel", id(lm), k)
    if key not in _CACHE:
        from pagecast.learn.fast_step import LSTMKernel

        cs, cd = lm.vocab.class_slots_deltas()
        _CACHE[key] = LSTMKernel.build(lm.model, lm.train_config.head, k, lm.vocab.keys, cs, cd)
    return _CACHE[key]


EXTRA_CANDIDATES = 16  # ranked classes beyond top_k, as some decode to no usable page


def _candidates(lm: LoadedModel, top_k: int) -> int:
    return max(1, min(lm.config.n_classes - 1, top_k + EXTRA_CANDIDATES))


# ---------------------------------------------------------------------------------------
# Runners: one callable per (model, backend, unit), exported lazily


def _quantized(graph: bytes) -> bytes:
    """The graph with int8 weights (onnxruntime dynamic quantization: weights once, activations
    per call). Its scores differ from the float graph's by quantization error, so ranks among
    near-equal classes can swap (tested: top-1 agrees on most events)."""
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "float.onnx", Path(d) / "int8.onnx"
        src.write_bytes(graph)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        return dst.read_bytes()


def _onnx_session(
    module: torch.nn.Module,
    args: tuple,
    names: Sequence[str],
    outs: Sequence[str],
    dynamic: dict,
    threads: int,
    int8: bool = False,
):
    import onnxruntime as ort

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            buf,
            dynamo=False,
            input_names=list(names),
            output_names=list(outs),
            dynamic_axes=dynamic,
            opset_version=17,
        )
    graph = _quantized(buf.getvalue()) if int8 else buf.getvalue()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    # Spinning workers burn the cores other processes (the traced program) need.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(graph, so, providers=["CPUExecutionProvider"])


def make_runner(
    module: torch.nn.Module,
    example: tuple[np.ndarray, ...],
    names: Sequence[str],
    outs: Sequence[str],
    dynamic: dict,
    backend: str,
    threads: int = 0,
) -> Callable[..., tuple[np.ndarray, ...]]:
    """A function numpy inputs → numpy outputs for ``module`` on the chosen backend.

    ``threads`` (onnx): intra-op threads, 0 = torch's current setting.
    """
    module.eval()
    targs = tuple(torch.from_numpy(a) for a in example)
    if backend in ("onnx", "onnx-int8"):
        sess = _onnx_session(
            module, targs, names, outs, dynamic, threads or torch.get_num_threads(), backend == "onnx-int8"
        )
        run = sess.run
        # Inputs the graph does not read (ips when the model ignores ip) are pruned by the exporter.
        used = {i.name for i in sess.get_inputs()}
        keep = [j for j, n in enumerate(names) if n in used]
        kept = [names[j] for j in keep]

        def f(*arrays):
            return tuple(run(None, {n: arrays[j] for n, j in zip(kept, keep)}))

        return f
    if backend == "torchscript":
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = torch.jit.freeze(torch.jit.trace(module, targs, check_trace=False))
        mod = torch.jit.optimize_for_inference(mod)
    elif backend == "eager":
        mod = module
    else:
        raise PagecastError(f"unknown inference backend {backend!r} (valid: {', '.join(BACKENDS)})")

    def g(*arrays):
        with torch.no_grad():
            res = mod(*(torch.from_numpy(a) for a in arrays))
        return tuple(r.numpy() for r in res)

    return g


_CACHE: dict[tuple, Any] = {}


def forget(lm: LoadedModel) -> None:
    """Drop the runners and kernels cached for ``lm`` (an in-memory model about to go away:
    its id could be reused by the next one)."""
    for key in [k for k in _CACHE if len(k) > 1 and k[1] == id(lm)]:
        del _CACHE[key]


def _loaded(model_path: str | Path | LoadedModel) -> LoadedModel:
    if isinstance(model_path, LoadedModel):
        return model_path
    p = Path(model_path)
    key = ("model", str(p.resolve()), p.stat().st_mtime_ns if p.exists() else 0)
    if key not in _CACHE:
        _CACHE[key] = load_model(p)
    return _CACHE[key]


def seq_runner(lm: LoadedModel, k: int, backend: str, skip: int = 0):
    """Windows → top-k. onnxruntime sessions get one intra-op thread: its LSTM gained nothing
    from a second one here; ``score_stream`` runs whole batches on several threads instead."""
    onnx = backend.startswith("onnx")
    key = ("seq", id(lm), k, backend, skip)
    if key not in _CACHE:
        ex = tuple(np.zeros((2, lm.config.seq_len), np.int64) for _ in range(3))
        dyn = {n: {0: "batch", 1: "time"} for n in ("tokens", "slots", "ips", "scores", "classes")}
        _CACHE[key] = make_runner(
            SeqScorer(lm.model, lm.train_config.head, k, skip),
            ex,
            ("tokens", "slots", "ips"),
            ("scores", "classes"),
            dyn,
            backend,
            threads=1 if onnx else 0,
        )
    return _CACHE[key]


def step_runner(lm: LoadedModel, k: int, backend: str):
    key = ("step", id(lm), k, backend)
    if key not in _CACHE:
        cfg = lm.config
        if cfg.kind == "lstm":
            z = np.zeros((cfg.layers, 2, cfg.hidden), np.float32)
            ex = (np.zeros(2, np.int64), np.zeros(2, np.int64), np.zeros(2, np.int64), z, z, np.zeros(1, np.int64))
            _CACHE[key] = make_runner(
                LSTMStep(lm.model, lm.train_config.head, k),
                ex,
                ("token", "slot", "ip", "h", "c", "sel"),
                ("scores", "classes", "h_out", "c_out"),
                {},
                backend,
                threads=1,
            )
        else:
            ex = tuple(np.zeros((1, cfg.seq_len), np.int64) for _ in range(3))
            dyn = {n: {1: "time"} for n in ("tokens", "slots", "ips")}
            _CACHE[key] = make_runner(
                LastScorer(lm.model, lm.train_config.head, k),
                ex,
                ("tokens", "slots", "ips"),
                ("scores", "classes"),
                dyn,
                backend,
                threads=1,
            )
    return _CACHE[key]


# ---------------------------------------------------------------------------------------
# Batched, causal scoring of a whole stream


def score_stream(
    lm: LoadedModel,
    tokens: np.ndarray,
    slots: np.ndarray,
    ips: np.ndarray,
    k: int,
    *,
    backend: str = "auto",
    batch_windows: int = 512,
    on_block: Callable[[int, np.ndarray, np.ndarray], None],
) -> None:
    """Run the model over the stream in context-rule windows; ``on_block(start, scores, classes)``
    receives (m, k) arrays for events start … start+m−1, in order.

    Window b ≥ 1 holds events [(b−1)C, (b+1)C) and yields the predictions of its last C
    events; window 0 holds [0, C). Padding past the end is harmless: the models are causal.
    """
    n = len(tokens)
    if n == 0:
        return
    backend = resolve_backend(lm, backend)
    if backend == "numba":
        for start, sc, cl in lstm_kernel(lm, k).score_stream(tokens, slots, ips, threads=torch.get_num_threads()):
            on_block(start, sc, cl)
        return
    c = lm.config.chunk
    first = min(c, n)
    s0, c0 = seq_runner(lm, k, backend)(tokens[None, :first], slots[None, :first], ips[None, :first])
    on_block(0, s0[0], c0[0])
    if n <= c:
        return
    run = seq_runner(lm, k, backend, skip=c)
    n_chunks = -(-n // c)
    base = np.arange(2 * c, dtype=np.int64)

    def one(b0: int) -> tuple[int, int, np.ndarray, np.ndarray]:
        bs = np.arange(b0, min(n_chunks, b0 + batch_windows), dtype=np.int64)
        idx = np.minimum((bs[:, None] - 1) * c + base[None, :], n - 1)
        sc, cl = run(tokens[idx], slots[idx], ips[idx])
        start = int(bs[0]) * c
        return start, min(n, int(bs[-1] + 1) * c) - start, sc, cl

    starts = range(1, n_chunks, batch_windows)
    threads = torch.get_num_threads()
    if backend.startswith("onnx") and threads > 1 and len(starts) > 1:
        # onnxruntime releases the GIL in run(): whole batches on parallel threads, results
        # consumed in order, at most 2 per thread in flight (bounded memory).
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads) as pool:
            todo, it = deque(), iter(starts)
            for b0 in it:
                todo.append(pool.submit(one, b0))
                if len(todo) >= 2 * threads:
                    break
            while todo:
                start, m, sc, cl = todo.popleft().result()
                nxt = next(it, None)
                if nxt is not None:
                    todo.append(pool.submit(one, nxt))
                on_block(start, sc.reshape(-1, k)[:m], cl.reshape(-1, k)[:m])
        return
    for b0 in starts:
        start, m, sc, cl = one(b0)
        on_block(start, sc.reshape(-1, k)[:m], cl.reshape(-1, k)[:m])


def predict_schedule(
    model_path: str | Path | LoadedModel,
    trace: Trace | str | Path | DemandStream,
    *,
    top_k: int = 10,
    backend: str = "auto",
    progress: Callable[[int], None] | None = None,
    batch_windows: int = 512,
    events: np.ndarray | None = None,
) -> Schedule:
    """The model's top-k pages after every demand event of ``trace``, causally.

    ``batch_windows``: windows of 2C events per graph call (graph backends; numba ignores it).
    ``events``: indices of the demand events the model is shown and predicts after (for a
    full access trace, its misses: ``pagecast.sim.misses.miss_events``), as a per-fault
    predictor fed those events would; default every event. Triggers stay indices into the
    whole demand stream.

    Rows: trigger (index in the demand stream), t_ns, region (the trace's region ids,
    matched to the model's regions by ``region_key``), page (region-relative), score.
    """
    if top_k < 1:
        raise PagecastError(f"top_k must be at least 1, got {top_k}")
    lm = _loaded(model_path)
    stream, n_whole = _shown_stream(trace, events)
    tokens, slots, ips = encode_inputs(stream, lm.table, lm.vocab, lm.spec.ip_buckets)
    k = _candidates(lm, top_k)
    cls_slot, cls_delta = lm.vocab.class_slots_deltas()
    n_slots = lm.table.unknown
    slot_to_region = _slot_to_region(lm, stream.regions)
    region_pages, slot_limit = _page_limits(stream, slot_to_region, n_slots)
    last = np.zeros(n_slots, np.int64)
    seen = np.zeros(n_slots, np.bool_)
    slots32 = slots.astype(np.int32)
    out: dict[str, list[np.ndarray]] = {c: [] for c in ("trigger", "region", "page", "score")}

    mix = _mixture(lm)
    if mix is not None:
        own_keys = page_keys(slots, stream.page, n_slots)
        rids = stream.region.astype(np.int64)

    s2r_all = slot_to_region.astype(np.int64)

    def on_block(start: int, scores: np.ndarray, classes: np.ndarray) -> None:
        ok, rank, s, p = decode_pages(
            slots32, stream.page, start, classes.astype(np.int64), cls_slot, cls_delta, last, seen, top_k, slot_limit
        )
        reg = slot_to_region[s]
        ok &= reg >= 0
        ok &= p < region_pages[reg]
        sc = np.take_along_axis(scores, rank, 1).astype(np.float32)
        if mix is not None:
            sl = slice(start, start + len(scores))
            ok, reg, p, sc = _mixed(
                mix, ok, reg, p, sc, own_keys[sl], rids[sl], stream.page[sl], s2r_all, region_pages, top_k
            )
        rows, cols = np.nonzero(ok)
        out["trigger"].append((start + rows).astype(np.int64))
        out["region"].append(reg[rows, cols].astype(np.int32))
        out["page"].append(p[rows, cols])
        out["score"].append(sc[rows, cols].astype(np.float32))
        if progress:
            progress(len(scores))

    score_stream(lm, tokens, slots, ips, k, backend=backend, on_block=on_block, batch_windows=batch_windows)
    sched = _schedule_of(out, stream, events)
    sched.regions = list(stream.regions)
    sched.meta = {
        "source": "pagecast.learn",
        "model": str(lm.path),
        "kind": lm.config.kind,
        "top_k": top_k,
        "head": lm.train_config.head,
        "stream_rows": n_whole,
        "events_shown": len(stream),
        "page_mix": float(mix[1]) if mix else 0.0,
    }
    return sched


def _mixed(
    mix: tuple[PageTable, float],
    ok: np.ndarray,
    reg: np.ndarray,
    p: np.ndarray,
    sc: np.ndarray,
    own_keys: np.ndarray,
    rids: np.ndarray,
    pages: np.ndarray,
    slot_to_region: np.ndarray,
    region_pages: np.ndarray,
    top_k: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A block's model predictions merged with the page table's successors (``mix_block``)."""
    tab, lam = mix
    cnt, reg, p, sc = mix_block(
        ok,
        reg.astype(np.int64),
        p,
        sc,
        own_keys,
        rids,
        pages,
        tab.keys,
        tab.succ,
        tab.prob,
        slot_to_region,
        region_pages,
        lam,
        top_k,
    )
    return np.arange(top_k)[None, :] < cnt[:, None], reg, p, sc


def _page_limits(stream: DemandStream, slot_to_region: np.ndarray, n_slots: int) -> tuple[np.ndarray, np.ndarray]:
    """Pages per region of the trace (one past its last region: no limit), and per slot the
    pages of the region it maps to (0: none)."""
    region_pages = np.array(
        [r.pages if r.pages > 0 else np.iinfo(np.int64).max for r in stream.regions] + [np.iinfo(np.int64).max],
        np.int64,
    )
    s2r = slot_to_region[:n_slots]
    return region_pages, np.where(s2r >= 0, region_pages[np.maximum(s2r, 0)], 0).astype(np.int64)


def _shown_stream(trace: Trace | str | Path | DemandStream, events: np.ndarray | None) -> tuple[DemandStream, int]:
    """The demand events the model is shown, and the length of the whole demand stream."""
    if events is not None and not isinstance(trace, DemandStream) and np.all(np.diff(events) > 0):
        # only the events shown are read (a long access trace's misses), not the whole stream
        return read_demand_events(trace, np.asarray(events, np.int64))
    whole = read_demand(trace)
    return (whole if events is None else whole.take(events)), len(whole)


def _schedule_of(out: dict[str, list[np.ndarray]], stream: DemandStream, events: np.ndarray | None) -> Schedule:
    """The decoded blocks as one schedule, triggers as indices into the whole demand stream."""
    if not out["trigger"]:
        return Schedule.empty()
    trig = np.concatenate(out["trigger"])
    t_ns = stream.t_ns[trig]
    if events is not None:
        trig = np.asarray(events, np.int64)[trig]
    return Schedule(
        trig, t_ns, np.concatenate(out["region"]), np.concatenate(out["page"]), np.concatenate(out["score"])
    )


def _mixture(lm: LoadedModel) -> tuple[PageTable, float] | None:
    """The model's page table and mixture weight, or None when it predicts by deltas alone."""
    tab = getattr(lm, "page_table", None)
    lam = float(getattr(lm, "mix", 0.0))
    if tab is None or len(tab) == 0 or lam <= 0.0:
        return None
    return tab, lam


def _slot_to_region(lm: LoadedModel, regions: Sequence[Region]) -> np.ndarray:
    """Model slot → region id in this trace (−1: the region is absent from this run)."""
    lut = lm.table.lut_for(regions)
    inv = np.full(lm.table.unknown + 1, -1, np.int32)
    for rid in range(len(regions)):
        s = lut[rid + 1]
        if s < lm.table.unknown:
            inv[s] = rid
    return inv
