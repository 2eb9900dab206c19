"""damo record importer: a real record from damo's repository checked against damo's own
parser, records written by damo's writer, the heatmap against damo's heatmap of the
same record, malformed input, a bounded fuzz, and the trace through simulate / train.

damo (from PyPI, the ``test`` extra) only reads and writes record files here; nothing
starts DAMON monitoring.
"""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from _fuzz import replace_number
from pagecast.cli import main as cli_main
from pagecast.errors import PagecastError
from pagecast.importers import damo
from pagecast.report.heatmap import HeatmapConfig, compute
from pagecast.trace import Kind, open_trace
from train_support import TINY_TRAIN

REAL = Path(__file__).parent / "data" / "damo" / "damon.data.json_compressed"


@pytest.fixture(scope="module")
def damo_api():
    """damo's record module (damo's modules import each other by top-level name)."""
    spec = importlib.util.find_spec("damo")
    if spec is None or spec.origin is None:
        pytest.skip("damo (pip install damo) not installed")
    d = str(Path(spec.origin).parent)
    if d not in sys.path:
        sys.path.insert(0, d)
    import _damo_records
    import _damon

    return _damo_records, _damon


def _expected_from_damo(records) -> dict[str, np.ndarray]:
    """Rows the import must hold, from damo's own DamonRecord objects."""
    t0 = min(s.start_time for r in records for s in r.snapshots)
    snaps = sorted(((s.start_time, ti, s) for ti, r in enumerate(records) for s in r.snapshots), key=lambda x: x[0])
    rows = [
        (s.start_time - t0, reg.start, reg.end, reg.nr_accesses.samples, ti) for _, ti, s in snaps for reg in s.regions
    ]
    a = np.array(rows, dtype=object)
    return {
        "t": a[:, 0].astype(np.int64),
        "start": a[:, 1].astype(np.uint64),
        "end": a[:, 2].astype(np.uint64),
        "acc": a[:, 3].astype(np.int64),
        "target": a[:, 4].astype(np.int64),
        "t0": t0,
    }


def _check_against(out: Path, exp: dict[str, np.ndarray]) -> None:
    t = open_trace(out)
    c = t.read()
    assert len(c["t_ns"]) == len(exp["t"])
    assert np.array_equal(c["t_ns"], exp["t"]) and t.meta["t0_ns"] == exp["t0"]
    base = np.array([r.base for r in t.regions], np.uint64)[c["region"]]
    assert np.array_equal(base + (c["page"].astype(np.uint64) << np.uint64(12)), exp["start"])
    assert np.array_equal(c["ip"], (exp["end"] - exp["start"] + np.uint64(4095)) >> np.uint64(12))
    assert np.array_equal(c["tid"], exp["acc"])
    assert np.array_equal(c["kind"], np.where(exp["acc"] > 0, int(Kind.RANGE_ACCESSED), int(Kind.RANGE_IDLE)))
    targets = np.array([r.extra["damon_target"] for r in t.regions])[c["region"]]
    assert np.array_equal(targets, exp["target"])
    ends = np.array([r.base + r.length for r in t.regions], np.uint64)[c["region"]]
    assert (exp["end"] <= ends).all()


def test_real_record_matches_damo_parser(tmp_path, damo_api):
    _damo_records, _ = damo_api
    info = damo.import_trace(REAL, tmp_path / "d.parquet")
    assert info["format"] == "json_compressed" and info["rows"] == 9773 and info["snapshots"] == 543
    assert info["targets"] == 1 and info["regions"] == 3
    _check_against(tmp_path / "d.parquet", _expected_from_damo(_damo_records.parse_compressed_json(str(REAL))))
    # the same record as plain JSON: detected, same rows
    plain = tmp_path / "damon.data"
    plain.write_bytes(zlib.decompress(REAL.read_bytes()))
    assert damo.import_trace(plain, tmp_path / "p.parquet")["format"] == "json"
    a, b = open_trace(tmp_path / "d.parquet").read(), open_trace(tmp_path / "p.parquet").read()
    assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("fmt", ["json", "json_compressed"])
def test_records_written_by_damo(tmp_path, damo_api, fmt):
    _damo_records, _damon = damo_api
    rng = random.Random(3)
    records = []
    for tid, base in ((42, 0x5600_0000_0000), (43, 0x7F00_0000_0000)):
        rec = _damo_records.DamonRecord(0, 0, _damon.DamonIntervals(5000, 100000, 1000000), None, tid, [])
        for s in range(40):
            regs, a = [], base
            for _ in range(rng.randint(3, 8)):
                b = a + 4096 * rng.randint(1, 900)
                regs.append(
                    _damon.DamonRegion(
                        a, b, rng.choice([0, 0, 3, 20]), _damon.unit_samples, s, _damon.unit_aggr_intervals
                    )
                )
                a = b
            t = 10**9 + s * 100_000_000
            rec.snapshots.append(_damo_records.DamonSnapshot(t, t + 100_000_000, regs, None))
        records.append(rec)
    path = tmp_path / f"rec.{fmt}"
    assert _damo_records.write_damon_records(records, str(path), fmt) is None
    info = damo.import_trace(path, tmp_path / "d.parquet")
    assert info["format"] == fmt and info["targets"] == 2
    back = _damo_records.parse_json_file(str(path)) if fmt == "json" else _damo_records.parse_compressed_json(str(path))
    _check_against(tmp_path / "d.parquet", _expected_from_damo(back))
    meta = open_trace(tmp_path / "d.parquet").meta
    assert meta["damo_intervals"][0]["aggr_us"] in (100000, "100000", "100 ms")


@pytest.mark.skipif(shutil.which("file") is None, reason="damo's reader needs the file command")
def test_heatmap_looks_like_damos(tmp_path, damo_api):
    """Same record, same time and address window and resolution: the pictures agree."""
    exe = Path(sys.executable).with_name("damo")
    if not exe.exists():
        pytest.skip("damo command not installed next to the interpreter")
    damo.import_trace(REAL, tmp_path / "d.parquet")
    t = open_trace(tmp_path / "d.parquet")
    tb = pb = 12
    for rid in (0, 1):
        g = compute(t, HeatmapConfig(regions=[rid], time_bins=tb, page_bins=pb))[0][0]
        tmin, tmax = compute(t, HeatmapConfig(regions=[rid], time_bins=tb, page_bins=pb))[1:]
        r, t0 = t.regions[rid], t.meta["t0_ns"]
        cmd = [
            str(exe),
            "report",
            "heatmap",
            "--input",
            str(REAL),
            "--output",
            "raw",
            "--resol",
            str(tb),
            str(pb),
            "--time_range",
            str(t0 + tmin),
            str(t0 + tmax),
            "--address_range",
            str(r.base + g.page_lo * 4096),
            str(r.base + g.page_hi * 4096),
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        raw = np.array(
            [[float(x) if x != "NaN" else 0.0 for x in ln.split()] for ln in res.stdout.splitlines() if ln.strip()]
        )
        theirs = raw[:, 2].reshape(tb, pb).T  # damo prints time-major rows; ours is (page bin, time bin)
        ours = g.grid
        assert ours.shape == theirs.shape
        # damo weighs each snapshot by its time inside the pixel, pagecast puts it in its start's bin:
        # the scale differs (snapshots per bin), the picture must not
        corr = np.corrcoef(ours.ravel(), theirs.ravel())[0, 1]
        assert corr > 0.98, (rid, corr)
        hot_ours, hot_theirs = ours > np.median(ours), theirs > np.median(theirs)
        assert (hot_ours == hot_theirs).mean() > 0.9


def test_damo_record_through_pipeline(tmp_path, capsys):
    tr = tmp_path / "d.parquet"
    assert cli_main(["import", "damo", str(REAL), "-o", str(tr), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 9773
    assert cli_main(["info", str(tr), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["demand_rows"] == s["kinds"]["RANGE_ACCESSED"] == 4634 and s["kinds"]["RANGE_IDLE"] == 5139
    c = open_trace(tr).read()
    acc = c["kind"] == Kind.RANGE_ACCESSED
    n = c["ip"][acc].astype(np.int64)
    first = np.repeat(c["page"][acc], n) + np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
    touched = np.unique(np.repeat(c["region"][acc].astype(np.int64), n) << 40 | first)
    assert s["unique_pages"] == len(touched)  # every page of every accessed range, idle ranges not
    assert cli_main(["simulate", str(tr), "--capacity", "20", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert 0 < sim["faults"] <= 4634
    assert cli_main(["heatmap", str(tr), "-o", str(tmp_path / "h.png"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["events"] > 0 and (tmp_path / "h.png").stat().st_size > 1000
    m = tmp_path / "m.pt"
    assert cli_main(["train", str(tr), "-o", str(m), *TINY_TRAIN]) == 0
    assert m.exists()


def _rec(regions: str) -> str:
    return '[{"target_id": 1, "snapshots": [{"start_time": 100, "end_time": 200, "regions": [' + regions + "]}]}]"


GOOD_REGION = '{"start": 4096, "end": 8192, "nr_accesses": {"samples": 2, "percent": null}, "age": {"usec": null, "aggr_intervals": 1}}'


@pytest.mark.parametrize(
    "data,what",
    [
        (zlib.compress(_rec(GOOD_REGION).encode())[:-6], "truncated zlib"),
        (_rec(GOOD_REGION).replace("]}]}]", "]}]").encode(), ":1: bad JSON"),
        (_rec(GOOD_REGION.replace("4096", '"4k"')).encode(), "record 0, snapshot 0, region 0: bad start '4k'"),
        (_rec(GOOD_REGION.replace('"end": 8192', '"end": 4096')).encode(), "region 0: empty or reversed range"),
        (_rec(GOOD_REGION.replace('"samples": 2', '"samples": -1')).encode(), "negative nr_accesses"),
        (_rec(GOOD_REGION.replace('"end": 8192', '"end": 8200')).encode(), "not 4 KiB aligned"),
        (b'{"x": 1}', "not a damo record"),
        (b"kdamond.0 4452 [000] 82877.315633: damon:damon_aggregated:", "not a damo record"),
        (b"[\n1,\n]", ":3: bad JSON"),
    ],
)
def test_malformed_records(tmp_path, capsys, data, what):
    src = tmp_path / "bad.data"
    src.write_bytes(data)
    assert cli_main(["import", "damo", str(src), "-o", str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.data" in err and what in err, err
    assert not (tmp_path / "o.parquet").exists()


def _reference(doc) -> dict[str, np.ndarray]:
    """Expected rows straight from a JSON document (plain Python, for the fuzz)."""

    def num(v):
        if isinstance(v, bool):
            raise ValueError
        if isinstance(v, int):
            return v
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, str) and v.replace(",", "").strip().isascii() and v.replace(",", "").strip().isdigit():
            return int(v.replace(",", "").strip())
        raise ValueError

    rows = []
    t0 = None
    snaps = []
    for ti, r in enumerate(doc):
        for s in r["snapshots"]:
            snaps.append((num(s["start_time"]), ti, s))
            num(s["end_time"])
    for t, ti, s in sorted(snaps, key=lambda x: x[0]):
        t0 = t if t0 is None else min(t0, t)
        for reg in s["regions"]:
            na = reg["nr_accesses"]
            acc = num(na["samples"] if isinstance(na, dict) else na)
            a, b = num(reg["start"]), num(reg["end"])
            if not (0 <= a < b < 1 << 64) or not 0 <= acc < 1 << 31 or (a | b) % 4096:
                raise ValueError
            rows.append((t, a, b, acc, ti))
    a = np.array(rows, dtype=object)
    return {
        "t": (a[:, 0] - t0).astype(np.int64),
        "start": a[:, 1].astype(np.uint64),
        "end": a[:, 2].astype(np.uint64),
        "acc": a[:, 3].astype(np.int64),
        "target": a[:, 4].astype(np.int64),
        "t0": t0,
    }


def test_fuzz_records(tmp_path):
    doc = json.loads(zlib.decompress(REAL.read_bytes()))
    doc[0]["snapshots"] = doc[0]["snapshots"][:12]
    base = json.dumps(doc, indent=1)
    digits = [k for k, ch in enumerate(base) if ch.isdigit()]
    rng = random.Random(99)
    outcomes = {"error": 0, "ok": 0}
    for i in range(150):
        s = list(base)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(s))
            op = rng.random()
            k = rng.choice(digits)
            if op < 0.4 and k < len(s) and s[k].isdigit():  # still JSON, other numbers (ranges may turn reversed)
                s[k] = rng.choice("0123456789")
            elif op < 0.7:
                s[pos] = rng.choice('0123456789,"-[]{}: ex.')
            elif op < 0.8:
                del s[pos : pos + rng.randint(1, 5)]
            else:
                del s[pos:]
        text = "".join(s)
        data = zlib.compress(text.encode()) if i % 2 else text.encode()
        if i % 7 == 0:
            data = data[: rng.randrange(1, len(data))]
        src, out = tmp_path / f"r{i}.data", tmp_path / f"r{i}.parquet"
        src.write_bytes(data)
        try:
            damo.import_trace(src, out)
        except PagecastError as e:
            assert "\n" not in str(e) and str(src) in str(e)
            assert not out.exists()
            outcomes["error"] += 1
            continue
        raw = zlib.decompress(data) if i % 2 else data
        _check_against(out, _reference(json.loads(raw)))
        outcomes["ok"] += 1
    assert outcomes["error"] > 30 and outcomes["ok"] > 5, outcomes


def test_fuzz_record_numbers(tmp_path):
    """Every kind of malformed number (tests/_fuzz.py's edge values: '²', 21 digits, NaN,
    1e308, '', '0x', bytes that are not UTF-8, ...), bare or quoted as damo writes some:
    a one-line error naming the file, or rows equal to the reference; never a traceback,
    never a temporary file left behind."""
    doc = json.loads(zlib.decompress(REAL.read_bytes()))
    doc[0]["snapshots"] = doc[0]["snapshots"][:4]
    base = json.dumps(doc, indent=1)
    rng = np.random.default_rng(11)
    outcomes = {"error": 0, "ok": 0}
    for i in range(160):
        what, text = replace_number(base, rng, quoted=bool(i % 2))
        data = text.encode("utf-8", "surrogateescape")
        src, out = tmp_path / f"n{i}.data", tmp_path / f"n{i}.parquet"
        src.write_bytes(zlib.compress(data) if i % 3 == 0 else data)
        try:
            damo.import_trace(src, out)
        except PagecastError as e:
            assert "\n" not in str(e) and str(src) in str(e), what
            assert not out.exists(), what
            outcomes["error"] += 1
        else:
            _check_against(out, _reference(json.loads(data)))
            outcomes["ok"] += 1
        assert not list(tmp_path.glob(".*.tmp")), what
    assert outcomes["error"] > 40 and outcomes["ok"] > 0, outcomes  # most edge values make a record invalid


@pytest.mark.slow
def test_large_record_streams(tmp_path):
    """4,000 snapshots x 50 regions, zlib-compressed: parsing holds the rows as arrays (24
    bytes a region), never the JSON text or its objects, so Python's traced peak while the
    record is read stays far below the text. (The trace writer's row-group buffers, a fixed
    million rows, come after and are the writer's own.)"""
    import tracemalloc

    n_snap, n_reg = 4_000, 50
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 64, (n_snap, n_reg)) * 4096
    ends = 0x7F00_0000_0000 + np.cumsum(sizes, axis=1)
    starts = ends - sizes
    acc = rng.choice([0, 0, 1, 7, 20], (n_snap, n_reg))
    parts = []
    for s in range(n_snap):
        regs = ", ".join(
            f'{{"start": {a}, "end": {b}, "nr_accesses": {{"samples": {k}, "percent": null}}, '
            f'"age": {{"usec": null, "aggr_intervals": 3}}}}'
            for a, b, k in zip(starts[s].tolist(), ends[s].tolist(), acc[s].tolist())
        )
        t = 10**9 + s * 100_000_000
        parts.append(f'{{"start_time": {t}, "end_time": {t + 100_000_000}, "regions": [{regs}]}}')
    text = (
        '[{"target_id": 7, "intervals": {"sample_us": 5000, "aggr_us": 100000, "ops_update_us": 1000000}, '
        '"snapshots": [' + ", ".join(parts) + "]}]"
    ).encode()
    del parts
    src = tmp_path / "big.json_compressed"
    src.write_bytes(zlib.compress(text, 1))
    text_size = len(text)
    del text
    tracemalloc.start()
    try:
        records, fmt = damo.read_records(src)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert fmt == "json_compressed" and len(records) == 1 and len(records[0].snapshots) == n_snap
    assert records[0].intervals["aggr_us"] == 100000
    del records
    print(
        f"JSON text {text_size / 1e6:.1f} MB, {n_snap * n_reg} regions, traced peak while parsing {peak / 1e6:.1f} MB"
    )
    assert peak < text_size / 4, (peak, text_size)
    info = damo.import_trace(src, tmp_path / "big.parquet")
    assert info["rows"] == n_snap * n_reg and info["snapshots"] == n_snap
    assert info["accessed_rows"] == int((acc > 0).sum())
    c = open_trace(tmp_path / "big.parquet").read()
    assert np.array_equal(c["tid"], acc.ravel()) and np.array_equal(c["ip"], (sizes // 4096).ravel())
    assert np.array_equal(c["t_ns"], np.repeat(np.arange(n_snap) * 100_000_000, n_reg))
