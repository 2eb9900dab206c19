"""Fuzzing every input format: seeded mutations of valid files (tests/_fuzz.py).

For each format, every mutated file must either be refused with a one-line
PagecastError or be read into numbers that are right: no other exception (a traceback
in the CLI), no hang (the watchdog ends the run), no negative or out-of-range values,
and for checksummed files (traces, schedules, model files, journals) the data read back
equals what was written whenever reading succeeds. The importers run in-process through
the functions the CLI calls; a few CLI runs at the end check the exit status and the
one-line stderr end to end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest
import torch

import pagecast
from _fuzz import cases, number_edges, watchdog
from pagecast.errors import PagecastError
from pagecast.importers import ai4mem, champsim, lackey, memai
from pagecast.importers.ai4mem_predictions import read_predictions_csv
from pagecast.trace import Region, Schedule, TraceWriter, open_trace, read_schedule, recover_partial, write_schedule

CASES = int(os.environ.get("PAGECAST_FUZZ_CASES", "120"))
MB2 = 2 << 20
A, B = 0x7FFF_A000_0000, 0x7FFF_B000_0000


def _refused_cleanly(e: PagecastError) -> None:
    msg = str(e)
    assert msg and "\n" not in msg and "\r" not in msg, repr(msg)


def _run(fn, *args, **kw):
    """Call an importer/reader: its result, or None when it refused the input with a one-line error."""
    with watchdog():
        try:
            return fn(*args, **kw)
        except PagecastError as e:
            _refused_cleanly(e)
            return None


def _sane_trace(path: Path, max_rows: int, sorted_times: bool = True) -> dict[str, np.ndarray]:
    """The invariants every imported trace keeps, whatever the input said."""
    t = open_trace(path)
    c = t.read()
    assert len(c["t_ns"]) <= max_rows
    assert (c["t_ns"] >= 0).all(), "negative t_ns"
    in_order = bool((np.diff(c["t_ns"]) >= 0).all())
    assert t.meta["sorted_by_time"] == in_order
    if sorted_times:
        assert in_order
    assert ((c["region"] >= -1) & (c["region"] < len(t.regions))).all()
    assert (c["page"] >= 0).all()
    for r in t.regions:
        assert r.length >= 0 and r.base >= 0
    mapped = c["region"] >= 0
    if mapped.any():
        pages = np.array([r.pages for r in t.regions])[c["region"][mapped]]
        assert (c["page"][mapped] < pages).all()
    return c


def _fuzz_text_importer(
    tmp_path: Path, seed_text: bytes, seed: int, run, sorted_times: bool = True, edge_line: int = 0
) -> int:
    """Run ``run(src, out)`` on mutations of ``seed_text`` (random ones, then every number of
    line ``edge_line`` replaced by each edge value); returns how many were accepted."""
    src, accepted = tmp_path / "in.txt", 0
    max_rows = seed_text.count(b"\n") + 64
    mutations = [*cases(seed_text, seed, CASES, text=True), *number_edges(seed_text, edge_line)]
    for i, (_, what, data) in enumerate(mutations):
        src.write_bytes(data)
        out = tmp_path / f"o{i}.parquet"
        if _run(run, src, out) is not None:
            accepted += 1
            _sane_trace(out, max_rows + data.count(b"\n"), sorted_times)
            out.unlink()
    assert 0 < accepted < len(mutations)  # the seed is valid, some mutations are too, many are refused
    return accepted


# --------------------------------------------------------------------------------- importers

AI4MEM_CSV = (
    "# ---- snapshot @ 2025-12-14 20:59:03 ----\n"
    "Category,EventName,Address,StartTime_ns,EndTime_ns,Duration_ns,Host_Phys_Info,Mapped_File\n"
    "KERNEL,k(float*, int, float),7,0x100000,1000,1500,500,1024,1,1,1024,1,1,0,0,16,127401984,0\n"
    + "".join(
        f"UVM,{ev},{A + 0x1000 * i:#x},{1100 + 10 * i},,,NOT_RESIDENT,\n"
        for i, ev in enumerate(["GPU_PAGE_FAULT", "MIGRATE_HtoD", "MIGRATE_DtoH"] * 6)
    )
    + "# ---- snapshot @ 2025-12-14 20:59:13 ----\n"
    "Category,EventName,Address,StartTime_ns,EndTime_ns,Duration_ns,Host_Phys_Info,Mapped_File\n"
    f"UVM,GPU_PAGE_FAULT,{B + 0x5000:#x},1300,,,NOT_RESIDENT,\n"
    "KERNEL,g(int),8,0x100000,2000,2600,600,64,1,1\n"
).encode()


def test_fuzz_ai4mem_collector_csv(tmp_path):
    _fuzz_text_importer(tmp_path, AI4MEM_CSV, 1, lambda s, o: ai4mem.import_trace(s, o), edge_line=2)  # a KERNEL row
    _fuzz_text_importer(tmp_path, AI4MEM_CSV, 12, lambda s, o: ai4mem.import_trace(s, o), edge_line=3)  # a UVM row


PREDICTIONS = (
    "Timestamp_ns,Prefetch_Address,Confidence\n"
    + "".join(f"{1000 + 7 * i},{A + 4096 * i:#x},{0.5 + i / 100}\n" for i in range(20))
).encode()


def test_fuzz_ai4mem_predictions_csv(tmp_path):
    src, accepted = tmp_path / "p.csv", 0
    regions = [Region(0, "a", "managed", base=A, length=MB2)]
    for i, what, data in [*cases(PREDICTIONS, 2, CASES, text=True), *number_edges(PREDICTIONS, 1)]:
        src.write_bytes(data)
        s = _run(read_predictions_csv, src, regions)
        if s is None:
            continue
        accepted += 1
        assert (s.t_ns >= 0).all() and np.isfinite(s.score).all() and (s.page >= 0).all()
        assert len(s) <= data.count(b"\n") + 1
        out = write_schedule(tmp_path / "s.parquet", s)
        back, want = read_schedule(out), s.sorted()
        for c in ("t_ns", "region", "page", "score"):
            np.testing.assert_array_equal(getattr(back, c), getattr(want, c))
    assert 0 < accepted < CASES + 20 * 3  # some mutations are valid, many are refused


LACKEY = (
    "==1== Lackey, an example Valgrind tool\n"
    + "".join(
        f"I  0401{i:04x},3\n L {0x1FFE_FFF0_00 + 64 * i:x},8\n S {0x4000_0000 + 8 * i:x},4\n M {0x1FFE_FFF0_00:x},8\n"
        for i in range(12)
    )
    + "==1== done\n"
).encode()


def test_fuzz_lackey(tmp_path):
    _fuzz_text_importer(tmp_path, LACKEY, 3, lambda s, o: lackey.import_trace(s, o, instructions=True), edge_line=2)


CHAMPSIM = "".join(
    f"{10 * i}, {100 + 7 * i}, {0x7F00_0000_0000 + 4096 * (i % 5) + 64:x}, 401a{i:02x}, {i % 2}\n" for i in range(24)
).encode()


def test_fuzz_champsim_loads(tmp_path):
    ghz = iter([None, 3.5, 0.001] * 2 * CASES)
    _fuzz_text_importer(
        tmp_path, CHAMPSIM, 4, lambda s, o: champsim.import_trace(s, o, cpu_ghz=next(ghz)), sorted_times=False
    )  # a load trace may go back in time: kept, flagged


def test_fuzz_champsim_prefetch(tmp_path):
    loads = tmp_path / "loads.txt"
    loads.write_bytes(CHAMPSIM)
    champsim.import_trace(loads, tmp_path / "c.parquet")
    trace = open_trace(tmp_path / "c.parquet")
    seed = "".join(f"{5 + 10 * i} {0x7F00_0000_0000 + 4096 * (i % 7):x}\n" for i in range(16)).encode()
    pf, bad_loads, accepted = tmp_path / "pf.txt", tmp_path / "bad_loads.txt", 0
    for i, what, data in [*cases(seed, 5, CASES, text=True), *number_edges(seed, 0)]:
        pf.write_bytes(data)
        s = _run(champsim.read_prefetch_file, pf, trace, loads)
        if s is not None:
            accepted += 1
            assert (s.trigger >= 0).all() and (s.trigger < trace.num_rows).all() and (s.t_ns >= 0).all()
            assert (s.page >= 0).all()
    for i, what, data in cases(CHAMPSIM, 6, CASES // 4, text=True):  # the --loads file damaged instead
        bad_loads.write_bytes(data)
        s = _run(champsim.read_prefetch_file, tmp_path / "pf.txt", trace, bad_loads)
        assert s is None or ((s.trigger >= 0).all() and (s.t_ns >= 0).all())
    assert 0 < accepted < CASES + 20 * 2


def _memai_table(n: int = 300) -> pa.Table:
    return pa.table(
        {
            "Timestamp": 5_000 + np.arange(n, dtype=np.int64) * 30,
            "Vaddr": (0x5555_0000_0000 + (np.arange(n) % 64) * 4096 + 8).astype(np.uint64),
            "Phase": (np.arange(n) * 3 // n % 2).astype(np.int32),
            "Instrs": np.arange(n, dtype=np.int64) * 3,
        }
    )


def test_fuzz_memai_feather(tmp_path):
    seed = tmp_path / "seed.feather"
    feather.write_feather(_memai_table(), seed, chunksize=64, compression="uncompressed")
    data, src, accepted = seed.read_bytes(), tmp_path / "m.feather", 0
    for i, what, mutated in cases(data, 7, CASES, text=False):
        src.write_bytes(mutated)
        out = tmp_path / f"o{i}.parquet"
        ghz = [None, 2.0][i % 2]
        if _run(memai.import_trace, src, out, cpu_ghz=ghz) is not None:
            accepted += 1
            _sane_trace(out, 300, sorted_times=False)
    assert accepted < CASES


@pytest.mark.parametrize(
    "column,value",
    [
        ("Timestamp", float("nan")),
        ("Timestamp", float("inf")),
        ("Timestamp", 2.0**63),
        ("Timestamp", -1.0),
        ("Vaddr", float("nan")),
        ("Vaddr", -4096.0),
        ("Vaddr", 2.0**64),
        ("Phase", float("nan")),
    ],
)
def test_memai_edge_values_refused(tmp_path, column, value):
    t = _memai_table(50)
    col = t.column(column).to_numpy().astype(np.float64)
    col[7] = value
    feather.write_feather(t.set_column(t.schema.get_field_index(column), column, pa.array(col)), tmp_path / "m.feather")
    with pytest.raises(PagecastError, match=rf"m.feather:8: {column} .* out of range"):
        memai.import_trace(tmp_path / "m.feather", tmp_path / "o.parquet")


# ------------------------------------------------------------------- checksummed pagecast files


def _write_trace(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    n = 3000
    cols = {
        "t_ns": np.cumsum(rng.integers(1, 100, n)),
        "region": rng.integers(0, 3, n).astype(np.int32),
        "page": rng.integers(0, 256, n),
        "kind": rng.integers(0, 3, n).astype(np.uint8),
        "flags": rng.integers(0, 4, n).astype(np.uint8),
        "tid": rng.integers(1, 4, n).astype(np.int32),
        "ip": rng.integers(0, 1 << 40, n).astype(np.uint64),
        "bytes": rng.integers(0, 4096, n).astype(np.uint32),
    }
    regions = [
        Region(0, "a", length=1 << 20),
        Region(1, "/data/w.bin", kind="file", path="/data/w.bin", length=1 << 20),
        Region(2, "heap", kind="heap", length=1 << 20),
    ]
    with TraceWriter(path, regions=regions, row_group_rows=1024, meta={"command": ["x"]}) as w:
        w.write(**cols)
        w.add_kernel("k", 1, 2)
    return cols


def _trace_equal(t, cols, regions, meta, kernels) -> bool:
    c = t.read()
    return (
        all(np.array_equal(c[k], cols[k]) for k in cols)
        and [r.to_dict() for r in t.regions] == regions
        and t.meta == meta
        and t.kernels == kernels
    )


def test_fuzz_trace_files(tmp_path):
    src = tmp_path / "t.parquet"
    cols = _write_trace(src)
    orig = open_trace(src)
    regions, meta, kernels = [r.to_dict() for r in orig.regions], orig.meta, orig.kernels
    data, m, refused = src.read_bytes(), tmp_path / "m.parquet", 0
    for i, what, mutated in cases(data, 8, 2 * CASES, text=False):
        m.write_bytes(mutated)
        with watchdog():
            try:
                t = open_trace(m)
                ok = _trace_equal(t, cols, regions, meta, kernels)
            except PagecastError as e:
                _refused_cleanly(e)
                refused += 1
                continue
        assert ok, f"case {i} ({what}): the trace read back different data without an error"
    assert refused > CASES  # most mutations hit checksummed bytes


def test_fuzz_schedule_files(tmp_path):
    rng = np.random.default_rng(1)
    n = 500
    s = Schedule(
        np.arange(n) // 2,
        np.arange(n) * 10,
        rng.integers(0, 2, n),
        rng.integers(0, 100, n),
        rng.random(n).astype(np.float32),
        regions=[Region(0, "a"), Region(1, "b")],
        meta={"name": "x"},
    )
    src = write_schedule(tmp_path / "s.parquet", s)
    ref = read_schedule(src)
    data, m = src.read_bytes(), tmp_path / "m.parquet"
    for i, what, mutated in cases(data, 9, CASES, text=False):
        m.write_bytes(mutated)
        got = _run(read_schedule, m)
        if got is not None:
            assert all(
                np.array_equal(getattr(got, c), getattr(ref, c)) for c in ("trigger", "t_ns", "region", "page", "score")
            )
            assert got.meta == ref.meta and [r.to_dict() for r in got.regions] == [r.to_dict() for r in ref.regions]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    from pagecast.learn.dataset import DatasetSpec, prepare, read_demand
    from pagecast.learn.models import ModelConfig
    from pagecast.learn.synthetic import write_pattern_trace
    from pagecast.learn.train import TrainConfig, save_model, train_model

    d = tmp_path_factory.mktemp("fuzzmodel")
    torch.set_num_threads(1)
    data = prepare(
        [read_demand(write_pattern_trace(d / "p.parquet", 1500))],
        DatasetSpec(horizon=4, vocab_size=32),
        val_fraction=0.1,
        test_fraction=0.1,
    )
    mcfg = ModelConfig(
        kind="lstm", n_classes=len(data.vocab), n_slots=data.table.unknown, seq_len=8, horizon=4, hidden=8, embed=8
    )
    tcfg = TrainConfig(epochs=1, patience=1, batch=32, seed=0, threads=1)
    return save_model(d / "m.pt", train_model(data, mcfg, tcfg), data, DatasetSpec(horizon=4, vocab_size=32), tcfg)


def test_fuzz_model_files(tmp_path, model_file):
    from pagecast.learn.train import load_model

    ref = load_model(model_file)
    ref_state = {k: v.clone() for k, v in ref.model.state_dict().items()}
    data, m, refused = model_file.read_bytes(), tmp_path / "m.pt", 0
    for i, what, mutated in cases(data, 10, CASES, text=False):
        m.write_bytes(mutated)
        got = _run(load_model, m)
        if got is None:
            refused += 1
            continue
        state = got.model.state_dict()
        assert all(torch.equal(state[k], ref_state[k]) for k in ref_state), (
            f"case {i} ({what}): other weights, no error"
        )
        assert got.config == ref.config and np.array_equal(got.vocab.keys, ref.vocab.keys)
        assert got.table.to_list() == ref.table.to_list()
    assert refused > CASES // 2


def _write_journal(path: Path) -> tuple[dict[str, np.ndarray], list[dict]]:
    """A journal as a recorder killed midway leaves it (the writer is aborted, never closed)."""
    n = 2000
    cols = {
        "t_ns": np.arange(n, dtype=np.int64) * 3,
        "region": (np.arange(n) % 2).astype(np.int32),
        "page": np.arange(n, dtype=np.int64) % 97,
    }
    w = TraceWriter(path, journal=True, row_group_rows=400, source="fuzz")
    for i in range(2):
        w.add_region(Region(i, f"r{i}", "anon", length=4096 * 100, order=i))
    w.write(**cols)
    regions = [r.to_dict() for r in w.regions]
    w.abort()
    return cols, regions


@pytest.mark.parametrize("target,text", [("partial", False), ("regions", True)])
def test_fuzz_journals(tmp_path, target, text):
    jdir = tmp_path / "j"
    jdir.mkdir()
    cols, regions = _write_journal(jdir / "t.parquet")
    partial, side = jdir / "t.parquet.partial", jdir / "t.parquet.partial.regions"
    orig = {p: p.read_bytes() for p in (partial, side)}
    damaged = partial if target == "partial" else side
    out = tmp_path / "out.parquet"
    for i, what, mutated in cases(orig[damaged], 11, CASES, text=text):
        for p in (partial, side):
            p.write_bytes(mutated if p == damaged else orig[p])
        out.unlink(missing_ok=True)
        rec = _run(recover_partial, partial, out)
        assert partial.read_bytes() == (mutated if damaged == partial else orig[partial]), (
            "recover wrote over its input"
        )
        if rec is None:
            assert not out.exists()
            continue
        t = open_trace(out)
        c = t.read()
        assert rec.rows == len(c["t_ns"]) <= len(cols["t_ns"])
        for k, v in cols.items():  # what was recovered is exactly a prefix of what was written
            assert np.array_equal(c[k], v[: rec.rows]), f"case {i} ({what}): recovered rows differ"
        got = [r.to_dict() for r in t.regions]
        assert got == regions[: len(got)], f"case {i} ({what}): recovered regions differ"


# --------------------------------------------------------------------------------- the CLI


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(Path(pagecast.__file__).resolve().parents[1]))  # the pagecast under test
    return subprocess.run(
        [sys.executable, "-m", "pagecast", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    err = proc.stderr.strip().splitlines()
    assert proc.returncode in (1, 2) and len(err) == 1, proc.stderr
    for w in words:
        assert w in err[0], err[0]
    return err[0]


def test_cli_one_line_errors_on_damaged_inputs(tmp_path):
    _write_trace(tmp_path / "t.parquet")
    data = bytearray((tmp_path / "t.parquet").read_bytes())
    data[len(data) // 3] ^= 0x40  # inside a data page: the page checksum fails
    (tmp_path / "bad.parquet").write_bytes(bytes(data))
    _one_line_error(
        _cli("simulate", "bad.parquet", "--prefetcher", "nextline", cwd=tmp_path), "bad.parquet", "corrupt trace data"
    )
    (tmp_path / "c.txt").write_bytes(CHAMPSIM)
    for ghz in ("0", "nan"):  # the other bad values are checked in-process (test_reliability.py)
        _one_line_error(
            _cli("import", "champsim", "c.txt", "-o", "c.parquet", "--cpu-ghz", ghz, cwd=tmp_path), "--cpu-ghz"
        )
    assert not (tmp_path / "c.parquet").exists()
    (tmp_path / "in.csv").write_bytes(PREDICTIONS)
    before = (tmp_path / "in.csv").read_bytes()
    _one_line_error(_cli("recover", "in.csv", cwd=tmp_path), "in.csv", "not a pagecast journal")
    assert (tmp_path / "in.csv").read_bytes() == before
    weird = tmp_path / "a\nb.parquet"
    weird.write_bytes(b"junk")
    line = _one_line_error(_cli("info", str(weird), cwd=tmp_path), "a\\nb.parquet")
    assert "not a Parquet trace" in line
