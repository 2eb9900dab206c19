"""The one demand-stream reader (trace/demand.py) against a plain reference filter."""

from __future__ import annotations

import numpy as np
import pytest

from pagecast.trace.demand import DEMAND_CODES, demand_batches, demand_counts, demand_mask, read_demand_columns
from pagecast.trace.reader import open_trace
from pagecast.trace.regions import Region
from pagecast.trace.schema import DEMAND_KINDS, Kind
from pagecast.trace.writer import TraceWriter

ALL_KINDS = [int(k) for k in Kind]


def _write(path, kind, row_group_rows=1000):
    n = len(kind)
    rng = np.random.default_rng(7)
    cols = dict(
        t_ns=np.arange(n, dtype=np.int64) * 10,
        region=rng.integers(-1, 3, n).astype(np.int32),
        page=rng.integers(0, 5000, n).astype(np.int64),
        kind=np.asarray(kind, np.uint8),
        flags=rng.integers(0, 4, n).astype(np.uint8),
        ip=rng.integers(0, 1 << 40, n).astype(np.uint64),
    )
    regions = [Region(i, f"r{i}", kind="anon", length=5000 * 4096) for i in range(3)]
    with TraceWriter(path, regions=regions, row_group_rows=row_group_rows) as w:
        w.write(**cols)
    return cols


def _reference(cols, names):
    demand = [int(k) for k in DEMAND_KINDS]
    keep = [i for i, k in enumerate(cols["kind"].tolist()) if k in demand]
    return {c: cols[c][keep] for c in names}


def test_mask_is_the_demand_kinds():
    assert sorted(DEMAND_CODES.tolist()) == sorted(int(k) for k in DEMAND_KINDS)
    kinds = np.array(ALL_KINDS, np.uint8)
    assert demand_mask(kinds).tolist() == [k in DEMAND_KINDS for k in Kind]


@pytest.mark.parametrize("mix", ["demand only", "mixed", "no demand"])
def test_reader_equals_reference(tmp_path, mix):
    rng = np.random.default_rng(1)
    n = 5300
    if mix == "demand only":
        kind = rng.integers(0, 4, n)
    elif mix == "mixed":
        kind = rng.choice(ALL_KINDS, n)
    else:
        kind = rng.choice([int(Kind.PREFETCH), int(Kind.EVICT), int(Kind.KERNEL)], n)
    cols = _write(tmp_path / "t.parquet", kind)
    t = open_trace(tmp_path / "t.parquet")
    names = ["t_ns", "region", "page", "ip"]
    ref = _reference(cols, names)
    whole = read_demand_columns(t, names, batch_rows=700)
    for c in names:
        assert np.array_equal(whole[c], ref[c]) and whole[c].dtype == cols[c].dtype
    batches = list(demand_batches(t, ["page", "kind"], batch_rows=700))
    assert all(len(b["page"]) for b in batches)  # no empty batches
    got = np.concatenate([b["page"] for b in batches]) if batches else np.empty(0, np.int64)
    assert np.array_equal(got, ref["page"])
    if batches:
        assert demand_mask(np.concatenate([b["kind"] for b in batches])).all()
    assert sum(demand_counts(t)) == len(ref["page"])


def test_empty_stream_keeps_dtypes(tmp_path):
    _write(tmp_path / "t.parquet", [int(Kind.PREFETCH)] * 10)
    d = read_demand_columns(open_trace(tmp_path / "t.parquet"), ["t_ns", "region", "page"])
    assert [(len(v), v.dtype) for v in d.values()] == [(0, np.int64), (0, np.int32), (0, np.int64)]


def test_consumers_see_the_same_stream(tmp_path):
    """The simulator's chunks and the learner's stream are the reader's stream."""
    from pagecast.learn.dataset import read_demand
    from pagecast.trace.demand import demand_chunks, demand_chunks_reversed

    rng = np.random.default_rng(2)
    cols = _write(tmp_path / "t.parquet", rng.choice(ALL_KINDS, 4000), row_group_rows=512)
    t = open_trace(tmp_path / "t.parquet")
    ref = _reference(cols, ["t_ns", "region", "page", "ip", "flags"])
    s = read_demand(t)
    assert (
        np.array_equal(s.page, ref["page"]) and np.array_equal(s.ip, ref["ip"]) and np.array_equal(s.t_ns, ref["t_ns"])
    )
    fwd = list(demand_chunks(t, 600))
    assert np.array_equal(np.concatenate([c["page"] for c in fwd]), ref["page"])
    assert np.array_equal(np.concatenate([c["write"] for c in fwd]), ref["flags"] & 1)
    back = list(demand_chunks_reversed(t))
    starts = [s for s, _ in back]
    assert starts == sorted(starts, reverse=True)
    for start, c in back:
        assert np.array_equal(c["page"], ref["page"][start : start + len(c["page"])])
