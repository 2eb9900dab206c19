"""Training loop and the self-contained model file.

The model file (``torch.save`` of plain types and tensors, loadable with
``weights_only=True``) holds everything inference needs: weights, model config, the
dataset spec, the vocabulary (pair keys), the region table (to match regions of a new
run), training metrics and history.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.nn import functional as F

from pagecast.errors import PagecastError, check_readable
from pagecast.learn.dataset import DatasetSpec, EncodedStream, PreparedData, RegionTable, Vocabulary, window_starts
from pagecast.learn.models import ModelConfig, build_model
from pagecast.learn.sample import MAX_TRAIN_EVENTS
from pagecast.util.atomic import atomic_output

MODEL_FORMAT = "pagecast-model"
MODEL_VERSION = 1


@dataclass
class TrainConfig:
    epochs: int = 20
    patience: int = 3  # epochs without a better validation recall before stopping
    batch: int = 64  # windows per step
    lr: float = 3e-3
    seed: int = 0
    # One thread: these models are small (64-wide GEMMs), so a second OpenMP thread gains
    # little on an idle machine and, when cores are shared, spin-waits, which made epochs
    # several times slower with 2 threads than with 1 (BENCHMARKS.md, "Figures moved out of the code").
    threads: int = 1  # 0: all cores
    # Windows drawn per epoch: a subset of a long trace, several passes over a short one,
    # so a small recording still gets enough optimiser steps. 0: one pass over all windows.
    windows_per_epoch: int = 0
    max_val_windows: int = 2000
    next_weight: float = 1.0
    horizon_weight: float = 1.0
    top_k: int = 10  # k of the validation recall
    head: str = "horizon"  # head used for schedules: horizon (multi-label) or next
    # Successors kept per (region, page) in the page table merged with the delta head
    # (learn/pagetable.py); 0: deltas only, as before.
    page_table: int = 16


@dataclass
class TrainResult:
    model: torch.nn.Module
    model_config: ModelConfig
    history: list[dict] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    page_table: Any = None  # learn.pagetable.PageTable, or None
    mix: float = 0.0  # weight of the page table in the merged ranking


def _concat(parts: list[tuple[EncodedStream, range]], seq_len: int, horizon: int, stride: int):
    """All streams glued into flat arrays; window starts shifted into the glued index space."""
    if not parts:
        return None
    arrays = {k: [] for k in ("tokens", "slots", "ips", "next_label", "horizon", "n_future")}
    starts = []
    off = 0
    seen: dict[int, int] = {}
    for enc, r in parts:
        if id(enc) not in seen:
            seen[id(enc)] = off
            for k in arrays:
                arrays[k].append(getattr(enc, k))
            off += len(enc)
        starts.append(window_starts(r, seq_len, horizon, stride) + seen[id(enc)])
    flat = {k: torch.from_numpy(np.ascontiguousarray(np.concatenate(v))) for k, v in arrays.items()}
    return flat, np.concatenate(starts)


def _batch(flat: dict[str, torch.Tensor], starts: np.ndarray, seq_len: int, n_classes: int):
    idx = torch.from_numpy(starts[:, None] + np.arange(seq_len)[None, :])
    tok, slot, ip = flat["tokens"][idx], flat["slots"][idx], flat["ips"][idx]
    nxt = flat["next_label"][idx]
    hz = flat["horizon"][idx]  # (B, T, H)
    target = torch.zeros(*hz.shape[:2], n_classes)
    target.scatter_(2, hz.clamp(min=0), 1.0)
    target[..., 0] = 0.0  # "other" is not a page
    return tok, slot, ip, nxt, target, hz, flat["n_future"][idx]


def _loss(model, batch, cfg: TrainConfig):
    tok, slot, ip, nxt, target, _, _ = batch
    next_logits, hor_logits = model(tok, slot, ip)
    ce = F.cross_entropy(next_logits.reshape(-1, next_logits.shape[-1]), nxt.reshape(-1), ignore_index=-100)
    # Sum over classes (positives are sparse among ~1000 classes), mean over positions.
    bce = F.binary_cross_entropy_with_logits(hor_logits[..., 1:], target[..., 1:], reduction="sum") / (
        tok.shape[0] * tok.shape[1]
    )
    return cfg.next_weight * ce + cfg.horizon_weight * bce, next_logits, hor_logits


@torch.no_grad()
def evaluate(model, flat, starts, mcfg: ModelConfig, tcfg: TrainConfig) -> dict[str, float]:
    """Loss, next-pair accuracy, and recall@k/precision@k of the ranked head in class space.

    The recall denominator counts every distinct page of the next H events, including
    those the vocabulary cannot name, so it is an honest page-level recall.
    """
    model.eval()
    tot = {"loss": 0.0, "n": 0, "acc_hit": 0, "acc_n": 0, "hits": 0, "future": 0, "pred": 0}
    for b0 in range(0, len(starts), 256):
        batch = _batch(flat, starts[b0 : b0 + 256], mcfg.seq_len, mcfg.n_classes)
        loss, nl, hl = _loss(model, batch, tcfg)
        _, _, _, nxt, target, _, n_future = batch
        tot["loss"] += loss.item() * len(starts[b0 : b0 + 256])
        tot["n"] += len(starts[b0 : b0 + 256])
        valid = nxt != -100
        tot["acc_hit"] += int(((nl.argmax(-1) == nxt) & valid & (nxt > 0)).sum())
        tot["acc_n"] += int(valid.sum())
        ranked = hl if tcfg.head == "horizon" else nl
        ranked = ranked.clone()
        ranked[..., 0] = float("-inf")
        top = ranked.topk(min(tcfg.top_k, mcfg.n_classes - 1), -1).indices
        tot["hits"] += int(target.gather(-1, top).sum())
        tot["future"] += int(n_future.sum())
        tot["pred"] += top.numel()
    model.train()
    n = max(tot["n"], 1)
    return {
        "loss": tot["loss"] / n,
        "next_accuracy": tot["acc_hit"] / max(tot["acc_n"], 1),
        f"recall@{tcfg.top_k}": tot["hits"] / max(tot["future"], 1),
        f"precision@{tcfg.top_k}": tot["hits"] / max(tot["pred"], 1),
    }


def set_threads(threads: int) -> int:
    n = threads or (os.cpu_count() or 1)
    torch.set_num_threads(n)
    return n


def train_model(
    data: PreparedData,
    mcfg: ModelConfig,
    tcfg: TrainConfig,
    *,
    on_epoch: Callable[[dict], None] | None = None,
    progress_factory: Callable[[int, str], Any] | None = None,
) -> TrainResult:
    torch.manual_seed(tcfg.seed)
    rng = np.random.default_rng(tcfg.seed)
    set_threads(tcfg.threads)
    train = _concat(data.train, mcfg.seq_len, mcfg.horizon, max(1, mcfg.seq_len // 2))
    if train is None or len(train[1]) == 0:
        raise PagecastError(
            f"too few demand events to train: need more than seq_len + horizon = {mcfg.seq_len + mcfg.horizon} in the training part"
        )
    flat, starts = train
    val = _concat(data.val, mcfg.seq_len, mcfg.horizon, mcfg.seq_len)
    if val is not None and len(val[1]) > tcfg.max_val_windows:
        vflat, vstarts = val
        val = (vflat, np.sort(rng.choice(vstarts, tcfg.max_val_windows, replace=False)))
    if val is None or len(val[1]) == 0:
        val = (flat, starts[-max(1, len(starts) // 10) :])  # no held-out data: monitor the latest training windows

    model = build_model(mcfg)
    opt = torch.optim.AdamW(model.parameters(), lr=tcfg.lr, weight_decay=1e-4)
    key = f"recall@{tcfg.top_k}"
    best = (-1.0, float("inf"))
    best_state = copy.deepcopy(model.state_dict())
    history: list[dict] = []
    bad = 0
    t0 = time.perf_counter()
    for epoch in range(1, tcfg.epochs + 1):
        order = _epoch_order(rng, len(starts), tcfg.windows_per_epoch)
        bar = progress_factory(len(order), f"epoch {epoch}") if progress_factory else None
        run_loss, steps = _train_epoch(model, opt, flat, starts[order], mcfg, tcfg, bar)
        vm = evaluate(model, val[0], val[1], mcfg, tcfg)
        row = {
            "epoch": epoch,
            "train_loss": run_loss / max(steps, 1),
            **{f"val_{k}": v for k, v in vm.items()},
            "seconds": time.perf_counter() - t0,
        }
        history.append(row)
        if on_epoch:
            on_epoch(row)
        score = (vm[key], vm["loss"])
        if score[0] > best[0] + 1e-4 or (abs(score[0] - best[0]) <= 1e-4 and score[1] < best[1]):
            best, bad = score, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            bad += 1
            if bad >= tcfg.patience:
                break
    model.load_state_dict(best_state)
    model.eval()
    metrics: dict[str, Any] = {
        "epochs_run": len(history),
        "best_epoch": max(history, key=lambda r: (r[f"val_{key}"], -r["val_loss"]))["epoch"],
        "train_seconds": time.perf_counter() - t0,
        "train_windows": int(len(starts)),
    }
    metrics.update({f"val_{k}": v for k, v in evaluate(model, val[0], val[1], mcfg, tcfg).items()})
    if data.test:
        tflat, tstarts = _concat(data.test, mcfg.seq_len, mcfg.horizon, mcfg.seq_len) or (None, np.empty(0))
        if len(tstarts):
            metrics.update({f"test_{k}": v for k, v in evaluate(model, tflat, tstarts, mcfg, tcfg).items()})
    metrics.update(data.stats)
    result = TrainResult(model, mcfg, history, metrics)
    if tcfg.page_table > 0:
        _attach_page_table(result, data, tcfg)
    return result


def _epoch_order(rng: np.random.Generator, n: int, windows_per_epoch: int) -> np.ndarray:
    """The training windows of one epoch, shuffled: every window once, or (repeated as
    needed) ``windows_per_epoch`` of them."""
    order = rng.permutation(n)
    if windows_per_epoch:
        reps = -(-windows_per_epoch // len(order))
        if reps > 1:
            order = np.concatenate([order] + [rng.permutation(n) for _ in range(reps - 1)])
        order = order[:windows_per_epoch]
    return order


def _train_epoch(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    flat: np.ndarray,
    starts: np.ndarray,
    mcfg: ModelConfig,
    tcfg: TrainConfig,
    bar: Any,
) -> tuple[float, int]:
    """One pass over the windows starting at ``starts``, in batches; the summed loss and the steps."""
    run_loss, steps = 0.0, 0
    for b0 in range(0, len(starts), tcfg.batch):
        sel = starts[b0 : b0 + tcfg.batch]
        loss, _, _ = _loss(model, _batch(flat, sel, mcfg.seq_len, mcfg.n_classes), tcfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_loss += loss.item()
        steps += 1
        if bar is not None:
            bar.update(len(sel))
            bar.set_postfix(loss=f"{run_loss / steps:.3f}", refresh=False)
    if bar is not None:
        bar.close()
    return run_loss, steps


def _attach_page_table(result: TrainResult, data: PreparedData, tcfg: TrainConfig) -> None:
    """Build the page table from the training parts and fit the mixture weight on validation."""
    from pagecast.learn.mixture import build_table, fit_mix

    t0 = time.perf_counter()
    mcfg = result.model_config
    table = build_table(data.train, data.table.unknown, mcfg.horizon, tcfg.page_table)
    parts = data.val or [
        (enc, range(max(r.start, r.stop - max(1, (r.stop - r.start) // 10)), r.stop)) for enc, r in data.train
    ]
    lm = LoadedModel(result.model, mcfg, DatasetSpec(horizon=mcfg.horizon), tcfg, data.table, data.vocab, {}, [], {})
    lam, recall = fit_mix(lm, table, parts, tcfg.top_k, mcfg.horizon)
    if data.stats.get("validation") in ("leave-one-run-out", "other runs") and lam > 0:
        # λ was judged on a run the table had not seen; the table the model keeps knows them all
        table = build_table(list(data.train) + list(data.val), data.table.unknown, mcfg.horizon, tcfg.page_table)
    result.page_table, result.mix = table, lam
    result.metrics.update(
        {
            "page_table_keys": len(table),
            "page_mix": lam,
            "val_mix_recall": {str(k): v for k, v in recall.items()},
            "page_table_seconds": time.perf_counter() - t0,
        }
    )


# ---------------------------------------------------------------------------------------
# Model file


MODEL_DIGEST = "sha256"  # of every other entry: torch.load does not check the archive's CRCs


def model_digest(blob: dict) -> str:
    """SHA-256 over the model file's entries (names, JSON texts, tensor dtypes, shapes and bytes)."""
    h = hashlib.sha256()

    def feed(name: str, v: Any) -> None:
        h.update(name.encode() + b"\0")
        if isinstance(v, dict):
            for k in sorted(v):
                feed(f"{name}/{k}", v[k])
        elif isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(v).encode())

    for k in sorted(blob):
        if k != MODEL_DIGEST:
            feed(k, blob[k])
    return h.hexdigest()


def save_model(
    path: str | Path,
    result: TrainResult,
    data: PreparedData,
    spec: DatasetSpec,
    tcfg: TrainConfig,
    extra: dict | None = None,
) -> Path:
    blob = {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "model_config": json.dumps(result.model_config.to_dict()),
        "dataset": json.dumps(asdict(spec)),
        "train_config": json.dumps(asdict(tcfg)),
        "regions": json.dumps(data.table.to_list()),
        "vocab_keys": torch.from_numpy(data.vocab.keys.astype(np.int64)),
        "state_dict": {k: v.detach().clone() for k, v in result.model.state_dict().items()},
        "metrics": json.dumps(result.metrics),
        "history": json.dumps(result.history),
        "extra": json.dumps(extra or {}),
    }
    if result.page_table is not None:
        blob["page_table"] = result.page_table.to_blob()
        blob["page_mix"] = json.dumps(float(result.mix))
    blob[MODEL_DIGEST] = model_digest(blob)
    path = Path(path)
    with atomic_output(path) as tmp:
        torch.save(blob, str(tmp))
    return path


@dataclass
class Architecture:
    """The network's shape; the vocabulary and region sizes come from the data."""

    kind: str = "lstm"
    embed: int = 32
    hidden: int = 48
    layers: int = 1
    heads: int = 2  # transformer only
    seq_len: int = 32


def train_on_traces(
    traces: Sequence[str | Path],
    out: str | Path,
    *,
    spec: DatasetSpec | None = None,
    arch: Architecture | None = None,
    tcfg: TrainConfig | None = None,
    val_traces: Sequence[str | Path] = (),
    val_fraction: float = 0.1,
    test_fraction: float = 0.0,
    validation: str = "auto",
    on_epoch: Callable[[dict], None] | None = None,
    progress_factory: Callable[[int, str], Any] | None = None,
    max_events: int = MAX_TRAIN_EVENTS,
    on_note: Callable[[str], None] | None = None,
) -> TrainResult:
    """Traces in, model file out: what `pagecast train` does, callable from the benchmark harness.

    At most ``max_events`` demand events are encoded (learn/sample.py): longer traces are
    read as stretches spread over them, and ``on_note`` hears one line saying so. A run
    whose estimated peak does not fit the memory available fails before reading them.
    """
    from pagecast.learn.dataset import prepare
    from pagecast.learn.sample import count_demand, memory_check, plan_sample, read_sampled, split_budget
    from pagecast.trace.reader import open_trace

    spec = spec or DatasetSpec()
    arch = arch or Architecture()
    tcfg = tcfg or TrainConfig()
    opened = [open_trace(t) for t in [*traces, *val_traces]]
    counts = [count_demand(t) for t in opened]
    budgets = split_budget(counts, max(1, max_events))
    plans = [plan_sample(c, b) for c, b in zip(counts, budgets)]
    memory_check(sum(p.events for p in plans), spec.horizon)
    sampled = {}
    for t, p in zip(opened, plans):
        if p.sampled:
            sampled[str(t.path)] = {"events": p.events, "of": p.total, "stretches": len(p.stretches)}
            if on_note:
                on_note(
                    f"{t.path}: {p.total:,} demand events; training on {p.events:,} of them "
                    f"({len(p.stretches)} stretches spread over the trace) to bound memory (--max-events)"
                )
    streams = [read_sampled(t, p) for t, p in zip(opened, plans)]
    data = prepare(
        streams[: len(traces)],
        spec,
        val_fraction=val_fraction,
        test_fraction=test_fraction,
        val_streams=streams[len(traces) :],
        validation=validation,
    )
    del streams
    if sampled:
        data.stats["sampled"] = sampled
    mcfg = ModelConfig(
        kind=arch.kind,
        n_classes=len(data.vocab),
        n_slots=data.table.unknown,
        n_ip=spec.ip_buckets,
        embed=arch.embed,
        hidden=arch.hidden,
        layers=arch.layers,
        heads=arch.heads,
        seq_len=arch.seq_len,
        horizon=spec.horizon,
    )
    res = train_model(data, mcfg, tcfg, on_epoch=on_epoch, progress_factory=progress_factory)
    save_model(
        out,
        res,
        data,
        spec,
        tcfg,
        extra={"traces": [str(t) for t in traces], "val_traces": [str(t) for t in val_traces]},
    )
    return res


@dataclass
class LoadedModel:
    model: torch.nn.Module
    config: ModelConfig
    spec: DatasetSpec
    train_config: TrainConfig
    table: RegionTable
    vocab: Vocabulary
    metrics: dict
    history: list
    extra: dict
    path: str = ""
    page_table: Any = None  # learn.pagetable.PageTable (absent in files of earlier versions)
    mix: float = 0.0


def load_model(path: str | Path) -> LoadedModel:
    path = check_readable(path, "model file")
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":  # torch.save writes a zip archive
            raise PagecastError("not a pagecast model file (not a torch.save archive)", path=path)
    try:
        with warnings.catch_warnings():  # a damaged pickle header warns before it fails: keep stderr one line
            warnings.simplefilter("ignore")
            blob = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for a damaged or foreign archive
        raise PagecastError(f"not a pagecast model file (unreadable archive: {type(e).__name__})", path=path) from None
    if not isinstance(blob, dict) or blob.get("format") != MODEL_FORMAT:
        raise PagecastError("not a pagecast model file (no pagecast-model header)", path=path)
    try:
        version = int(blob.get("version", 0))
    except (TypeError, ValueError):
        raise PagecastError("corrupt model file (bad version)", path=path) from None
    if version > MODEL_VERSION:
        raise PagecastError(
            f"model file version {version} is newer than this pagecast reads ({MODEL_VERSION})", path=path
        )
    # Files from before digests have none; any other file must match its digest.
    if MODEL_DIGEST in blob and blob[MODEL_DIGEST] != model_digest(blob):
        raise PagecastError("corrupt model file (contents do not match the file's SHA-256 digest)", path=path)
    try:
        cfg = ModelConfig(**json.loads(blob["model_config"]))
        spec = DatasetSpec(**json.loads(blob["dataset"]))
        tcfg = TrainConfig(**json.loads(blob["train_config"]))
        model = build_model(cfg)
        model.load_state_dict(blob["state_dict"])
        table = None
        if "page_table" in blob:
            from pagecast.learn.pagetable import PageTable

            table = PageTable.from_blob(blob["page_table"])
        mix = float(json.loads(blob.get("page_mix", "0")))
        loaded = LoadedModel(
            model,
            cfg,
            spec,
            tcfg,
            RegionTable.from_list(json.loads(blob["regions"])),
            Vocabulary(blob["vocab_keys"].numpy().astype(np.int64)),
            json.loads(blob["metrics"]),
            json.loads(blob["history"]),
            json.loads(blob.get("extra", "{}")),
            str(path),
            table,
            mix,
        )
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError, OverflowError) as e:
        raise PagecastError(
            f"corrupt model file ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})", path=path
        ) from None
    model.eval()
    return loaded
