"""Traces → training windows for learned prefetchers (the Hashemi et al. formulation).

An event is (region, page). Pages are named relative to the *last page seen in the same
region*, so a model learns deltas, which transfer across runs and across region bases.
Each token is one (region slot, delta) pair; the vocabulary keeps the most frequent
pairs and folds the rest into class 0 ("other").

For demand event i the dataset holds:
  * input token: the pair (slot_i, page_i − last page of slot_i before i), class-coded;
    plus the region slot itself (useful where the pair is "other") and optionally a
    hashed instruction pointer;
  * next label: the class of event i+1 relative to the state after event i, i.e.
    (slot_{i+1}, page_{i+1} − last page of slot_{i+1} as of i);
  * horizon label: the classes of events i+1 … i+H, each relative to the state as of i
    (multi-hot: "the pages needed in the next window", AI4Mem's training target).

Decoding a class c at trigger i gives the page last[slot_c] + delta_c: exactly what the
causal predictor knows at i. All arrays are numpy; label construction is a numba loop, so
a 10 M-event trace costs arrays, never per-event Python objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numba
import numpy as np

from pagecast.errors import PagecastError
from pagecast.trace.demand import demand_batches, read_demand_columns
from pagecast.trace.reader import Trace, open_trace
from pagecast.trace.regions import Region, match_regions

# A pair key packs (slot, delta) into one int64 so np.unique/searchsorted work on it.
_DELTA_BITS = 40
_DELTA_OFFSET = 1 << (_DELTA_BITS - 1)
NO_KEY = -1
OTHER = 0  # class id of every pair outside the vocabulary
# The slot of a *generic* pair: "this delta from the page just touched, in the region just
# touched", whatever that region is. One class then names, e.g., the next page of every
# file a program reads, where per-region pairs would need one class per file.
GENERIC_SLOT = (1 << 23) - 1
_DELTA_MASK = (1 << _DELTA_BITS) - 1


def pack_key(slot: np.ndarray | int, delta: np.ndarray | int) -> np.ndarray | int:
    return (np.asarray(slot, np.int64) << _DELTA_BITS) | (np.asarray(delta, np.int64) + _DELTA_OFFSET)


def unpack_key(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    key = np.asarray(key, np.int64)
    return (key >> _DELTA_BITS).astype(np.int64), (key & ((1 << _DELTA_BITS) - 1)) - _DELTA_OFFSET


# ---------------------------------------------------------------------------------------
# Demand stream


@dataclass
class DemandStream:
    """The demand events of one trace (ACCESS and FAULT_* rows, in file order)."""

    t_ns: np.ndarray
    region: np.ndarray
    page: np.ndarray
    ip: np.ndarray
    regions: list[Region]
    path: str = ""
    # A sampled stream (learn/sample.py): [start, stop) of each stretch's usable events;
    # windows, labels and page successors stay inside one. None: one continuous stream.
    segments: list[tuple[int, int]] | None = None

    def __len__(self) -> int:
        return len(self.page)

    def pieces(self, r: range) -> list[range]:
        """``r`` cut at the joints between stretches (the whole of ``r`` when continuous)."""
        if self.segments is None:
            return [r] if len(r) else []
        out = [range(max(r.start, a), min(r.stop, b)) for a, b in self.segments]
        return [q for q in out if len(q)]

    @classmethod
    def from_columns(
        cls, cols: dict[str, np.ndarray], t: Trace, segments: list[tuple[int, int]] | None = None
    ) -> "DemandStream":
        """The stream of trace ``t`` from its read columns t_ns, region, page and ip."""
        return cls(
            cols["t_ns"].astype(np.int64, copy=False),
            cols["region"].astype(np.int32, copy=False),
            cols["page"].astype(np.int64, copy=False),
            cols["ip"].astype(np.uint64, copy=False),
            list(t.regions),
            str(t.path),
            segments=segments,
        )

    def take(self, events: np.ndarray) -> "DemandStream":
        """The sub-stream of the given event indices (e.g. the misses of a fast tier)."""
        e = np.asarray(events, np.int64)
        return DemandStream(self.t_ns[e], self.region[e], self.page[e], self.ip[e], self.regions, self.path)

    def slice(self, start: int, stop: int) -> "DemandStream":
        return DemandStream(
            self.t_ns[start:stop],
            self.region[start:stop],
            self.page[start:stop],
            self.ip[start:stop],
            self.regions,
            self.path,
        )


def read_demand(trace: Trace | str | Path | DemandStream, batch_rows: int = 1 << 20) -> DemandStream:
    """Read the demand stream of a trace chunk by chunk (only the needed columns)."""
    if isinstance(trace, DemandStream):
        return trace
    t = trace if isinstance(trace, Trace) else open_trace(trace)
    cols = read_demand_columns(t, ["t_ns", "region", "page", "ip"], batch_rows)
    return DemandStream.from_columns(cols, t)


def read_demand_events(
    trace: Trace | str | Path, events: np.ndarray, batch_rows: int = 1 << 20
) -> tuple[DemandStream, int]:
    """(the demand events of the given sorted indices, the stream's length), read chunk by
    chunk: memory holds the events taken, not the stream (the misses of a long access trace)."""
    t = trace if isinstance(trace, Trace) else open_trace(trace)
    events = np.asarray(events, np.int64)
    cols = ("t_ns", "region", "page", "ip")
    parts: dict[str, list[np.ndarray]] = {c: [] for c in cols}
    base = 0
    for b in demand_batches(t, list(cols), batch_rows):
        n = len(b["page"])
        a, z = np.searchsorted(events, [base, base + n])
        for c in cols:
            parts[c].append(b[c][events[a:z] - base])
        base += n
    out = {c: np.concatenate(v) if v else np.empty(0) for c, v in parts.items()}
    return DemandStream.from_columns(out, t), base


# ---------------------------------------------------------------------------------------
# Region slots: the model's names for regions, stable across runs


@dataclass
class RegionTable:
    """The regions a model knows, by slot. Slot ``len(regions)`` means "unknown region"."""

    regions: list[Region] = field(default_factory=list)

    @property
    def unknown(self) -> int:
        return len(self.regions)

    def lut_for(self, trace_regions: Sequence[Region]) -> np.ndarray:
        """trace region id → slot (``unknown`` where the trace's region has no match).

        Index with ``region + 1`` so that region −1 (no region) maps to unknown too.
        """
        lut = np.full(len(trace_regions) + 1, self.unknown, np.int32)
        slot_of_id = {r.id: s for s, r in enumerate(self.regions)}
        for model_id, trace_id in match_regions(self.regions, trace_regions).items():
            if 0 <= trace_id < len(trace_regions):
                lut[trace_id + 1] = slot_of_id[model_id]
        return lut

    def extend_from(self, trace_regions: Sequence[Region], used_ids: np.ndarray, max_slots: int) -> None:
        """Adopt the regions of a training trace that carry events and are not known yet."""
        matched = {tid for tid, s in enumerate(self.lut_for(trace_regions)[1:].tolist()) if s != self.unknown}
        for rid in used_ids.tolist():
            if len(self.regions) >= max_slots:
                break
            if rid < 0 or rid >= len(trace_regions) or rid in matched:
                continue
            r = Region.from_dict(trace_regions[rid].to_dict())
            r.id = len(self.regions)
            self.regions.append(r)

    def slots(self, stream: DemandStream) -> np.ndarray:
        lut = self.lut_for(stream.regions)
        rid = stream.region.astype(np.int64)
        ok = (rid >= -1) & (rid < len(stream.regions))
        return np.where(ok, lut[np.clip(rid + 1, 0, len(lut) - 1)], self.unknown).astype(np.int32)

    def to_list(self) -> list[dict]:
        return [r.to_dict() for r in self.regions]

    @classmethod
    def from_list(cls, items: Sequence[dict]) -> "RegionTable":
        return cls([Region.from_dict(d) for d in items])


# ---------------------------------------------------------------------------------------
# Pair keys (numba loops: one pass over the stream, per-slot "last page" state)


@numba.njit(cache=True)
def _input_keys(slot: np.ndarray, page: np.ndarray, n_slots: int) -> np.ndarray:
    n = len(page)
    out = np.full(n, -1, np.int64)
    last = np.zeros(n_slots, np.int64)
    seen = np.zeros(n_slots, np.bool_)
    for i in range(n):
        s = slot[i]
        if s < n_slots:
            if seen[s]:
                d = page[i] - last[s]
                if -_DELTA_OFFSET <= d < _DELTA_OFFSET:
                    out[i] = (np.int64(s) << _DELTA_BITS) | (d + _DELTA_OFFSET)
            last[s] = page[i]
            seen[s] = True
    return out


@numba.njit(cache=True)
def _horizon_keys(slot: np.ndarray, page: np.ndarray, n_slots: int, horizon: int) -> np.ndarray:
    """keys[i, h-1] = pair of event i+h relative to the per-slot last pages as of event i."""
    n = len(page)
    out = np.full((n, horizon), -1, np.int64)
    last = np.zeros(n_slots, np.int64)
    seen = np.zeros(n_slots, np.bool_)
    for i in range(n):
        s = slot[i]
        if s < n_slots:
            last[s] = page[i]
            seen[s] = True
        for h in range(1, horizon + 1):
            j = i + h
            if j >= n:
                break
            sj = slot[j]
            if sj < n_slots and seen[sj]:
                d = page[j] - last[sj]
                if -_DELTA_OFFSET <= d < _DELTA_OFFSET:
                    out[i, h - 1] = (np.int64(sj) << _DELTA_BITS) | (d + _DELTA_OFFSET)
    return out


@numba.njit(cache=True)
def _distinct_per_row(keys: np.ndarray) -> np.ndarray:
    """Number of distinct valid keys per row (pages needed in the horizon, even unseen ones)."""
    n, h = keys.shape
    out = np.zeros(n, np.int32)
    buf = np.empty(h, np.int64)
    for i in range(n):
        m = 0
        for j in range(h):
            k = keys[i, j]
            if k < 0:
                continue
            dup = False
            for q in range(m):
                if buf[q] == k:
                    dup = True
                    break
            if not dup:
                buf[m] = k
                m += 1
        out[i] = m
    return out


def input_keys(slots: np.ndarray, page: np.ndarray, n_slots: int) -> np.ndarray:
    return _input_keys(np.ascontiguousarray(slots, np.int32), np.ascontiguousarray(page, np.int64), n_slots)


def generic_keys(keys: np.ndarray) -> np.ndarray:
    """The generic pair of each pair key (same delta, slot GENERIC_SLOT); −1 stays −1."""
    keys = np.asarray(keys, np.int64)
    return np.where(keys >= 0, (np.int64(GENERIC_SLOT) << _DELTA_BITS) | (keys & _DELTA_MASK), -1)


@numba.njit(cache=True)
def _generic_horizon_keys(hkeys: np.ndarray, slots: np.ndarray, n_slots: int) -> np.ndarray:
    n, h = hkeys.shape
    out = np.full((n, h), -1, np.int64)
    gen = np.int64(GENERIC_SLOT) << _DELTA_BITS
    for i in range(n):
        s = slots[i]
        if s >= n_slots:
            continue
        for q in range(h):
            j = min(i + q + 1, n - 1)
            k = hkeys[i, q]
            if k >= 0 and slots[j] == s:
                out[i, q] = gen | (k & _DELTA_MASK)
    return out


def generic_horizon_keys(hkeys: np.ndarray, slots: np.ndarray, n_slots: int) -> np.ndarray:
    """Generic pairs of the horizon keys whose event lies in the region of event i (else −1):
    only there is "delta from the page just touched" the same page. One compiled pass, so
    the only array it allocates is its result."""
    return _generic_horizon_keys(
        np.ascontiguousarray(hkeys, np.int64), np.ascontiguousarray(slots, np.int64), int(n_slots)
    )


def horizon_keys(slots: np.ndarray, page: np.ndarray, n_slots: int, horizon: int) -> np.ndarray:
    return _horizon_keys(np.ascontiguousarray(slots, np.int32), np.ascontiguousarray(page, np.int64), n_slots, horizon)


@numba.njit(cache=True)
def decode_pages(
    slot: np.ndarray,
    page: np.ndarray,
    start: int,
    top: np.ndarray,
    cls_slot: np.ndarray,
    cls_delta: np.ndarray,
    last: np.ndarray,
    seen: np.ndarray,
    top_k: int,
    limit: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Turn ranked class predictions into pages, causally, one block of events at a time.

    ``top`` (m, K) ranks classes for events start … start+m−1 of ``slot``/``page``;
    ``last``/``seen`` hold the per-slot last page before ``start`` and are advanced (pass
    them on to the next block). Per event the first ``top_k`` usable classes are kept: a
    class is unusable when it is "other", its slot has not been seen yet, or it names a
    negative page, a page at or past ``limit[slot]`` (the region's length in this run; 0
    when the region is absent) or the page just accessed — what the per-fault kernel skips
    too. Returns (ok, rank, slot, page), each (m, top_k).
    """
    m, k = top.shape
    n_slots = len(last)
    ok = np.zeros((m, top_k), np.bool_)
    rank = np.zeros((m, top_k), np.int32)
    out_slot = np.zeros((m, top_k), np.int32)
    out_page = np.zeros((m, top_k), np.int64)
    for r in range(m):
        i = start + r
        s = slot[i]
        if s < n_slots:
            last[s] = page[i]
            seen[s] = True
        got = 0
        for q in range(k):
            if got == top_k:
                break
            c = top[r, q]
            if c <= 0:
                continue
            cs = cls_slot[c]
            if cs == GENERIC_SLOT:
                cs = s  # the region just touched
            if cs >= n_slots or not seen[cs]:
                continue
            p = last[cs] + cls_delta[c]
            if p < 0 or p >= limit[cs] or (cs == s and p == page[i]):
                continue
            ok[r, got] = True
            rank[r, got] = q
            out_slot[r, got] = cs
            out_page[r, got] = p
            got += 1
    return ok, rank, out_slot, out_page


# ---------------------------------------------------------------------------------------
# Vocabulary


@dataclass
class Vocabulary:
    """Sorted pair keys; class c ≥ 1 is ``keys[c-1]``, class 0 is "other"."""

    keys: np.ndarray

    def __len__(self) -> int:
        """Number of classes including "other"."""
        return len(self.keys) + 1

    @classmethod
    def build(cls, key_arrays: Sequence[np.ndarray], max_size: int, min_count: int = 2) -> "Vocabulary":
        """The ``max_size − 1`` most frequent pairs (ties broken by smaller key)."""
        # counted array by array and merged, so memory holds one array's copy, not all of them
        us, cs = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        for k in key_arrays:
            u, c = np.unique(k[k >= 0], return_counts=True)
            us.append(u.astype(np.int64))
            cs.append(c.astype(np.int64))
        allu = np.concatenate(us)
        if len(allu) == 0:
            return cls(np.empty(0, np.int64))
        uniq, inv = np.unique(allu, return_inverse=True)
        counts = np.bincount(inv, weights=np.concatenate(cs), minlength=len(uniq)).astype(np.int64)
        keep = counts >= min_count
        uniq, counts = uniq[keep], counts[keep]
        order = np.lexsort((uniq, -counts))[: max(max_size - 1, 0)]
        return cls(np.sort(uniq[order]).astype(np.int64))

    def encode(self, keys: np.ndarray, fallback: np.ndarray | None = None) -> np.ndarray:
        """Pair keys → class ids (0 for unknown or invalid keys); where a key is not in the
        vocabulary, ``fallback`` keys (same shape: the generic pairs) are tried."""
        keys = np.asarray(keys, np.int64)
        if len(self.keys) == 0:
            return np.zeros(keys.shape, np.int64)
        pos = np.searchsorted(self.keys, keys)
        pos_c = np.minimum(pos, len(self.keys) - 1)
        hit = (self.keys[pos_c] == keys) & (keys >= 0)
        out = np.where(hit, pos_c + 1, OTHER).astype(np.int64)
        if fallback is not None:
            out = np.where(hit, out, self.encode(fallback))
        return out

    def class_slots_deltas(self) -> tuple[np.ndarray, np.ndarray]:
        """Per class (index 0 = "other", slot/delta 0): region slot and page delta."""
        s, d = unpack_key(self.keys)
        return np.concatenate([[0], s]).astype(np.int32), np.concatenate([[0], d]).astype(np.int64)


# ---------------------------------------------------------------------------------------
# Encoded streams and windows


@dataclass
class EncodedStream:
    """One trace, fully encoded: inputs and labels per demand event."""

    tokens: np.ndarray  # (n,) int64 input class
    slots: np.ndarray  # (n,) int64 region slot
    ips: np.ndarray  # (n,) int64 hashed ip bucket (0 when ip is unused)
    next_label: np.ndarray  # (n,) int64 class of event i+1 (−100 where there is none)
    horizon: np.ndarray  # (n, H) int64 classes of events i+1..i+H (−1 where there is none)
    n_future: np.ndarray  # (n,) int32 distinct pages among the next H events (recall denominator)
    pages: np.ndarray | None = None  # (n,) int64 region-relative pages (for the page table)

    def __len__(self) -> int:
        return len(self.tokens)


def ip_buckets(ip: np.ndarray, n_buckets: int) -> np.ndarray:
    """Hash instruction pointers into ``n_buckets`` − 1 buckets (0 = no ip).

    Only the low 12 bits (offset in the code page) and the next 8 enter the hash, as
    ASLR moves code by whole pages: the same instruction gets the same bucket next run
    often enough to help, and ip stays optional.
    """
    if n_buckets <= 1:
        return np.zeros(len(ip), np.int64)
    x = (np.asarray(ip, np.uint64) & np.uint64(0xFFFFF)).astype(np.int64)
    h = (x * 2654435761) % (n_buckets - 1) + 1
    return np.where(np.asarray(ip) == 0, 0, h).astype(np.int64)


def encode_inputs(
    stream: DemandStream, table: RegionTable, vocab: Vocabulary, n_ip: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    slots = table.slots(stream)
    ik = input_keys(slots, stream.page, table.unknown)
    toks = vocab.encode(ik, generic_keys(ik))
    return toks, slots.astype(np.int64), ip_buckets(stream.ip, n_ip)


_ENCODE_ROWS = 1 << 18


def encode_stream(
    stream: DemandStream,
    table: RegionTable,
    vocab: Vocabulary,
    horizon: int,
    n_ip: int,
    hkeys: np.ndarray | None = None,
) -> EncodedStream:
    toks, slots, ips = encode_inputs(stream, table, vocab, n_ip)
    if hkeys is None:
        hkeys = horizon_keys(slots, stream.page, table.unknown, horizon)
    # one class per future page: its region's own pair if the vocabulary has it, else the
    # generic one; in blocks of rows, so the temporaries stay small on long streams
    hcls = np.empty(hkeys.shape, np.int64)
    for a in range(0, len(hkeys), _ENCODE_ROWS):
        b = min(len(hkeys), a + _ENCODE_ROWS + horizon)
        part = hkeys[a:b]
        blk = vocab.encode(part, generic_horizon_keys(part, slots[a:b], table.unknown))
        blk[part < 0] = -1
        hcls[a : min(len(hkeys), a + _ENCODE_ROWS)] = blk[:_ENCODE_ROWS]
    nxt = hcls[:, 0].copy()
    nxt[hkeys[:, 0] < 0] = -100  # ignored by cross entropy (end of stream / unknown region)
    return EncodedStream(toks, slots, ips, nxt, hcls, _distinct_per_row(hkeys), np.asarray(stream.page, np.int64))


def time_split(n: int, val_fraction: float, test_fraction: float = 0.0) -> tuple[range, range, range]:
    """Consecutive train / validation / test ranges: held-out data always lies later in time."""
    if not (0 <= val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
        raise PagecastError(f"bad split fractions: validation {val_fraction}, test {test_fraction}")
    n_test = int(round(n * test_fraction))
    n_val = int(round(n * val_fraction))
    a = n - n_val - n_test
    return range(0, a), range(a, a + n_val), range(a + n_val, n)


def window_starts(rng_: range, seq_len: int, horizon: int, stride: int | None = None) -> np.ndarray:
    """Start indices of windows lying wholly inside ``rng_`` whose labels also stay inside it."""
    stride = stride or seq_len
    last = rng_.stop - seq_len - horizon
    if last < rng_.start:
        return np.empty(0, np.int64)
    return np.arange(rng_.start, last + 1, stride, dtype=np.int64)


@dataclass
class DatasetSpec:
    horizon: int = 10
    vocab_size: int = 256
    min_count: int = 2
    max_regions: int = 256
    ip_buckets: int = 0  # 0: ip unused
    generic: bool = True  # also count generic pairs (delta in the region just touched) for the vocabulary


@dataclass
class PreparedData:
    table: RegionTable
    vocab: Vocabulary
    train: list[tuple[EncodedStream, range]]  # (stream, range of usable events)
    val: list[tuple[EncodedStream, range]]
    test: list[tuple[EncodedStream, range]]
    stats: dict


def prepare(
    train_streams: Sequence[DemandStream],
    spec: DatasetSpec,
    *,
    val_fraction: float = 0.1,
    test_fraction: float = 0.0,
    val_streams: Sequence[DemandStream] = (),
    validation: str = "auto",
) -> PreparedData:
    """Region table and vocabulary from the training parts; every stream encoded.

    Validation (``validation``): with ``val_streams`` (other runs) those validate (split
    across runs); ``"auto"`` with two or more training traces holds the last one out whole
    (leave-one-run-out: what the next run looks like, where the end of a short fault trace
    is often interpreter shutdown); ``"time"`` (and ``"auto"`` with one trace) validates on
    the last ``val_fraction`` of each training trace. Training traces are used whole
    except for ``test_fraction`` and the validation part.
    """
    if not train_streams:
        raise PagecastError("no training traces")
    if validation not in ("auto", "time"):
        raise PagecastError(f"unknown validation mode {validation!r} (auto or time)")
    mode = (
        "other runs"
        if val_streams
        else ("leave-one-run-out" if validation == "auto" and len(train_streams) >= 2 else "time")
    )
    if mode == "leave-one-run-out":
        train_streams, val_streams = list(train_streams[:-1]), [train_streams[-1]]
    table = RegionTable()
    splits = []
    for s in train_streams:
        if len(s) == 0:
            raise PagecastError("trace has no demand events (ACCESS or FAULT_* rows)", path=s.path)
        tr, va, te = time_split(len(s), 0.0 if val_streams else val_fraction, test_fraction)
        used, counts = np.unique(s.region[tr.start : tr.stop], return_counts=True)
        table.extend_from(s.regions, used[np.argsort(-counts, kind="stable")], spec.max_regions)
        splits.append((tr, va, te))
    hk = []
    for s in train_streams:
        slots = table.slots(s)
        hk.append(horizon_keys(slots, s.page, table.unknown, spec.horizon))
    counted = []
    for s, k, (tr, _, _) in zip(train_streams, hk, splits):
        gen = generic_horizon_keys(k, table.slots(s), table.unknown) if spec.generic else None
        for q in s.pieces(tr):
            part = slice(q.start, max(q.start, q.stop - spec.horizon))
            counted.append(k[part])
            if gen is not None:
                counted.append(gen[part])
        del gen
    vocab = Vocabulary.build(counted, spec.vocab_size, spec.min_count)
    del counted
    train, val, test = [], [], []
    for i, (s, (tr, va, te)) in enumerate(zip(train_streams, splits)):
        k, hk[i] = hk[i], None  # each key matrix freed once encoded
        enc = encode_stream(s, table, vocab, spec.horizon, spec.ip_buckets, hkeys=k)
        del k
        train += [(enc, q) for q in s.pieces(tr)]
        val += [(enc, q) for q in s.pieces(va)]
        test += [(enc, q) for q in s.pieces(te)]
    for s in val_streams:
        enc = encode_stream(s, table, vocab, spec.horizon, spec.ip_buckets)
        val += [(enc, q) for q in s.pieces(range(0, len(enc)))]
    # How much of the future the vocabulary can name at all (an upper bound on recall).
    cover_num = sum(int((e.horizon[r.start : r.stop] > 0).sum()) for e, r in train)
    cover_den = sum(int((e.horizon[r.start : r.stop] >= 0).sum()) for e, r in train)
    stats = {
        "train_events": sum(len(r) for _, r in train),
        "val_events": sum(len(r) for _, r in val),
        "test_events": sum(len(r) for _, r in test),
        "regions": len(table.regions),
        "classes": len(vocab),
        "vocab_coverage": cover_num / cover_den if cover_den else 0.0,
        "validation": mode,
    }
    return PreparedData(table, vocab, train, val, test, stats)
