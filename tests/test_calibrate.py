"""`pagecast calibrate` on this machine's disk: a stored model, reused until re-measured,
and the simulator taking its link from it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pagecast.cli import main
from pagecast.sim.config import SimConfig, link_from_device_model
from pagecast.util.device_model import load_model, model_path
from sim_helpers import mixed_pages, write_trace

SMALL = ["--file-mib", "16", "--seconds", "0.2", "--queue-depths", "1,4", "--fill-pages", "16"]


@pytest.fixture()
def disk_dir(tmp_path: Path) -> Path:
    # on the repository's disk (tmp_path may be tmpfs elsewhere: no O_DIRECT, no device)
    d = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata" / f"cal-{os.getpid()}-{tmp_path.name}"
    d.mkdir(parents=True, exist_ok=True)
    yield d
    d.rmdir()


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_calibrate_stores_and_reuses_model(disk_dir, cache, capsys):
    assert main(["calibrate", "--dir", str(disk_dir), "--json", *SMALL]) == 0
    first = json.loads(capsys.readouterr().out)
    stored = model_path(disk_dir)
    assert first["measured_now"] is True and Path(first["model_file"]) == stored and stored.is_relative_to(cache)
    m = load_model(stored)
    assert m.seq_read_bytes_per_s > 0
    assert [r.queue_depth for r in m.random_reads] == [1, 4]
    assert all(r.iops > 0 and 0 < r.latency_ns_p50 <= r.latency_ns_p99 for r in m.random_reads)
    assert [f.how for f in m.fills] == ["fault", "fadvise", "readaround", "pager"]
    ra = m.fill("readaround")
    assert ra.ns_per_page_batched and ra.ns_per_page_batched > 0
    from pagecast.util.device_model import read_ahead_kb_of

    assert f"distinct {read_ahead_kb_of(disk_dir.stat().st_dev)} KiB read-around windows" in ra.note
    assert all(0 < f.ns_p50 <= f.ns_p99 for f in m.fills if not f.note.startswith("not measured"))
    assert list(disk_dir.iterdir()) == []  # the test file is gone
    # stored: shown again, not re-measured
    assert main(["calibrate", "--dir", str(disk_dir), "--json", *SMALL]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["measured_now"] is False and again["measured_unix"] == first["measured_unix"]
    assert main(["calibrate", "--dir", str(disk_dir), "--remeasure", "--json", *SMALL]) == 0
    fresh = json.loads(capsys.readouterr().out)
    assert fresh["measured_now"] is True and fresh["measured_unix"] > first["measured_unix"]
    assert main(["calibrate", "--dir", str(disk_dir)]) == 0
    assert "sequential read" in capsys.readouterr().out


def test_simulator_takes_link_from_model(disk_dir, cache, tmp_path, capsys):
    out = tmp_path / "model.json"
    assert main(["calibrate", "--dir", str(disk_dir), "-o", str(out), *SMALL]) == 0
    capsys.readouterr()
    link = link_from_device_model(str(out))
    m = load_model(out)
    assert link["link_bytes_per_s"] == m.seq_read_bytes_per_s
    assert link["link_latency_ns"] == max(int(m.read_latency_ns - 4096e9 / m.seq_read_bytes_per_s), 0)
    cfg = SimConfig().with_device_model(str(out))
    assert cfg.link_latency_ns == link["link_latency_ns"] and cfg.device_model == str(out)
    trace = write_trace(tmp_path / "t.parquet", mixed_pages(2000))
    assert main(["simulate", str(trace), "--capacity", "100", "--json", "--device-model", str(out)]) == 0
    by_model = json.loads(capsys.readouterr().out)
    assert (
        main(
            [
                "simulate",
                str(trace),
                "--capacity",
                "100",
                "--json",
                "--link-latency-ns",
                str(link["link_latency_ns"]),
                "--bandwidth",
                repr(link["link_bytes_per_s"] / 1e9),
            ]
        )
        == 0
    )
    by_hand = json.loads(capsys.readouterr().out)
    assert by_model["stall_ns"] == by_hand["stall_ns"] and by_model["faults"] == by_hand["faults"]
    assert main(["simulate", str(trace), "--capacity", "100", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert default["stall_ns"] != by_model["stall_ns"]


def test_bad_inputs_one_line(tmp_path, cache, capsys):
    trace = write_trace(tmp_path / "t.parquet", mixed_pages(100))
    assert main(["simulate", str(trace), "--device-model", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none.json" in err[0] and "pagecast calibrate" in err[0]
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1}')
    assert main(["simulate", str(trace), "--device-model", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a pagecast device model" in err[0]
    assert main(["calibrate", "--dir", str(tmp_path / "nodir")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main(["calibrate", "--dir", str(tmp_path), "--queue-depths", "4,8"]) == 2
    assert "include 1" in capsys.readouterr().err
